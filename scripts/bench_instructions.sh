#!/usr/bin/env bash
# Instructions per request of any gRPC greeter server, noise-free (valgrind counts instructions,
# so other jobs on a shared machine cannot move the figure).
#
#   scripts/bench_instructions.sh ADDR N1 N2 -- SERVER COMMAND...
#
# Runs SERVER COMMAND under callgrind twice; h2load (-c 10 -m 50) sends N1, then N2 SayHello
# calls to ADDR (the server must listen there); prints (Ir(N2) - Ir(N1)) / (N2 - N1), which
# cancels start-up and shutdown. The callgrind files stay in the printed directory, for
# `callgrind_annotate` (per-function diffs between two servers). Examples:
#
#   cargo build --release -p zrpc-bench -p zrpc-examples
#   scripts/bench_instructions.sh 127.0.0.1:18181 1000 4000 -- \
#     target/release/zrpc-bench serve --kind tonic --listen 127.0.0.1:18181 --events /dev/null --threads 1
#   scripts/bench_instructions.sh 127.0.0.1:18181 1000 4000 -- \
#     target/release/greeter-server -f server.yaml
#   # server.yaml: ListenOn: 127.0.0.1:18181, CpuThreshold: 0, Log: {Level: error}
#   # "minimal" adds Timeout: 0 and Middlewares: {Trace, Recover, Stat, Prometheus, Breaker: false}
#
# Use `Log.Level: error` to compare chains: at the default `info` the JSON log formatter serialises
# every call's span fields and dominates the difference. Runs of one binary differ by a few hundred
# instructions (thread scheduling changes h2's batching). Current figures: docs/benchmarks.md
# (`zrpc-bench overhead` runs the same method).
# Needs valgrind and h2load (Debian: valgrind, nghttp2-client).
set -euo pipefail
addr=$1 n1=$2 n2=$3
shift 3
[ "${1:-}" = "--" ] && shift
dir=$(mktemp -d)
printf '\x00\x00\x00\x00\x07\x0a\x05world' >"$dir/hello.bin"
call() {
  h2load "$@" -d "$dir/hello.bin" -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://$addr/greeter.Greeter/SayHello"
}
count() {
  local n=$1
  valgrind --tool=callgrind --callgrind-out-file="$dir/cg.$n" "${@:2}" >"$dir/out.$n" 2>"$dir/vg.$n" &
  local pid=$!
  for _ in $(seq 1 300); do
    call -n 1 -c 1 2>/dev/null | grep -q "1 succeeded" && break
    kill -0 "$pid" 2>/dev/null || { echo "server exited:" >&2; cat "$dir/vg.$n" >&2; exit 1; }
    sleep 0.2
  done
  call -t 1 -c 10 -m 50 -n "$n" | grep -q " $n succeeded, 0 failed" || { echo "h2load failed" >&2; exit 1; }
  kill -TERM "$pid"
  wait "$pid" || true
  sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$dir/vg.$n"
}
a=$(count "$n1" "$@")
b=$(count "$n2" "$@")
echo "Ir(N=$n1) $a  Ir(N=$n2) $b  instructions/request $(( (b - a) / (n2 - n1) ))"
echo "callgrind files: $dir/cg.$n1 $dir/cg.$n2"
