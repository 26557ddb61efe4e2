#!/usr/bin/env bash
# Prints the paths of zrpc-tests' test binaries named as arguments (default: integration interop),
# one per line, as `cargo test` built them: asking cargo for them rebuilds nothing that is up to
# date, so after `cargo test --workspace --all-targets` this costs no build.
#
#   scripts/test_binaries.sh [integration] [interop] [grpc_interop]
set -euo pipefail
cd "$(dirname "$0")/.."
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(integration interop)
args=()
for n in "${names[@]}"; do args+=(--test "$n"); done
cargo test -q -p zrpc-tests "${args[@]}" --no-run --locked --message-format=json |
  python3 -c '
import json, sys
want = sys.argv[1:]
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in want:
        print(m["target"]["name"], m["executable"])
' "${names[@]}"
