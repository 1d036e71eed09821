#!/usr/bin/env python3
"""Writes the table of guide/src/benchmarks.md from `zephon-bench ... --json` output.

Usage:
    zephon-bench engine --json > engine.json
    zephon-bench formats --json > formats.json
    zephon-bench tokens --file FILE --peer "..." > tokens.json
    python3 scripts/bench_page.py engine.json formats.json tokens.json \
        [--machine "2-core AMD EPYC"] [--date 2026-12-06] [--page guide/src/benchmarks.md]

Each input holds one JSON object or JSON lines (`bench tokens`,
`tokenize-pack` and `images` print one line per system). Every numeric field
whose name starts with `ratio` or holds `_ratio_to_` (`bench tokens`'
`tokens_per_s_ratio_to_plain`, ...) becomes a row, labelled by the object's `bench`,
`system`, `configuration` or `format` fields. The rows replace what lies
between the page's `<!-- bench-table:begin -->` and `<!-- bench-table:end -->`
markers, under a line naming the machine and the date. Standard library only.
"""

import argparse
import datetime
import json
import os
import platform
import sys

BEGIN = "<!-- bench-table:begin -->"
END = "<!-- bench-table:end -->"
LABELS = ("bench", "system", "configuration", "format")


def objects(path):
    """The JSON objects of one file: a whole document, or one per line."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line.startswith("{"):
                continue  # progress or table lines around the JSON
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON: {e}")
        return out


def is_ratio(key):
    return (
        key.startswith("ratio")
        or "_ratio_to_" in key
        or key.endswith("ratio_to_local")
        or key.endswith("ratio_to_download")
    )


def rows(obj, context, source):
    """(source, label, key, value) for every ratio in `obj` and its nested rows."""
    if isinstance(obj, list):
        for item in obj:
            yield from rows(item, context, source)
        return
    if not isinstance(obj, dict):
        return
    here = context + [str(obj[k]) for k in LABELS if k in obj and not isinstance(obj[k], (dict, list))]
    for key, value in obj.items():
        if isinstance(value, (dict, list)):
            yield from rows(value, here, source)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and is_ratio(key):
            yield source, " / ".join(here) or "-", key, value


def machine():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return f"{os.cpu_count()} cores, {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {platform.machine()}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="files of `zephon-bench ... --json` output")
    ap.add_argument("--machine", default=None, help="the machine, in words (default: from /proc/cpuinfo)")
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--page", default=os.path.join(os.path.dirname(__file__), "..", "guide", "src", "benchmarks.md"))
    ap.add_argument("--stdout", action="store_true", help="print the table instead of writing the page")
    a = ap.parse_args()

    table = [
        f"Measured on {a.machine or machine()}, {a.date}, release build; every figure is a",
        "ratio to a baseline run in the same invocation.",
        "",
        "| input | row | figure | ratio |",
        "|---|---|---|---|",
    ]
    n = 0
    for path in a.inputs:
        for obj in objects(path):
            for source, label, key, value in rows(obj, [], os.path.basename(path)):
                table.append(f"| `{source}` | {label} | `{key}` | {value:.3f} |")
                n += 1
    if n == 0:
        sys.exit("no ratio fields in the inputs: give files of `zephon-bench ... --json` output")
    block = "\n".join(table)
    if a.stdout:
        print(block)
        return
    with open(a.page, encoding="utf-8") as f:
        page = f.read()
    if BEGIN not in page or END not in page:
        sys.exit(f"{a.page}: no {BEGIN} ... {END} markers")
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(a.page, "w", encoding="utf-8") as f:
        f.write(f"{head}{BEGIN}\n{block}\n{END}{tail}")
    print(f"{a.page}: {n} rows")


if __name__ == "__main__":
    main()
