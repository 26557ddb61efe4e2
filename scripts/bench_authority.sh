#!/usr/bin/env bash
# What the `:authority` repair costs the server, in instructions per request (valgrind counts
# instructions, so other jobs on a shared machine cannot move the figure).
#
#   scripts/bench_authority.sh [N1 N2]      # default 1000 3000 requests
#
# For each case a zrpc server (`authority_cost --serve on|off`, the default chain, shedding off)
# runs under callgrind while h2load (-c 10 -m 50) sends N requests; the marginal cost is
# (Ir(N2) - Ir(N1)) / (N2 - N1), which cancels start-up and shutdown. Cases:
#   off/valid : repair switched off, normal client (`:authority` = the server address)
#   on/valid  : repair on (the default), normal client: the price every client pays
#   on/2-host : repair on, grpc-go-style `:authority: 127.0.0.1:P,127.0.0.1:P` (repaired per block)
# Needs valgrind and h2load (Debian: valgrind, nghttp2-client).
set -euo pipefail
cd "$(dirname "$0")/.."
n1=${1:-1000}
n2=${2:-3000}
cargo build --release -q -p zrpc-tests --bin authority_cost
bin=target/release/authority_cost
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf '\x00\x00\x00\x00\x07\x0a\x05world' >"$dir/hello.bin"

# instructions <repair on|off> <two-host 0|1> <requests>
instructions() {
  local mode=$1 multi=$2 n=$3 out="$dir/cg.out" log="$dir/vg.log" addr authority
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" --serve "$mode" --exit-after "$n" \
    >"$dir/stdout" 2>"$log" &
  local pid=$!
  for _ in $(seq 1 600); do
    addr=$(sed -n 's/^listening //p' "$dir/stdout")
    [ -n "$addr" ] && break
    sleep 0.1
  done
  [ -n "$addr" ] || { echo "server did not start:" >&2; cat "$log" >&2; exit 1; }
  authority=$addr
  [ "$multi" = 1 ] && authority="127.0.0.1:${addr##*:},127.0.0.1:${addr##*:}"
  h2load -t 1 -c 10 -m 50 -n "$n" -d "$dir/hello.bin" \
    -H 'content-type: application/grpc' -H 'te: trailers' -H ":authority: $authority" \
    "http://$addr/greeter.Greeter/SayHello" | grep -q " $n succeeded, 0 failed"
  wait "$pid"
  sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$log"
}

printf '%-10s %14s %14s %12s\n' case "Ir(N=$n1)" "Ir(N=$n2)" "Ir/request"
declare -A per
for c in off/valid on/valid on/2-host; do
  mode=${c%%/*}
  multi=0
  [ "$c" = on/2-host ] && multi=1
  a=$(instructions "$mode" "$multi" "$n1")
  b=$(instructions "$mode" "$multi" "$n2")
  per[$c]=$(( (b - a) / (n2 - n1) ))
  printf '%-10s %14s %14s %12s\n' "$c" "$a" "$b" "${per[$c]}"
done
awk -v off="${per[off/valid]}" -v on="${per[on/valid]}" -v two="${per[on/2-host]}" 'BEGIN {
  printf "repair on vs off, normal client : %+.2f%% instructions per request\n", (on / off - 1) * 100
  printf "2-host vs 1-host, repair on     : %+.2f%% instructions per request\n", (two / on - 1) * 100
}'
