#!/usr/bin/env python3
"""Import circles between the top-level modules of crates.

A top-level module is a file or folder directly under a crate's `src/`
(`src/foo.rs` or `src/foo/`). Module A imports B when a file of A names
`crate::B` (in a `use` or a path). A circle is a strongly connected set of
two or more modules. Prints each crate's circles; exits 1 when a crate
named with --strict has any.

    python3 scripts/import_circles.py zephon-core zephon-storage --strict zephon-ops zephon-metrics
"""
import argparse
import re
import sys
from pathlib import Path

USE = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
COMMENT = re.compile(r"//.*")


def modules(src: Path) -> dict:
    out = {}
    for p in sorted(src.iterdir()):
        if p.name in ("lib.rs", "main.rs"):
            continue
        if p.is_dir():
            out[p.name] = sorted(p.rglob("*.rs"))
        elif p.suffix == ".rs":
            out[p.stem] = [p] + sorted((src / p.stem).rglob("*.rs") if (src / p.stem).is_dir() else [])
    return out


def graph(src: Path) -> dict:
    mods = modules(src)
    edges = {m: set() for m in mods}
    for m, files in mods.items():
        for f in files:
            for line in f.read_text(encoding="utf-8").splitlines():
                code = COMMENT.sub("", line)
                for target in USE.findall(code):
                    if target in mods and target != m:
                        edges[m].add(target)
    return edges


def circles(edges: dict) -> list:
    """Strongly connected components of two or more modules (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
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
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("crates", nargs="*", help="crates to report")
    ap.add_argument("--strict", nargs="*", default=[], help="crates that must have none")
    args = ap.parse_args()
    root = Path(__file__).resolve().parent.parent
    failed = False
    for crate in list(args.crates) + list(args.strict):
        src = root / crate / "src"
        found = circles(graph(src))
        total = sum(len(c) for c in found)
        print(f"{crate}: {len(found)} import circle(s), {total} modules in them")
        for c in found:
            print("   ", " <-> ".join(c))
        if found and crate in args.strict:
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
