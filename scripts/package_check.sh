#!/usr/bin/env bash
# Proves that zrpc builds from its packages alone, as a user will build it once it is published:
#
#   1. `cargo package` the published crates (zrpc-etcd-client, zrpc-core, zrpc-client,
#      zrpc-server, zrpc-rs, zrpc-build, zrpcctl) into .crate files, printing each one's file
#      count and size;
#   2. write a fresh service with `zrpcctl new NAME --crates-io` (it depends on
#      `zrpc = { package = "zrpc-rs", version = "X.Y.Z" }` and `zrpc-build = "X.Y.Z"`), and check
#      that the READMEs (the repository's, the facade's, zrpc-build's) give those very lines;
#   3. build a local registry, a directory source holding the unpacked .crate files and every
#      other crate the service needs (`cargo vendor` of its dependencies, taken from the registry
#      cache), that replaces crates.io for this build only (`--config` flags: no CARGO_HOME edit);
#   4. `cargo test` the service offline, with protoc hidden (scripts/without_protoc.sh, PROTOC
#      unset), and check that its Cargo.lock names no path or git source.
#
# usage: scripts/package_check.sh [--zrpcctl BIN]
#
#   --zrpcctl BIN  the zrpcctl that writes the service (default: $CARGO_TARGET_DIR/debug/zrpcctl,
#                  built with `cargo build -p zrpcctl` when missing).
#
# Work files live in $CARGO_TARGET_DIR/package-check (default target/package-check); its target
# dir is kept, so that a rerun rebuilds only what changed in the packages.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

zrpcctl=
while [ $# -gt 0 ]; do
    case "$1" in
        --zrpcctl) zrpcctl=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done

log() { printf '\n--> %s\n' "$*"; }
start=$(date +%s)

target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
work=$target/package-check
# The crates a user depends on, in dependency order (cargo packages them together either way).
PUBLISHED=(zrpc-etcd-client zrpc-core zrpc-client zrpc-server zrpc-rs zrpc-build zrpcctl)
pkg_args=()
for p in "${PUBLISHED[@]}"; do pkg_args+=(-p "$p"); done

# --- 1. the packages -----------------------------------------------------------------------------
log "cargo package ${PUBLISHED[*]}"
# --no-verify: the service's build below is the verification (of everything it depends on), from
# the packages themselves; verifying each package as well would build the tree again per crate.
# --allow-dirty: a local run packages the work tree as it is; CI runs on a clean checkout.
rm -rf "$target/package"
mkdir -p "$work"
cargo package "${pkg_args[@]}" --no-verify --allow-dirty --locked >"$work/package.log" 2>&1 \
    || { cat "$work/package.log" >&2; exit 1; }
grep -E '^ *(Packaging|Packaged)|^(warning|error)' "$work/package.log" || true
crates=()
for p in "${PUBLISHED[@]}"; do
    version=$(cargo metadata --format-version 1 --no-deps --offline | python3 -c \
        'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == sys.argv[1]))' "$p")
    f=$target/package/$p-$version.crate
    [ -f "$f" ] || { echo "error: $f was not written" >&2; exit 1; }
    crates+=("$f")
done
printf '%-26s %6s %10s %12s\n' crate files ".crate" unpacked
for f in "${crates[@]}"; do
    printf '%-26s %6s %10s %12s\n' "$(basename "$f" .crate)" "$(tar -tzf "$f" | grep -vc '/$')" \
        "$(du -k "$f" | cut -f1) KiB" \
        "$(tar -xzOf "$f" | wc -c | awk '{printf "%d KiB", $1/1024}')"
done

# --- 2. the service ------------------------------------------------------------------------------
if [ -z "$zrpcctl" ]; then
    zrpcctl=$target/debug/zrpcctl
    [ -x "$zrpcctl" ] || cargo build -q -p zrpcctl --locked
fi
# The zrpcctl that writes the service is built from the sources its package holds (its templates
# are Rust string constants, in src/): a file the package left out would show here.
zrpcctl_crate=$(basename "${crates[-1]}" .crate)
rm -rf "$work/zrpcctl-src"
mkdir -p "$work/zrpcctl-src"
tar -xzf "${crates[-1]}" -C "$work/zrpcctl-src"
diff -r crates/zrpcctl/src "$work/zrpcctl-src/$zrpcctl_crate/src" >/dev/null \
    || { echo "error: the zrpcctl package's src/ differs from crates/zrpcctl/src" >&2; exit 1; }
