#!/usr/bin/env bash
# zrpc's one test entry point: installs what is missing, builds the go-zero interop programs
# (when Go is installed), then runs fmt check, clippy (-D warnings), the whole test suite
# (including the go-zero interop tests) and the doc build. The library crates are also linted
# and unit-tested in each feature set a user can build (see "Cargo features" in the README).
#
#   scripts/test.sh            # everything
#   ZRPC_TEST_ETCD_ENDPOINTS=127.0.0.1:2379 scripts/test.sh
#                              # use an etcd you run yourself (e.g. `docker compose up -d etcd`)
#                              # where no `etcd` binary is installed
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step says when it starts (minutes:seconds into the run), so that a slow CI run shows which
# step took the time.
run_start=$(date +%s)
log() {
  local t=$(( $(date +%s) - run_start ))
  printf '\n==> [%d:%02d] %s\n' $((t / 60)) $((t % 60)) "$*"
}

# --- 1. system packages ----------------------------------------------------
need=()
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/descriptor.proto ] || need+=(libprotobuf-dev)
# h2load (nghttp2-client) for the benches; redis-server for the go-zero auth parity test.
command -v h2load >/dev/null 2>&1 || need+=(nghttp2-client)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# valgrind: zrpc-bench's callgrind column (instructions per request), smoke-tested in step 7.
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
# chromium: the admin page's test loads it in a headless browser (tests/tests/integration/admin_page.rs).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ -z "${ZRPC_TEST_ETCD_ENDPOINTS:-}" ]; then
  command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
  command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
    # Debian's etcd-server and redis-server packages start system services; the tests start
    # their own on free loopback ports.
    if command -v systemctl >/dev/null 2>&1; then systemctl stop etcd redis-server >/dev/null 2>&1 || true; fi
  else
    echo "missing: ${need[*]} (install them, or run as root so this script can)" >&2
    exit 1
  fi
fi

# Python tools used to validate docker-compose.yml (no Docker engine is needed).
if ! python3 -c 'import jsonschema, yaml' >/dev/null 2>&1; then
  log "installing python jsonschema + pyyaml"
  python3 -m pip install -q jsonschema pyyaml >/dev/null 2>&1 || echo "warning: could not install jsonschema; compose validation will be skipped" >&2
fi

# grpcio (Python's gRPC, on gRPC core): the foreign client of the compression tests
# (tests/python/grpcio_call.py); one wheel, ~6 MB.
if ! python3 -c 'import grpc' >/dev/null 2>&1; then
  log "installing python grpcio"
  python3 -m pip install -q grpcio >/dev/null 2>&1 || {
    echo "error: could not install grpcio, which tests/tests/integration/compression.rs needs" >&2
    exit 1
  }
fi

# --- 1b. Go programs: go-zero and grpc-go interop, Toxiproxy ------------------
# Real go-zero v1.10.3 programs (interop/gozero) that the interop tests run next to zrpc,
# grpc-go v1.83.2's own gRPC interop client and server (interop/grpc-go) for the interop matrix,
# and Shopify's Toxiproxy v2.12.0 (interop/toxiproxy), the fault proxy of the network-fault tests
# (tests/tests/integration/network_faults/). Without Go those tests skip themselves loudly; in
# CI a missing Go is an error.
if command -v go >/dev/null 2>&1; then
  log "building the go-zero interop programs and Toxiproxy ($(go version | awk '{print $3}'))"
  go_start=$(date +%s)
  bash interop/gozero/build.sh
  echo "go-zero programs ready in $(( $(date +%s) - go_start ))s (a cold module cache downloads ~57 modules)"
  log "building grpc-go's interop programs"
  go_start=$(date +%s)
  bash interop/grpc-go/build.sh
  echo "grpc-go programs ready in $(( $(date +%s) - go_start ))s (a cold module cache downloads ~9 more modules)"
  log "building Toxiproxy"
  go_start=$(date +%s)
  bash interop/toxiproxy/build.sh
  echo "Toxiproxy ready in $(( $(date +%s) - go_start ))s (a cold module cache downloads ~17 modules)"
elif [ "${CI:-}" = "true" ]; then
  echo "error: CI=true but go is not on PATH: the go-zero interop and network-fault tests must run in CI." >&2
  echo "       Install Go >= 1.24 and re-run." >&2
  exit 1
else
  cat >&2 <<'WARN'

