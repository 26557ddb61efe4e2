#!/usr/bin/env bash
# The build weight a user pays, side by side on this machine:
#
#   - a plain tonic helloworld server (tonic, tonic-prost, tonic-prost-build, prost, tokio at the
#     versions of zrpc's Cargo.lock; one-RPC proto; a main that serves it);
#   - the crate `zrpcctl new` writes (goctl's one-Ping service), zrpc's default features;
#   - the same crate with every feature of the zrpc-rs facade enabled.
#
# For each: crates compiled by a cold build (`Compiling` lines), the crates in its tree
# (`cargo tree -e normal,build`), CPU (user+sys) and wall time of a cold `cargo build --release`
# (fresh CARGO_TARGET_DIR, CARGO_INCREMENTAL=0), and the release binary's size (unstripped, the
# default profile; stripped for information). With --dev, the same for a cold dev build.
#
# usage: scripts/build_weight.sh [--rev REV] [--src CHECKOUT] [--zrpcctl BIN] [--dev] [--keep] OUTDIR
#
#   --rev REV      the zrpc commit to measure (default HEAD). Its tree is exported with
#                  `git archive` into a temp dir and the scaffold depends on that copy by path:
#                  uncommitted edits in the checkout are not measured, and the checkout is only read.
#   --src DIR      the zrpc checkout to read (default: the one holding this script).
#   --zrpcctl BIN  the zrpcctl that writes the scaffold (default: built from the export, not timed;
#                  a binary built from the same commit saves that build).
#   --dev          also time cold dev builds (three more cold builds).
#   --keep         keep the temp dir (crates, target dirs) and print where it is.
#   OUTDIR         receives table.md, the build logs and the raw figures (created if missing).
#
# Each subject is its own crate directory with a fresh copy of zrpc's Cargo.lock (cargo prunes it
# to what the crate uses; versions stay zrpc's). Dependencies are fetched for the host target
# before any timed build (from the registry cache when it has everything) and every build and
# `cargo tree` runs --offline, so neither download nor index time is ever measured.
#
# The figures are per machine: compare the columns with each other, not with another machine's.
# CPU time (user+sys) moves much less than wall time when other jobs share the machine (it still
# grows some with contention); read wall time as context only.
set -euo pipefail

rev=HEAD
src=
zrpcctl=
dev=0
keep=0
out=
while [ $# -gt 0 ]; do
    case "$1" in
        --rev) rev=$2; shift 2 ;;
        --src) src=$2; shift 2 ;;
        --zrpcctl) zrpcctl=$2; shift 2 ;;
        --dev) dev=1; shift ;;
        --keep) keep=1; shift ;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *) [ -z "$out" ] || { echo "one OUTDIR only" >&2; exit 2; }; out=$1; shift ;;
    esac
done
[ -n "$out" ] || { echo "usage: $0 [--rev REV] [--src CHECKOUT] [--zrpcctl BIN] [--dev] [--keep] OUTDIR" >&2; exit 2; }
[ -n "$src" ] || src=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
command -v protoc >/dev/null || { echo "protoc is needed (apt-get install protobuf-compiler)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "/usr/bin/time is needed (apt-get install time)" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq is needed" >&2; exit 1; }

mkdir -p "$out"
out=$(cd "$out" && pwd)
commit=$(git -C "$src" rev-parse --verify "$rev^{commit}")
work=$(mktemp -d /tmp/build-weight.XXXXXX)
if [ "$keep" = 1 ]; then
    trap 'echo "kept $work" >&2' EXIT
else
    trap 'rm -rf "$work"' EXIT
fi

export CARGO_INCREMENTAL=0 CARGO_TERM_COLOR=never CARGO_TERM_PROGRESS_WHEN=never
unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS CARGO_TARGET_DIR CARGO_BUILD_TARGET_DIR \
    CARGO_PROFILE_RELEASE_DEBUG CARGO_PROFILE_RELEASE_STRIP CARGO_PROFILE_RELEASE_LTO 2>/dev/null || true

