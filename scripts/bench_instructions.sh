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
# Measured (stop 19): bare tonic 56,540; zrpc, every middleware off 65,287; greeter-server full
# chain 76,583; greeter-server at 3611d86 72,162 instructions per request.
# Measured (stop 20, one run each): bare tonic 56,541; minimal 64,263; full chain 72,761;
# 3611d86 72,614. Runs of one binary differ by up to ~+-300 (thread scheduling changes h2's
# batching). With the default `Log.Level: info` the JSON formatter serialises every call's
# span fields: full chain 96,376 (3611d86: 95,292).
# Measured (issue 13, 725339b, one run each, same session): bare tonic 56,844; minimal 63,088
# (was 63,757); quiet full chain 68,332 (was 69,817). YAMLs: zrpc-bench's `quiet` and `minimal`.
# Measured (issue 13, lean chain + one status read per observer pair + no trace record on a disabled
# span, same session, two runs each, load 4-7): bare tonic 56,618/56,832 -> 56,726/56,630; minimal
# 62,925/62,843 -> 60,941/61,020 (0.929x); quiet 68,304/68,089 -> 67,646/67,738 (0.837x).
# Measured (issue 13, server part, one session, load 2-5; zrpc-bench serve --threads 1, YAMLs as
# zrpc-bench's quiet/minimal with fixed ports): bare tonic 56,898/56,740 -> 56,676/56,722/56,907;
# minimal 61,029/60,965 -> 59,933/59,898 (one `transport::Front` stage for the five transport
# layers, lean and governed chains as two tonic servers, no `Select` enum) -> 59,955/59,927
# (unboxed drain in the lean chain) (0.948x); quiet 67,743/67,714 -> 67,556/67,485 ->
# 66,722/66,733 (lazy timeout timer, boxed rejections and auth lookup state, no disabled span
# kept in the trace future) (0.850x).
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