##########################################################################
#  WARNING: go not found: the go-zero interop tests and the network-    #
#  fault tests (Toxiproxy) will be SKIPPED. Install Go >= 1.24 to test  #
#  zrpc against real go-zero (interop/gozero) and network faults.      #
##########################################################################

WARN
fi

# --- 1c. no protoc ----------------------------------------------------------
# Nothing in zrpc needs protoc (zrpc-build falls back to protox; etcd-client's generated code is
# vendored), so every build below runs with it hidden: a PATH without it, PROTOC unset. Each build
# script CI runs then proves it (in a fresh clone all of them, on a kept target dir every new
# dependency's), at no extra build. A protoc installed here is handed to zrpc-build's test that
# protoc and protox read protos alike. `scripts/readme_without_protoc.sh` runs the README's
# commands on a fresh target dir by hand (~340 CPU-seconds: see the script).
if command -v protoc >/dev/null 2>&1; then
  ZRPC_TEST_PROTOC=$(command -v protoc)
  export ZRPC_TEST_PROTOC
fi
no_protoc_dir=$(realpath -m "${CARGO_TARGET_DIR:-target}")/no-protoc-path
rm -rf "$no_protoc_dir"
PATH=$(scripts/without_protoc.sh "$no_protoc_dir")
export PATH
unset PROTOC PROTOC_INCLUDE
if command -v protoc >/dev/null 2>&1; then echo "protoc still on PATH" >&2; exit 1; fi

export CARGO_TERM_COLOR=never
export RUST_BACKTRACE=1
# A fresh clone gains nothing from incremental state, and it is the largest part of a debug target
# (enough to run a CI machine's shared disk out of space). Callers may still set it.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# The feature sets the library crates are built in besides the workspace build, which is their
# full set (the integration tests and zrpcctl turn every feature on): the facade's minimal and
# default builds, both without TLS (no rustls: the `tls` stand-ins and the refusals of `Tls`
# blocks, etcd TLS and `k8s://` targets are built and tested there), and, linted only, `tls`
# alone (TLS code that must not lean on `etcd`). The crates below the facade default to nothing
# (the facade chooses), so their sets spell out the facade's features (crates/zrpc/Cargo.toml);
# the facade itself is linted as a library only (its tests link the examples, which turn `tls`
# and its defaults on).
CRATES=(-p zrpc-core -p zrpc-server -p zrpc-client)
SET_NAMES=("minimal" "default" "tls only")
FACADE_SETS=("--no-default-features" "" "--no-default-features --features=tls")
CRATE_SETS=("--no-default-features" "--features=zrpc-server/etcd,zrpc-server/devserver,zrpc-client/etcd" "--no-default-features --features=zrpc-server/tls,zrpc-client/tls,zrpc-core/tls")

# --- 2. format --------------------------------------------------------------
log "cargo fmt --check"
cargo fmt --all --check

# --- 2b. module structure -------------------------------------------------------
# No module of the library crates imports back into a module that imports it.
log "module cycles"
python3 scripts/module_cycles.py crates/zrpc-core crates/zrpc-server crates/zrpc-client crates/zrpc

# --- 2c. public API -------------------------------------------------------------
# What users can reach in each library crate (rustdoc's JSON, nightly) against the checked-in
# lists in docs/public-api/: a change to the public API comes with its list, or CI fails.
if cargo +nightly --version >/dev/null 2>&1; then
  log "public API lists"
  api_start=$(date +%s)
  python3 scripts/public_api.py --check
  echo "public API checked in $(( $(date +%s) - api_start ))s"
elif [ "${CI:-}" = "true" ]; then
  echo "error: CI=true but no nightly toolchain: the public API check needs rustdoc's JSON." >&2
  exit 1
else
  echo "warning: no nightly toolchain; skipping the public API check" >&2
fi

# --- 3. clippy --------------------------------------------------------------
if cargo clippy --version >/dev/null 2>&1; then
  log "cargo clippy -D warnings"
  cargo clippy --workspace --all-targets --locked -- -D warnings
  # The workspace build turns every optional part on; the library crates are also linted as the
  # minimal, the default and the TLS-only build of the facade see them (code behind a feature).
  for i in 0 1 2; do
    log "cargo clippy (library crates, ${SET_NAMES[$i]})"
    cargo clippy -p zrpc-rs --lib --locked ${FACADE_SETS[$i]} -- -D warnings
    cargo clippy "${CRATES[@]}" --all-targets --locked ${CRATE_SETS[$i]} -- -D warnings
  done
  # The facade as `zrpcctl new` writes it: the defaults without `client` (the minimal and TLS-only
  # sets have no client either; the default set has it).
  log "cargo clippy (facade, a server's defaults: no client)"
  cargo clippy -p zrpc-rs --lib --locked --no-default-features --features=etcd,devserver,gzip -- -D warnings