log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

# --- the zrpc tree at $commit, read-only export -----------------------------------------------------
log "exporting $commit from $src"
mkdir -p "$work/zrpc"
git -C "$src" archive --format=tar "$commit" | tar -x -C "$work/zrpc"
lock=$work/zrpc/Cargo.lock

host=$(rustc -vV | sed -n 's/^host: //p')
# Fetch a crate's dependencies for the host before it is timed: from the registry cache, or the
# network when the cache lacks some. The builds then run --offline.
fetch() { # dir
    (cd "$1" && { cargo fetch --offline --target "$host" >"$out/fetch.$(basename "$1").log" 2>&1 \
        || cargo fetch --target "$host" >>"$out/fetch.$(basename "$1").log" 2>&1; })
}

# zrpcctl, to write the scaffold (not timed).
if [ -z "$zrpcctl" ]; then
    log "building zrpcctl (not timed)"
    (cd "$work/zrpc" && fetch "$work/zrpc" && CARGO_TARGET_DIR=$work/tgt-zrpcctl \
        cargo build -p zrpcctl --offline >"$out/zrpcctl-build.log" 2>&1)
    zrpcctl=$work/tgt-zrpcctl/debug/zrpcctl
fi

# --- subject 1: tonic hello ------------------------------------------------------------------------
hello=$work/hello
mkdir -p "$hello/src" "$hello/proto"
cat >"$hello/Cargo.toml" <<'EOF'
[package]
name = "hello"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
tonic = "0.14.9"
tonic-prost = "0.14.9"
prost = "0.14.6"
tokio = { version = "1", features = ["rt-multi-thread", "macros"] }

[build-dependencies]
tonic-prost-build = "0.14.9"

[workspace]
EOF
cat >"$hello/proto/helloworld.proto" <<'EOF'
syntax = "proto3";

package helloworld;

service Greeter {
  rpc SayHello (HelloRequest) returns (HelloReply);
}

message HelloRequest {
  string name = 1;
}

message HelloReply {
  string message = 1;
}
EOF
cat >"$hello/build.rs" <<'EOF'
fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::compile_protos("proto/helloworld.proto")?;
    Ok(())
}
EOF
cat >"$hello/src/main.rs" <<'EOF'
use tonic::{Request, Response, Status, transport::Server};

pub mod hello_world {
    tonic::include_proto!("helloworld");
}

use hello_world::greeter_server::{Greeter, GreeterServer};
use hello_world::{HelloReply, HelloRequest};

#[derive(Debug, Default)]
pub struct MyGreeter;

#[tonic::async_trait]
impl Greeter for MyGreeter {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        let reply = HelloReply {
            message: format!("Hello {}!", request.into_inner().name),
        };
        Ok(Response::new(reply))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = "[::1]:50051".parse()?;
    Server::builder()
        .add_service(GreeterServer::new(MyGreeter))
        .serve(addr)
        .await?;
    Ok(())
}
EOF
cp "$lock" "$hello/Cargo.lock"
fetch "$hello"

# --- subjects 2 and 3: the zrpcctl scaffold --------------------------------------------------------
log "zrpcctl new bwsvc --zrpc-path <export of $commit>"
"$zrpcctl" new bwsvc --zrpc-path "$work/zrpc" --dir "$work" >"$out/zrpcctl-new.log" 2>&1
grep -E '^(zrpc|zrpc-build) *=' "$work/bwsvc/Cargo.toml" >"$out/scaffold-deps.txt"
# One copy per subject, each with its own fresh lock.
for v in default all; do
    cp -r "$work/bwsvc" "$work/bwsvc-$v"
    cp "$lock" "$work/bwsvc-$v/Cargo.lock"
    fetch "$work/bwsvc-$v"
done

all_features=$(cargo metadata --offline --no-deps --format-version 1 \
    --manifest-path "$work/zrpc/crates/zrpc/Cargo.toml" \
    | jq -r '.packages[] | select(.name == "zrpc-rs") | .features | keys[] | select(. != "default")' \
    | sed 's/^/zrpc\//' | paste -sd, -)

