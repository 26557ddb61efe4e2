#!/usr/bin/env python3
"""Counts the public items a crate's users can reach, from rustdoc's JSON output.

    python3 scripts/public_api.py                 # zrpc-core, zrpc-server, zrpc-client, zrpc-rs
    python3 scripts/public_api.py zrpc-rs --list  # and print each item's path
    python3 scripts/public_api.py --write         # the lists into docs/public-api/<crate>.txt
    python3 scripts/public_api.py --check         # fails when a list differs from its file

`--check` is CI's: a change to what users can reach must come with the change to the checked-in
list (run `--write` and commit it), so that every addition or removal is seen in review.

Walks each crate from its root through public modules and re-exports (into the other crates
of the workspace too), counting modules, types, traits, functions, constants, statics, macros,
enum variants, public struct fields and the items of inherent impls and of traits; trait impls
add nothing. Items hidden from the docs (`#[doc(hidden)]`) do not count, as rustdoc leaves them
out. Needs a nightly toolchain (rustdoc's JSON is unstable); all features are on.
"""

import json
import os
import subprocess
import sys
import tempfile

CRATES = ["zrpc-core", "zrpc-server", "zrpc-client", "zrpc-rs"]
TARGET = os.environ.get("PUBLIC_API_TARGET", os.path.join(tempfile.gettempdir(), "zrpc-public-api"))


def rustdoc_json(package):
    lib = package.replace("-", "_").replace("zrpc_rs", "zrpc")
    subprocess.run(
        ["cargo", "+nightly", "rustdoc", "-q", "-p", package, "--lib", "--all-features",
         "--target-dir", TARGET, "--", "-Z", "unstable-options", "--output-format", "json"],
        check=True,
    )
    with open(os.path.join(TARGET, "doc", f"{lib}.json")) as f:
        return json.load(f)


class Api:
    def __init__(self):
        self.docs = {}  # crate name -> json

    def doc(self, name):
        if name not in self.docs:
            package = "zrpc-rs" if name == "zrpc" else name.replace("_", "-")
            self.docs[name] = rustdoc_json(package)
        return self.docs[name]

    def resolve(self, doc, item_id):
        """(doc, item) of `item_id` in `doc`, following it into another workspace crate."""
        item = doc["index"].get(str(item_id))
        if item is not None:
            return doc, item
        path = doc["paths"].get(str(item_id))
        if path is None:
            return None, None
        crate = doc["external_crates"].get(str(path["crate_id"]), {}).get("name")
        if crate not in ("zrpc_core", "zrpc_server", "zrpc_client", "zrpc"):
            return None, None  # tonic, prost, ...: not ours
        other = self.doc(crate)
        for oid, p in other["paths"].items():
            if p["crate_id"] == 0 and p["path"] == path["path"] and oid in other["index"]:
                return other, other["index"][oid]
        return None, None

    def walk(self, crate):
        doc = self.doc(crate)
        seen, out = set(), []

        def visit(doc, item, path):
            key = (id(doc), item["id"])
            if key in seen:
                return
            seen.add(key)
            inner = item["inner"]
            kind = next(iter(inner))
            body = inner[kind]
            name = item.get("name") or ""
            here = f"{path}::{name}" if name else path
            if kind == "use":
                if body.get("id") is None:
                    return
                tdoc, target = self.resolve(doc, body["id"])
                if target is None:
                    # a crate outside the workspace, or an item hidden from the docs
                    out.append((f"{path}::{body.get('name') or name}", "external re-export"))
                    return
                if body.get("is_glob"):
                    for i in next(iter(target["inner"].values())).get("items", []):
                        visit(tdoc, tdoc["index"][str(i)], path)
                    return
                # the re-export's own name
                visit(tdoc, dict(target, name=body["name"]), path)
                return
            if kind == "impl":
                if body.get("trait") is None:
                    for i in body["items"]:
                        child = doc["index"][str(i)]
                        if child.get("visibility") == "public":
                            visit(doc, child, path)
                return
            out.append((here, kind))
            if kind == "module":
                for i in body["items"]:
                    child = doc["index"].get(str(i))
                    if child and (child.get("visibility") == "public" or next(iter(child["inner"])) == "impl"):
                        visit(doc, child, here)
            elif kind == "struct":
                fields = body["kind"].get("plain", {}).get("fields", []) if isinstance(body["kind"], dict) else []
                for i in fields:
                    f = doc["index"].get(str(i))
                    if f and f.get("visibility") == "public":
                        visit(doc, f, here)
                for i in body.get("impls", []):
                    visit(doc, doc["index"][str(i)], here)
            elif kind == "enum":
                for i in body.get("variants", []):
                    visit(doc, doc["index"][str(i)], here)
                for i in body.get("impls", []):
                    visit(doc, doc["index"][str(i)], here)
            elif kind == "trait":
                for i in body.get("items", []):
                    visit(doc, doc["index"][str(i)], here)

        root = doc["index"][str(doc["root"])]
        visit(doc, root, "")
        return out


LISTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "public-api")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    listing = "--list" in sys.argv
    write = "--write" in sys.argv
    check = "--check" in sys.argv
    api = Api()
    differ = []
    for crate in args or CRATES:
        items = api.walk(crate.replace("-", "_").replace("zrpc_rs", "zrpc"))
        fields = sum(1 for _, k in items if k == "struct_field")
        print(f"{crate}: {len(items)} public items ({fields} of them struct fields)")
        lines = [f"{kind:20} {path}" for path, kind in sorted(set(items))]
        if listing:
            for line in lines:
                print(f"  {line}")
        text = "".join(line.rstrip() + "\n" for line in lines)
        file = os.path.join(LISTS, f"{crate}.txt")
        if write:
            os.makedirs(LISTS, exist_ok=True)
            with open(file, "w") as f:
                f.write(text)
        if check:
            try:
                with open(file) as f:
                    old = f.read()
            except FileNotFoundError:
                old = ""
            if old != text:
                import difflib
                sys.stdout.writelines(difflib.unified_diff(
                    old.splitlines(True), text.splitlines(True),
                    f"docs/public-api/{crate}.txt (checked in)", f"{crate} (this build)"))
                differ.append(crate)
    if differ:
        print(f"public API changed without its list: {', '.join(differ)}; "
              "run `python3 scripts/public_api.py --write` and commit docs/public-api/",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
