#!/usr/bin/env python3
"""Fails on a broken internal link of the guide or of the README.

Checks, in guide/src/*.md, README.md and the crates' README.md files, every
Markdown link to a relative path (the file must exist) and every `#anchor`
(the target page must have a heading with that anchor, as mdBook makes
them), and that every chapter of guide/src is listed in SUMMARY.md and every
entry of SUMMARY.md exists. `{{#include PATH}}` lines of the guide must name
existing files. Rustdoc intra-doc links (`Type::method`) and links to URLs (`http:`, `https:`, `mailto:`) are
skipped. Standard library only.
"""

import glob
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INCLUDE = re.compile(r"\{\{#include\s+([^}:\s]+)(?::[^}]*)?\}\}")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def strip_code(text):
    """The text without fenced blocks and inline code, line numbers kept."""
    out, fenced = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def anchor(heading):
    """mdBook's id for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"`", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        ids, seen = set(), {}
        with open(path, encoding="utf-8") as f:
            for line in strip_code(f.read()).split("\n"):
                m = HEADING.match(line)
                if m:
                    a = anchor(m.group(2))
                    n = seen.get(a, 0)
                    seen[a] = n + 1
                    ids.add(a if n == 0 else f"{a}-{n}")
        cache[path] = ids
    return cache[path]


def check(path, errors):
    with open(path, encoding="utf-8") as f:
        raw = f.read()
    base = os.path.dirname(path)
    rel = os.path.relpath(path, ROOT)
    if rel.startswith("guide" + os.sep):
        for n, line in enumerate(raw.split("\n"), 1):
            for m in INCLUDE.finditer(line):
                if not os.path.isfile(os.path.join(base, m.group(1))):
                    errors.append(f"{rel}:{n}: include of a missing file {m.group(1)}")
    for n, line in enumerate(strip_code(raw).split("\n"), 1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue
            if (
                re.match(r"^([a-z]+@)?[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z0-9_]+)*(\(\))?$", target)
                and not os.path.exists(os.path.join(base, target))
                and not rel.startswith("guide" + os.sep)
                and rel != "README.md"
            ):
                continue  # a rustdoc intra-doc link (a crate README is also its crate doc)
            file_part, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(base, file_part)) if file_part else path
            if not os.path.exists(dest):
                errors.append(f"{rel}:{n}: link to a missing file {target}")
                continue
            if frag and dest.endswith(".md") and frag not in anchors(dest):
                errors.append(f"{rel}:{n}: no heading #{frag} in {os.path.relpath(dest, ROOT)}")


def main():
    errors = []
    src = os.path.join(ROOT, "guide", "src")
    summary = os.path.join(src, "SUMMARY.md")
    if not os.path.isfile(summary):
        sys.exit("guide/src/SUMMARY.md is missing")
    with open(summary, encoding="utf-8") as f:
        listed = {os.path.normpath(os.path.join(src, t)) for t in LINK.findall(strip_code(f.read()))}
    chapters = sorted(glob.glob(os.path.join(src, "**", "*.md"), recursive=True))
    for c in chapters:
        if c != summary and os.path.normpath(c) not in listed:
            errors.append(f"{os.path.relpath(c, ROOT)}: not listed in guide/src/SUMMARY.md")
    files = chapters + [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "*", "README.md")))
    for path in files:
        check(path, errors)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        sys.exit(f"{len(errors)} broken link(s)")
    print(f"guide links: {len(files)} files checked")


if __name__ == "__main__":
    main()
