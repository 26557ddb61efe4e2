#!/usr/bin/env bash
# Instructions per unary call of the zrpc client and of a bare tonic client against the same
# servers, noise-free (valgrind counts instructions, so other jobs on a shared machine cannot move
# the figure). The client-side counterpart of scripts/bench_instructions.sh.
#
#   scripts/bench_client_instructions.sh CLIENT_SERIAL N1 N2 [KIND...]
#
# Starts `CLIENT_SERIAL --serve` (two bare tonic Greeter servers, not under valgrind), then for
# each KIND (default: tonic zrpc1 zrpc2; any `client_serial --only` kind) runs
# `CLIENT_SERIAL --only KIND --threads 1` under callgrind twice, making N1 then N2 serial calls
# (after the same 500 warm-up calls), and prints (Ir(N2) - Ir(N1)) / (N2 - N1): the client's
# instructions per call, start-up, connection and shutdown cancelled. The client runs on a
# current-thread runtime (one thread: the count does not depend on how threads interleave).
# The callgrind files stay in the printed directory, for `callgrind_annotate` (per-function
# diffs between two kinds or two builds).
#
#   cargo build --release -p zrpc-tests --bin client_serial
#   scripts/bench_client_instructions.sh target/release/client_serial 2000 6000
#
# (zrpc-client builds rustix with `use-libc`: rustix's own vDSO parser crashes a client under
# valgrind. `zrpc-bench overhead` has the same count at -c 50 in its report, docs/benchmarks.md.)
# zrpc2 (two endpoints) moves by about a thousand instructions between runs: its picks differ.
# Needs valgrind (Debian: valgrind).
set -euo pipefail
bin=$1 n1=$2 n2=$3
shift 3
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(tonic zrpc1 zrpc2)
dir=$(mktemp -d)
mkfifo "$dir/stdin"
# the servers run until their stdin closes (fd 3, closed when this script exits)
"$bin" --serve <"$dir/stdin" >"$dir/addrs" &
server=$!
exec 3>"$dir/stdin"
trap 'exec 3>&-; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  [ -s "$dir/addrs" ] && break
  kill -0 "$server" 2>/dev/null || { echo "server exited" >&2; exit 1; }
  sleep 0.1
done
addrs=$(head -n 1 "$dir/addrs")
count() {
  local kind=$1 n=$2
  valgrind --tool=callgrind --callgrind-out-file="$dir/cg.$kind.$n" \
    "$bin" --only "$kind" --connect "$addrs" --serial "$n" --threads 1 \
    >"$dir/out.$kind.$n" 2>"$dir/vg.$kind.$n" ||
    { echo "$kind ($n calls) failed:" >&2; tail -n 20 "$dir/vg.$kind.$n" >&2; exit 1; }
  sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$dir/vg.$kind.$n"
}
for kind in "${kinds[@]}"; do
  a=$(count "$kind" "$n1")
  b=$(count "$kind" "$n2")
  printf '%-10s Ir(N=%s) %s  Ir(N=%s) %s  instructions/call %s\n' \
    "$kind" "$n1" "$a" "$n2" "$b" "$(((b - a) / (n2 - n1)))"
done
echo "callgrind files: $dir"
