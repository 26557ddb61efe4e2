#!/usr/bin/env bash
# The README's commands on a machine state without protoc: a PATH without it, PROTOC unset, a
# fresh target dir. By hand: `scripts/readme_without_protoc.sh [DIR]`. Not in CI: scripts/test.sh
# hides protoc from all of its builds instead, which proves the same of every build script at no
# extra build.
#   cargo install --path crates/zrpcctl        (here --debug, into DIR/root: the build scripts,
#                                               which are what needs protoc, are the same)
#   cargo run -p zrpc-examples --bin demo      (1 s of load instead of 5)
#   zrpcctl new calculator --proto calculator.proto --zrpc-path <checkout> && cargo test
# One debug target dir serves all three; the scaffold, outside the workspace, still recompiles
# the ~136 crates its features change. Measured (2 cores, loaded by other builds): 397 crates
# compiled, 301 s user + 35 s sys, 1696 s wall.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d)}
mkdir -p "$work"
PATH=$("$root/scripts/without_protoc.sh" "$work/no-protoc-path")
export PATH
unset PROTOC PROTOC_INCLUDE
if command -v protoc >/dev/null; then echo "protoc still on PATH" >&2; exit 1; fi
export CARGO_TARGET_DIR=$work/target CARGO_INCREMENTAL=0
started=$SECONDS

cargo install --locked --debug --path "$root/crates/zrpcctl" --root "$work/root"
cd "$root"
cargo run --locked -p zrpc-examples --bin demo -- --secs 1 --rps 200

cd "$work"
cat > calculator.proto <<'PROTO'
syntax = "proto3";
package calculator;
message AddRequest { int64 a = 1; int64 b = 2; }
message AddReply { int64 sum = 1; }
service Calculator { rpc Add(AddRequest) returns (AddReply); }
PROTO
rm -rf calculator
"$work/root/bin/zrpcctl" new calculator --proto calculator.proto --zrpc-path "$root"
cp "$root/Cargo.lock" calculator/
(cd calculator && cargo test --offline)
echo "README commands without protoc: ok in $((SECONDS - started)) s"