rm -rf "$work/zrpcctl-src"
svc=pkgsvc
rm -rf "$work/$svc" "$work/vendor-scratch"
mkdir -p "$work"
log "zrpcctl new $svc --crates-io"
"$zrpcctl" new "$svc" --crates-io --dir "$work" >/dev/null
deps=$(grep -E '^zrpc(-build)? *=' "$work/$svc/Cargo.toml")
echo "$deps"
if grep -Eq 'path *=|git *=' "$work/$svc/Cargo.toml"; then
    echo "error: the service's Cargo.toml names a path or git dependency" >&2
    exit 1
fi
# The READMEs' crates.io lines (the repository's, and those crates.io shows for the facade and
# zrpc-build) are the ones tested here.
for readme in README.md crates/zrpc/README.md crates/zrpc-build/README.md; do
    while IFS= read -r line; do
        grep -qF "$line" "$readme" || { echo "error: $readme does not give the tested line: $line" >&2; exit 1; }
    done <<<"$deps"
done

# --- 3. the local registry -----------------------------------------------------------------------
log "local registry"
unpacked=$work/unpacked
registry=$work/registry
rm -rf "$unpacked" "$registry"
mkdir -p "$unpacked"
for f in "${crates[@]}"; do tar -xzf "$f" -C "$unpacked"; done
# Every other crate: `cargo vendor` of the service with zrpc's crates patched to the unpacked
# packages (path sources, which cargo vendor leaves out), pinned by zrpc's Cargo.lock so that it
# resolves to the versions zrpc tests (all in the registry cache after the workspace's build).
cp -r "$work/$svc" "$work/vendor-scratch"
{
    echo
    echo '[patch.crates-io]'
    for d in "$unpacked"/*/; do
        name=$(basename "$d" | sed -E 's/-[0-9]+\.[0-9]+\.[0-9]+.*$//')
        echo "$name = { path = \"$d\" }"
    done
} >>"$work/vendor-scratch/Cargo.toml"
cp Cargo.lock "$work/vendor-scratch/Cargo.lock"
(cd "$work/vendor-scratch" && { cargo vendor --offline --versioned-dirs "$registry" >/dev/null 2>"$work/vendor.log" \
    || cargo vendor --versioned-dirs "$registry" >/dev/null 2>>"$work/vendor.log"; }) \
    || { cat "$work/vendor.log" >&2; exit 1; }
# A directory source checks each crate against `.cargo-checksum.json`: the .crate's sha256 as the
# package checksum (what a registry's index would give), no per-file sums.
for f in "${crates[@]}"; do
    name=$(basename "$f" .crate)
    cp -r "$unpacked/$name" "$registry/$name"
    printf '{"files":{},"package":"%s"}' "$(sha256sum "$f" | cut -d' ' -f1)" >"$registry/$name/.cargo-checksum.json"
done
echo "$(find "$registry" -mindepth 1 -maxdepth 1 -type d | wc -l) crates in $registry"

# --- 4. the service's build and tests, from the registry alone, without protoc ----------------------
log "cargo test (the service, crates.io replaced by the local registry, offline, protoc hidden)"
no_protoc=$work/no-protoc-path
rm -rf "$no_protoc"
svc_path=$(scripts/without_protoc.sh "$no_protoc")
(
    cd "$work/$svc"
    export PATH=$svc_path CARGO_TARGET_DIR=$work/target CARGO_NET_OFFLINE=true
    unset PROTOC PROTOC_INCLUDE
    if command -v protoc >/dev/null 2>&1; then echo "error: protoc still on PATH" >&2; exit 1; fi
    local_registry=(--config 'source.crates-io.replace-with="zrpc-local"'
        --config "source.zrpc-local.directory=\"$registry\"")
    # cargo takes a registry crate of an unchanged version for unchanged: zrpc's are rebuilt every
    # run (the target dir is kept for the others).
    cargo clean "${local_registry[@]}" -q -p zrpc-rs -p zrpc-build -p zrpc-core -p zrpc-client \
        -p zrpc-server -p zrpc-etcd-client
    cargo test "${local_registry[@]}"
)
lock=$work/$svc/Cargo.lock
if grep -E '^source = "(path|git)\+' "$lock"; then
    echo "error: $lock names a path or git source" >&2
    exit 1
fi
for p in zrpc-rs zrpc-build zrpc-core zrpc-client zrpc-server zrpc-etcd-client; do
    grep -A2 "^name = \"$p\"$" "$lock" | grep -q '^source = "registry+https://github.com/rust-lang/crates.io-index"$' \
        || { echo "error: $p is not a crates.io package in $lock" >&2; exit 1; }
done
echo "Cargo.lock: $(grep -c '^name = ' "$lock") packages, every one from crates.io (here: the local registry); no path or git source"
echo "package check passed in $(($(date +%s) - start))s"
