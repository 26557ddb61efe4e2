#!/usr/bin/env bash
# The integration and interop tests as a user runs them against one etcd of their own
# (`docker compose up -d etcd`, then ZRPC_TEST_ETCD_ENDPOINTS=127.0.0.1:2379): all their tests,
# in parallel, share ONE etcd, started here with the flags of docker-compose.yml's `etcd` service
# from the machine's `etcd` binary. Differences from the container, each for a reason:
#   - it listens on loopback only (the compose file publishes the port on 127.0.0.1 only);
#   - it advertises its loopback URL (no host named `etcd` resolves outside compose's network);
#   - its data dir is fresh (the compose volume keeps data across runs; CI starts clean) and in
#     memory (/dev/shm) where the machine has it;
#   - its client port is 2379 when free, else a free loopback port (and the peer port likewise).
# Tests that change or count cluster-wide state (kills, restarts, compaction, auth, watchers,
# members) start an etcd of their own beside it (EtcdServer::start_exclusive in tests/src/etcd.rs);
# their notes are listed at the end.
#
#   scripts/shared_etcd.sh [test name filter...]
#
# The test binaries are the ones `cargo test` built (scripts/test_binaries.sh); nothing is rebuilt
# (after a build other than scripts/test.sh's, set ZRPC_TEST_SELECTION as that script says).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v etcd >/dev/null 2>&1 || { echo "shared etcd mode: no etcd binary" >&2; exit 1; }
start=$(date +%s)

port_free() {
  python3 -c 'import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try: s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError: sys.exit(1)' "$1"
}
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
client_port=2379
port_free "$client_port" || client_port=$(free_port)
peer_port=2380
port_free "$peer_port" || peer_port=$(free_port)

dir=$(mktemp -d -t zrpc-shared-etcd-XXXXXX)
# etcd's data in memory where the machine has it, as the tests' own etcds (tests/src/etcd.rs):
# etcd preallocates 64 MiB per WAL file and exits when a write fails, so on a disk that other
# jobs fill it would be the first to go.
if [ -d /dev/shm ] && data=$(mktemp -d -p /dev/shm zrpc-shared-etcd-data-XXXXXX 2>/dev/null); then :; else data="$dir/data"; fi
etcd_pid=
status=0
monitor_pid=
cleanup() {
  if [ -n "$monitor_pid" ]; then kill "$monitor_pid" 2>/dev/null || true; fi
  if [ -n "$etcd_pid" ]; then kill "$etcd_pid" 2>/dev/null || true; wait "$etcd_pid" 2>/dev/null || true; fi
  rm -rf "$data"
  # the test output stays for a failed run
  if [ "$status" = 0 ]; then rm -rf "$dir"; else echo "shared etcd mode: logs in $dir" >&2; fi
}
trap cleanup EXIT

# docker-compose.yml, service etcd (peer URLs keep its `localhost`)
etcd \
  --name=etcd \
  --initial-cluster=etcd=http://localhost:$peer_port \
  --initial-advertise-peer-urls=http://localhost:$peer_port \
  --data-dir="$data" \
  --listen-client-urls=http://127.0.0.1:$client_port \
  --advertise-client-urls=http://127.0.0.1:$client_port \
  --listen-peer-urls=http://127.0.0.1:$peer_port \
  >"$dir/etcd.log" 2>&1 &
etcd_pid=$!
# its healthcheck: `etcdctl endpoint health`, every 2 s, 15 retries
healthy=
for _ in $(seq 1 15); do
  if ETCDCTL_API=3 etcdctl --endpoints="http://127.0.0.1:$client_port" endpoint health >/dev/null 2>&1; then
    healthy=1
    break
  fi
  sleep 2
done
if [ -z "$healthy" ]; then
  echo "shared etcd on 127.0.0.1:$client_port did not become healthy:" >&2
  tail -n 30 "$dir/etcd.log" >&2
  exit 1
fi
echo "shared etcd: $(etcd --version | head -1), 127.0.0.1:$client_port (peer $peer_port)"

out="$dir/out"
mkdir -p "$out"
# What the shared etcd went through, once a second (its open files and threads, or its end),
# so that a failed run says whether etcd was still there and what it held.
(
  while kill -0 "$etcd_pid" 2>/dev/null; do
    printf '%s fds=%s threads=%s\n' "$(date +%T)" \
      "$(ls /proc/"$etcd_pid"/fd 2>/dev/null | wc -l)" \
      "$(awk '/^Threads:/ {print $2}' /proc/"$etcd_pid"/status 2>/dev/null)"
    sleep 1
  done
  echo "$(date +%T) etcd (pid $etcd_pid) is gone"
) >"$dir/etcd-monitor.log" 2>&1 &
monitor_pid=$!
# Says what became of the shared etcd and of a test binary when the binary failed.
explain_failure() { # <name> <exit code>
  local code=$2
  if [ "$code" -gt 128 ]; then
    echo "  the $1 test binary ended on signal $((code - 128)) ($(kill -l "$((code - 128))" 2>/dev/null || echo '?')), exit code $code"
  else
    echo "  the $1 test binary exited with code $code"
  fi
  if kill -0 "$etcd_pid" 2>/dev/null; then
    echo "  the shared etcd still runs: $(tail -n 1 "$dir/etcd-monitor.log")"
  else
    echo "  the shared etcd is gone; its monitor's last lines and its log's:"
    tail -n 3 "$dir/etcd-monitor.log" | sed 's/^/    /'
    tail -n 15 "$dir/etcd.log" | sed 's/^/    /'
  fi
  echo "  free space: $(df -h --output=avail,target "$data" | tail -n 1) (etcd's data), $(df -h --output=avail,target "$dir" | tail -n 1) (the tests' output), $(df -h --output=avail,target . | tail -n 1) (the build)"
  echo "  open files allowed: $(ulimit -Sn) (hard $(ulimit -Hn)); the kernel's last lines:"
  (dmesg 2>/dev/null || echo "(dmesg not readable)") | tail -n 5 | sed 's/^/    /'
}
while read -r name bin; do
  echo "--- $name tests against the shared etcd"
  # cargo runs test binaries in their package's directory; --nocapture keeps the tests' notes
  ok=0
  (cd tests && ZRPC_TEST_ETCD_ENDPOINTS="127.0.0.1:$client_port" "$bin" --nocapture "$@") >"$out/$name.log" 2>&1 || ok=$?
  grep -E '^test result:' "$out/$name.log" || true
  if [ "$ok" != 0 ]; then
    status=1
    grep -E -A3 'panicked at' "$out/$name.log" | head -60 || true
    sed -n '/^failures:$/,$p' "$out/$name.log" | grep -E '^    [a-z_0-9:]+$' || true
    explain_failure "$name" "$ok"
  fi
done < <(scripts/test_binaries.sh integration interop)

echo "--- tests that ran on an etcd of their own or skipped (their notes):"
cat "$out"/*.log | grep -oE 'note: .*(runs on an etcd of its own|skipped).*' | sed 's/^/  /' | sort -u || true
echo "shared etcd mode: $(( $(date +%s) - start ))s"
exit "$status"