else
  echo "warning: clippy is not installed; skipping the lint step" >&2
fi

# --- 4. tests ---------------------------------------------------------------
log "cargo test"
cargo test --workspace --all-targets --locked
# The integration and interop tests again, sharing ONE etcd as a user's `docker compose up -d etcd`
# does (started with that service's flags from the installed binary; tests that change
# cluster-wide state get an etcd of their own): the binaries built above, not rebuilt. Skipped
# when the caller already points the tests at an etcd of theirs (the run above was that mode).
if [ -z "${ZRPC_TEST_ETCD_ENDPOINTS:-}" ]; then
  log "integration and interop tests against one shared etcd"
  scripts/shared_etcd.sh
fi
# The unit tests again in the minimal and the default set (the workspace run above is the full
# set): the tests of a feature's absence (a config that needs it is refused, naming it) run here.
for i in 0 1; do
  log "cargo test --lib (library crates, ${SET_NAMES[$i]})"
  cargo test "${CRATES[@]}" --lib --locked ${CRATE_SETS[$i]}
done
log "cargo test --doc"
# the vendored etcd client's examples need a live etcd on 2379 (they are upstream's, not ours)
cargo test --workspace --doc --locked --exclude zrpc-etcd-client

# --- 5. docker-compose.yml ---------------------------------------------------
if [ -f docker-compose.yml ]; then
  log "validate docker-compose.yml"
  python3 scripts/validate_compose.py docker-compose.yml
fi

# --- 6. docs ----------------------------------------------------------------
log "cargo doc -D warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

# --- 7. benchmark harness smoke test ---------------------------------------
# zrpc-bench --quick runs every scenario with tiny sizes (< 2 min) into a temporary report and
# checks that it is well formed (every section and table filled or marked skipped, charts present);
# it asserts no timings. docs/benchmarks.md is never touched here.
log "zrpc-bench --quick (smoke test)"
# The binary is the one `cargo test --workspace --all-targets` built above: `cargo run -p zrpc-bench`
# would resolve features for that package alone and rebuild half the tree (time and disk).
bench_bin="${CARGO_TARGET_DIR:-target}/debug/zrpc-bench"
[ -x "$bench_bin" ] || cargo build -q -p zrpc-bench --locked
bench_out=$(mktemp -d)
"$bench_bin" --quick --out "$bench_out/report.md" all
"$bench_bin" check-report "$bench_out/report.md"
rm -rf "$bench_out"

# --- 8. packaging: licenses and bans, the crates built from their packages, API stability --
# cargo-deny and cargo-semver-checks come from crates.io, installed once when missing. Both ship a
# release profile of fat LTO and one codegen unit, whose serial link is most of an install on 2
# cores: they are installed without it (build time on a 2-core machine: cargo-deny 162 -> 135 s,
# cargo-semver-checks 412 -> 337 s; what they check is the same). Each step prints its time: cargo
# deny a few seconds; the package check ~75 s to ~3 min (a debug build of the service's ~150
# crates); the semver check ~4 min cold (rustdoc JSON of every crate; until a release tag exists
# its baseline is this checkout, whose rustdoc serves both sides), ~45 s warm.
export ZRPC_TOOL_PROFILE="CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16"
log "cargo deny (licenses, duplicate versions, sources; offline)"
cargo deny --version >/dev/null 2>&1 || env $ZRPC_TOOL_PROFILE cargo install --locked cargo-deny
step_start=$(date +%s)
cargo deny --offline check licenses bans sources
echo "cargo deny: $(( $(date +%s) - step_start ))s"
log "the crates from their packages alone (scripts/package_check.sh)"
step_start=$(date +%s)
scripts/package_check.sh
echo "package check: $(( $(date +%s) - step_start ))s"
log "API stability (scripts/semver_check.sh)"
step_start=$(date +%s)
scripts/semver_check.sh
echo "semver check: $(( $(date +%s) - step_start ))s"

log "all checks passed"