# --- measurements ----------------------------------------------------------------------------------
# per subject: crate dir, binary name, feature argument
subjects=(hello zrpc-default zrpc-all)
declare -A dir bin feat
dir[hello]=$hello;                   bin[hello]=hello;        feat[hello]=
dir[zrpc-default]=$work/bwsvc-default; bin[zrpc-default]=bwsvc; feat[zrpc-default]=
dir[zrpc-all]=$work/bwsvc-all;       bin[zrpc-all]=bwsvc;     feat[zrpc-all]="--features=$all_features"

declare -A crates uniq tree cpu wall size ssize dcpu dwall dcrates
measure() { # subject profile(release|dev)
    local s=$1 p=$2 tgt=$work/tgt-$1-$2 args=(--offline)
    [ -n "${feat[$s]}" ] && args+=("${feat[$s]}")
    [ "$p" = release ] && args+=(--release)
    log "cold $p build: $s (load $(cut -d' ' -f1-3 /proc/loadavg))"
    cut -d' ' -f1-3 /proc/loadavg >"$out/loadavg-before.$s.$p"
    (cd "${dir[$s]}" && CARGO_TARGET_DIR=$tgt /usr/bin/time -f '%U %S %e' -o "$out/time.$s.$p" \
        cargo build "${args[@]}" >"$out/build.$s.$p.log" 2>&1) \
        || { echo "build of $s ($p) failed: $out/build.$s.$p.log" >&2; tail -20 "$out/build.$s.$p.log" >&2; exit 1; }
    cut -d' ' -f1-3 /proc/loadavg >"$out/loadavg-after.$s.$p"
    local u sy e n
    read -r u sy e <"$out/time.$s.$p"
    n=$(grep -c '^ *Compiling ' "$out/build.$s.$p.log")
    if [ "$p" = release ]; then
        crates[$s]=$n
        uniq[$s]=$(grep '^ *Compiling ' "$out/build.$s.$p.log" | awk '{print $2}' | sort -u | wc -l)
        cpu[$s]=$(awk -v u="$u" -v s="$sy" 'BEGIN{printf "%.1f", u+s}')
        wall[$s]=$e
        local b=$tgt/release/${bin[$s]}
        size[$s]=$(stat -c %s "$b")
        strip -o "$tgt/stripped" "$b"
        ssize[$s]=$(stat -c %s "$tgt/stripped")
    else
        dcrates[$s]=$n
        dcpu[$s]=$(awk -v u="$u" -v s="$sy" 'BEGIN{printf "%.1f", u+s}')
        dwall[$s]=$e
    fi
    [ "$keep" = 1 ] || rm -rf "$tgt"
}

for s in "${subjects[@]}"; do
    targs=(--offline)
    [ -n "${feat[$s]}" ] && targs+=("${feat[$s]}")
    (cd "${dir[$s]}" && cargo tree "${targs[@]}" -e normal,build --prefix none) >"$out/tree.$s.txt"
    tree[$s]=$(sed 's/ (.*//; s/ v[0-9].*//' "$out/tree.$s.txt" | sort -u | wc -l)
    measure "$s" release
done
if [ "$dev" = 1 ]; then
    for s in "${subjects[@]}"; do measure "$s" dev; done
fi

