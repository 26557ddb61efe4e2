#!/usr/bin/env python3
"""Non-test code lines and `pub` items per library crate, to compare two commits.

    scripts/code_size.py                 # the working tree
    scripts/code_size.py --rev c1c9535   # a commit (read with `git show`, nothing checked out)

Counted: lines of `crates/<crate>/src/**/*.rs` that are not blank and not comments, outside
test code. Test code is a file under a `tests` directory or named `tests.rs`, `test_util.rs`
or `differential.rs`, and any item under `#[cfg(test)]` (its braces are followed). A `pub`
item is a line that starts with `pub ` followed by fn, struct, enum, trait, type, mod, const,
static or use (`pub(crate)` and `pub(super)` are not counted); items of private modules are
counted too, so this is an upper bound of the public API, meant for before/after comparison.
"""

import argparse
import re
import subprocess
import sys

CRATES = ["zrpc-core", "zrpc-server", "zrpc-client", "zrpc", "zrpc-build", "zrpcctl"]
TEST_FILES = ("tests.rs", "test_util.rs", "differential.rs")
PUB = re.compile(r"^\s*pub (async fn|const fn|unsafe fn|fn|struct|enum|trait|type|mod|const|static|use)\b")


def files(rev, crate):
    prefix = f"crates/{crate}/src/"
    if rev:
        out = subprocess.run(
            ["git", "ls-tree", "-r", "--name-only", rev, prefix],
            capture_output=True, text=True, check=True,
        ).stdout.split()
    else:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", prefix],
            capture_output=True, text=True, check=True,
        ).stdout.split()
    for path in out:
        if not path.endswith(".rs"):
            continue
        if "/tests/" in path[len(prefix) - 1:] or path.rsplit("/", 1)[-1] in TEST_FILES:
            continue
        yield path


def read(rev, path):
    if rev:
        return subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True,
                              text=True, check=True).stdout
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def strip_strings(line):
    return re.sub(r'"(\\.|[^"\\])*"', '""', line)


def count(text):
    lines = pub = 0
    skip_depth = None  # brace depth at which a cfg(test) item ends
    pending_test = False
    depth = 0
    for raw in text.splitlines():
        line = raw.strip()
        code = strip_strings(line.split("//", 1)[0]) if not line.startswith("//") else ""
        opens, closes = code.count("{"), code.count("}")
        if skip_depth is None and line.startswith("#[cfg(test)]"):
            pending_test = True
            continue
        if pending_test and skip_depth is None:
            if line.startswith("#[") or not line:
                continue
            pending_test = False
            if opens > closes:
                skip_depth = depth
                depth += opens - closes
                continue
            if code.endswith(";") or opens == closes:
                continue  # a one-line test-only item
            skip_depth = depth  # the brace comes on a later line
            continue
        depth += opens - closes
        if skip_depth is not None:
            if depth <= skip_depth and (closes or code.endswith(";")):
                skip_depth = None
            continue
        if not line or line.startswith("//"):
            continue
        lines += 1
        if PUB.match(raw):
            pub += 1
    return lines, pub


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rev", default=None)
    args = ap.parse_args()
    total = [0, 0]
    print("| crate | code lines | pub items |")
    print("|---|---|---|")
    for crate in CRATES:
        lines = pub = 0
        for path in files(args.rev, crate):
            l, p = count(read(args.rev, path))
            lines += l
            pub += p
        total[0] += lines
        total[1] += pub
        print(f"| {crate} | {lines:,} | {pub} |")
    print(f"| total | {total[0]:,} | {total[1]} |")


if __name__ == "__main__":
    sys.exit(main())
