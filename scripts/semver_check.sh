#!/usr/bin/env bash
# Checks the public API of zrpc's library crates against the baseline of the current version
# with cargo-semver-checks (installed from crates.io when missing): a change that needs a new
# major (or, before 1.0, minor) version fails, naming the item and the rule.
#
# The baseline is the last release: the newest tag `v<X.Y.Z>` reachable from HEAD (tag the commit
# each version is published from), or the rev in ZRPC_SEMVER_BASELINE. cargo-semver-checks then
# compares the versions: from 0.1.0 to 0.1.1 a breaking change fails, to 0.2.0 it is allowed.
# Until the first tag exists (nothing is published yet) the crates are checked against this checkout
# itself: that proves the check runs (the tool, the rustdoc JSON of every crate in the feature
# sets below) but cannot fail on an API change; the script says so.
#
# usage: scripts/semver_check.sh
#
# Every library crate is checked with all its features (the API a user can reach), except
# zrpc-client's `test-hooks` (zrpc's own tests, no semver promise).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo semver-checks --version >/dev/null 2>&1; then
    echo "installing cargo-semver-checks (a few CPU-minutes, once)"
    # without its fat LTO (scripts/test.sh sets ZRPC_TOOL_PROFILE and says why)
    env ${ZRPC_TOOL_PROFILE:-} cargo install --locked cargo-semver-checks
fi

version=$(cargo metadata --format-version 1 --no-deps --offline | python3 -c \
    'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "zrpc-rs"))')
baseline=${ZRPC_SEMVER_BASELINE:-}
# Where the baseline comes from: the tag's commit, cloned and documented apart; until a tag
# exists, this checkout itself (the rustdoc built for the current version serves both sides,
# instead of a second build of the same code: half the check's time and ~1.8 GB on a cold run).
baseline_from=()
if [ -z "$baseline" ]; then
    baseline=$(git describe --tags --abbrev=0 --match 'v[0-9]*' HEAD 2>/dev/null || true)
    if [ -z "$baseline" ]; then
        baseline=HEAD
        baseline_from=(--baseline-root .)
        cat >&2 <<EOF
note: no release tag (v<X.Y.Z>) yet, zrpc $version is not released: checking against this checkout (HEAD), which
      proves the check runs but cannot catch an API change. Tag the published commit v$version
      (or set ZRPC_SEMVER_BASELINE=<rev>) and this check guards its API from then on.
EOF
    fi
fi
echo "cargo-semver-checks $(cargo semver-checks --version | awk '{print $2}'): zrpc $version against $baseline ($(git rev-parse --short "$baseline^{commit}"))"
[ ${#baseline_from[@]} -gt 0 ] || baseline_from=(--baseline-rev "$baseline")

# The library crates a user depends on (zrpcctl is a binary: no API).
libs=(zrpc-core zrpc-server zrpc-rs zrpc-build zrpc-etcd-client)
for p in "${libs[@]}"; do
    cargo semver-checks check-release -p "$p" "${baseline_from[@]}" --all-features
done
cargo semver-checks check-release -p zrpc-client "${baseline_from[@]}" \
    --only-explicit-features --features otel,etcd,tls,gzip,deflate,zstd