# --- the table -------------------------------------------------------------------------------------
mib() { awk -v b="$1" 'BEGIN{printf "%.2f MiB", b/1048576}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2fx", a/b}'; }
cell() { # subject value-array-name formatter
    local s=$1 v=$2
    if [ "$s" = hello ]; then echo "$v"; else echo "$v ($(ratio "$3" "$4"))"; fi
}
{
    echo "Build weight, zrpc at $commit ($(git -C "$src" log -1 --format=%cs "$commit")); $(rustc --version); $(nproc) cores; $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "| | plain tonic hello | zrpc scaffold, default features | zrpc scaffold, all features |"
    echo "|---|---|---|---|"
    row() { # label hello-text default-text all-text
        echo "| $1 | $2 | $3 | $4 |"
    }
    row "crates compiled (cold release build, \`Compiling\` lines)" "${crates[hello]}" \
        "$(cell zrpc-default "${crates[zrpc-default]}" "${crates[zrpc-default]}" "${crates[hello]}")" \
        "$(cell zrpc-all "${crates[zrpc-all]}" "${crates[zrpc-all]}" "${crates[hello]}")"
    row "crates in \`cargo tree -e normal,build\` (unique names)" "${tree[hello]}" \
        "$(cell zrpc-default "${tree[zrpc-default]}" "${tree[zrpc-default]}" "${tree[hello]}")" \
        "$(cell zrpc-all "${tree[zrpc-all]}" "${tree[zrpc-all]}" "${tree[hello]}")"
    row "cold release build, CPU user+sys" "${cpu[hello]} s" \
        "$(cell zrpc-default "${cpu[zrpc-default]} s" "${cpu[zrpc-default]}" "${cpu[hello]}")" \
        "$(cell zrpc-all "${cpu[zrpc-all]} s" "${cpu[zrpc-all]}" "${cpu[hello]}")"
    row "cold release build, wall (context only)" "${wall[hello]} s" \
        "$(cell zrpc-default "${wall[zrpc-default]} s" "${wall[zrpc-default]}" "${wall[hello]}")" \
        "$(cell zrpc-all "${wall[zrpc-all]} s" "${wall[zrpc-all]}" "${wall[hello]}")"
    row "release binary (unstripped)" "${size[hello]} B = $(mib "${size[hello]}")" \
        "$(cell zrpc-default "${size[zrpc-default]} B = $(mib "${size[zrpc-default]}")" "${size[zrpc-default]}" "${size[hello]}")" \
        "$(cell zrpc-all "${size[zrpc-all]} B = $(mib "${size[zrpc-all]}")" "${size[zrpc-all]}" "${size[hello]}")"
    row "release binary, stripped (information)" "${ssize[hello]} B = $(mib "${ssize[hello]}")" \
        "$(cell zrpc-default "${ssize[zrpc-default]} B = $(mib "${ssize[zrpc-default]}")" "${ssize[zrpc-default]}" "${ssize[hello]}")" \
        "$(cell zrpc-all "${ssize[zrpc-all]} B = $(mib "${ssize[zrpc-all]}")" "${ssize[zrpc-all]}" "${ssize[hello]}")"
    if [ "$dev" = 1 ]; then
        row "cold dev build, CPU user+sys" "${dcpu[hello]} s" \
            "$(cell zrpc-default "${dcpu[zrpc-default]} s" "${dcpu[zrpc-default]}" "${dcpu[hello]}")" \
            "$(cell zrpc-all "${dcpu[zrpc-all]} s" "${dcpu[zrpc-all]}" "${dcpu[hello]}")"
        row "cold dev build, wall (context only)" "${dwall[hello]} s" \
            "$(cell zrpc-default "${dwall[zrpc-default]} s" "${dwall[zrpc-default]}" "${dwall[hello]}")" \
            "$(cell zrpc-all "${dwall[zrpc-all]} s" "${dwall[zrpc-all]}" "${dwall[hello]}")"
    fi
    echo
    echo "Ratios are to the plain tonic hello. All features: $all_features."
    echo "Scaffold dependency lines: $(paste -sd';' "$out/scaffold-deps.txt" | sed "s#$work#<tmp>#g")."
    echo "Distinct package names among the \`Compiling\` lines: hello ${uniq[hello]}, default ${uniq[zrpc-default]}, all ${uniq[zrpc-all]}."
    printf 'Load average (1/5/15 min) before each timed build:'
    for f in "$out"/loadavg-before.*; do printf ' %s: %s;' "${f##*/loadavg-before.}" "$(cat "$f")"; done
    echo
} | tee "$out/table.md"
