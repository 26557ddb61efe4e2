#!/usr/bin/env python3
"""Finds cycles between the modules of a crate: `scripts/module_cycles.py crates/zrpc-server`.

A module is a source file (`src/a/b.rs` or `src/a/b/mod.rs` is `a::b`). Module A depends on
module B when A's code names a path into B (`crate::a::b::X`, `super::b::X`, `self::b`, `use`
lists included). A module naming its own ancestors or descendants is not counted: a parent
re-exporting its children and a child using its parent's items are how Rust modules nest, not
a cycle. What is left must be acyclic; each strongly connected component of two or more modules
is printed with the references that tie it, and the exit status is 1.

Text-based (comments and strings are stripped first, items under `#[cfg(test)]` are skipped), so it
errs on the side of seeing an edge; it needs no build.
"""

import re
import sys
from pathlib import Path


def module_of(src: Path, f: Path) -> tuple:
    parts = list(f.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def strip(code: str) -> str:
    code = re.sub(r"/\*.*?\*/", "", code, flags=re.S)
    code = re.sub(r"//[^\n]*", "", code)
    code = re.sub(r'r#*"(?:.|\n)*?"#*', '""', code)
    code = re.sub(r'"(?:\\.|[^"\\])*"', '""', code)
    return code


def without_test_modules(code: str) -> str:
    """Drops every item under `#[cfg(test)]` or `#[cfg(all(test, ...))]`: a `mod x { ... }`, a
    function, an impl, a `use` (tests may use anything), whatever attributes come between."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\((?:all\()?test\b[^\]]*\]", code):
        if m.start() < i:
            continue
        out.append(code[i : m.start()])
        j = m.end()
        # the item ends at its first `;` (a declaration) or with the block its first `{` opens
        semi, brace = code.find(";", j), code.find("{", j)
        if brace < 0 or (0 <= semi < brace):
            i = len(code) if semi < 0 else semi + 1
            continue
        depth, j = 1, brace + 1
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        i = j
    out.append(code[i:])
    return "".join(out)


def expand_use(code: str):
    """Yields each path a `use` declaration names, its braces expanded."""
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        stack = [(m.group(1).replace("\n", " "), "")]
        while stack:
            text, prefix = stack.pop()
            text = text.strip()
            brace = text.find("{")
            if brace < 0:
                for item in text.split(","):
                    item = item.strip().split(" as ")[0].strip()
                    if item:
                        yield prefix + item
                continue
            head = text[:brace]
            depth, k = 0, brace
            for k in range(brace, len(text)):
                depth += {"{": 1, "}": -1}.get(text[k], 0)
                if depth == 0:
                    break
            inner = text[brace + 1 : k]
            items, depth, cur = [], 0, ""
            for ch in inner:
                if ch == "," and depth == 0:
                    items.append(cur)
                    cur = ""
                    continue
                depth += {"{": 1, "}": -1}.get(ch, 0)
                cur += ch
            items.append(cur)
            for item in items:
                if item.strip():
                    stack.append((item, prefix + head))


def references(code: str):
    yield from expand_use(code)
    for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", code):
        yield m.group(1)


def resolve(path: str, here: tuple, modules: set):
    parts = [p for p in path.replace(" ", "").split("::") if p]
    if not parts:
        return None
    if parts[0] == "crate":
        base, rest = (), parts[1:]
    elif parts[0] in ("super", "self"):
        base = list(here)
        rest = parts
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super" and base:
                base.pop()
            rest = rest[1:]
        base = tuple(base)
    else:
        return None
    target = base
    for p in rest:
        if target + (p,) in modules:
            target = target + (p,)
        else:
            break
    return target


def related(a: tuple, b: tuple) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def sccs(nodes, edges):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return out


def main() -> int:
    status = 0
    for crate in sys.argv[1:] or ["."]:
        src = Path(crate) / "src"
        files = {module_of(src, f): f for f in src.rglob("*.rs")}
        # files of test modules (`mod tests;` under #[cfg(test)]) are named tests.rs
        files = {m: f for m, f in files.items() if not (m and m[-1] == "tests")}
        modules = set(files)
        edges, why = {}, {}
        for m, f in files.items():
            code = without_test_modules(strip(f.read_text()))
            for ref in references(code):
                t = resolve(ref, m, modules)
                if t is None or related(m, t):
                    continue
                edges.setdefault(m, set()).add(t)
                why.setdefault((m, t), ref)
        cyclic = [c for c in sccs(sorted(modules), edges) if len(c) > 1]
        name = "::".join
        n_edges = sum(len(v) for v in edges.values())
        print(f"{crate}: {len(modules)} modules, {n_edges} dependencies, {len(cyclic)} cycles")
        for comp in cyclic:
            status = 1
            members = set(comp)
            print("  cycle: " + ", ".join(sorted(name(c) or "crate" for c in comp)))
            for a in sorted(members):
                for b in sorted(edges.get(a, ())):
                    if b in members:
                        print(f"    {name(a) or 'crate'} -> {name(b) or 'crate'} ({why[(a, b)]})")
    return status


if __name__ == "__main__":
    sys.exit(main())
