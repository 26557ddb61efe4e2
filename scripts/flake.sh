#!/usr/bin/env bash
# Flake detector, run by hand (not in CI): runs the integration test binary RUNS times, the last
# HOG of them with the machine's CPUs kept busy (one busy loop per CPU, all killed at the end), and
# reports every test that failed at least once, with its count and the runs it failed in.
#
#   scripts/flake.sh [-n RUNS] [-H HOG] [-t TEST_BINARY_NAME] [-- test name filter...]
#   scripts/flake.sh -n 10 -H 5             # 10 runs, the last 5 under a CPU hog
#
# Defaults: 10 runs, 5 under the hog, the `integration` binary. The test binary is the one
# `cargo test` built (scripts/test_binaries.sh: after a build other than scripts/test.sh's, set
# ZRPC_TEST_SELECTION as it says); logs stay in the printed directory.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=10
hog=5
name=integration
while getopts "n:H:t:" o; do
  case "$o" in
    n) runs=$OPTARG ;;
    H) hog=$OPTARG ;;
    t) name=$OPTARG ;;
    *) sed -n '2,11p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
[ "$hog" -le "$runs" ] || { echo "-H $hog is more than -n $runs" >&2; exit 2; }

bin=$(scripts/test_binaries.sh "$name" | awk '{print $2}')
[ -x "$bin" ] || { echo "no test binary $name" >&2; exit 1; }
logs=$(mktemp -d -t zrpc-flake-XXXXXX)
# a copy: a rebuild during the runs must not change the binary under test
cp "$bin" "$logs/$name"
bin="$logs/$name"
cpus=$(nproc)
hogs=()
stop_hog() {
  for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${hogs[@]}"; do wait "$p" 2>/dev/null || true; done
  hogs=()
}
trap stop_hog EXIT

echo "flake: $runs runs of $name ($hog under a CPU hog of $cpus busy loops); logs in $logs"
for i in $(seq 1 "$runs"); do
  under=""
  if [ "$i" -gt $((runs - hog)) ] && [ ${#hogs[@]} -eq 0 ]; then
    for _ in $(seq 1 "$cpus"); do
      sh -c 'while :; do :; done' &
      hogs+=($!)
    done
  fi
  [ ${#hogs[@]} -gt 0 ] && under=" (CPU hog)"
  t0=$(date +%s)
  rc=0
  (cd tests && "$bin" "$@") >"$logs/run$i.log" 2>&1 || rc=$?
  result=$(grep -E '^test result:' "$logs/run$i.log" | tail -1 || true)
  echo "run $i$under: exit $rc in $(( $(date +%s) - t0 ))s: ${result:-no result line}"
  grep -E '^test .* \.\.\. FAILED$' "$logs/run$i.log" | sed -E "s/^test (.*) \.\.\. FAILED$/\1 run$i${under:+-hog}/" >>"$logs/failed.txt" || true
done
stop_hog

echo
if [ -s "$logs/failed.txt" ]; then
  echo "tests that failed at least once (count, test, runs):"
  awk '{c[$1]++; r[$1]=r[$1] " " $2} END {for (t in c) printf "%4d  %s %s\n", c[t], t, r[t]}' "$logs/failed.txt" | sort -rn
  exit 1
fi
echo "no test failed in $runs runs"
