#!/usr/bin/env bash
# Prints "<name> <path>" for each of zrpc-tests' test binaries named as arguments (default:
# integration interop), as `cargo test` built them. Asking cargo again rebuilds nothing that is
# up to date, provided it is asked with the same selection (features are resolved per
# selection): by default the one scripts/test.sh builds, `--workspace --all-targets`; set
# ZRPC_TEST_SELECTION to the one you built with, e.g.
#   ZRPC_TEST_SELECTION="-p zrpc-tests --test integration --test interop" scripts/flake.sh
set -euo pipefail
cd "$(dirname "$0")/.."
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(integration interop)
# shellcheck disable=SC2086 # a list of cargo arguments
cargo test ${ZRPC_TEST_SELECTION:---workspace --all-targets} --no-run --locked --message-format=json |
  python3 -c '
import json, sys
want = sys.argv[1:]
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if (m.get("reason") == "compiler-artifact" and m.get("executable")
            and m["package_id"].find("zrpc-tests") >= 0 and m["target"]["name"] in want):
        print(m["target"]["name"], m["executable"])
' "${names[@]}"
