#!/usr/bin/env bash
# zrpc's fuzz campaigns (by hand, not in CI): each target of fuzz/ runs for a bounded time,
# one at a time, on its corpus; new inputs land in fuzz/corpus/<target>/, crashes in
# fuzz/artifacts/<target>/. Minimize the corpus before committing it (`--cmin`). CI replays
# the corpora on stable with `cargo test` (crates/*/tests/fuzz_corpora.rs). See docs/fuzzing.md.
#
#   scripts/fuzz.sh                       # every target, 120 s each
#   FUZZ_SECONDS=300 scripts/fuzz.sh frames hpack_h2
#   scripts/fuzz.sh --cmin                # minimize every corpus in place (cargo fuzz cmin)
#
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz --locked`).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

SECONDS_PER_TARGET=${FUZZ_SECONDS:-120}
export CARGO_INCREMENTAL=0
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}

cmin=false
if [ "${1:-}" = "--cmin" ]; then cmin=true; shift; fi
mapfile -t all < <(cargo +nightly fuzz list)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

cargo +nightly fuzz build -O --debug-assertions
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  if $cmin; then
    echo "==> cmin $t ($(ls "corpus/$t" | wc -l) files)"
    cargo +nightly fuzz cmin -O --debug-assertions "$t" "corpus/$t" -- -rss_limit_mb=2048 -timeout=5 2>&1 | tail -1
    continue
  fi
  echo "==> $t for ${SECONDS_PER_TARGET}s"
  start=$(date +%s)
  log="$CARGO_TARGET_DIR/fuzz-$t.log"
  status=0
  cargo +nightly fuzz run -O --debug-assertions "$t" "corpus/$t" -- \
    -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -timeout=5 -max_len=65536 \
    -print_final_stats=1 >"$log" 2>&1 || status=$?
  end=$(date +%s)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' || true)
  echo "    $(( end - start ))s, executions ${execs:-?}, corpus $(ls "corpus/$t" | wc -l) files, exit $status"
  echo "    last: $last"
  if [ "$status" != 0 ]; then
    echo "    crash or hang: see $log and artifacts/$t/" >&2
  fi
done
