#!/usr/bin/env python3
"""Check the include graph of src/ against the layers of docs/ARCHITECTURE.md.

Each top folder of src/ has a rank; a file may include headers of its own folder or of
a folder of lower rank, never one above it or a sibling of the same rank. No two files
may include each other (directly or through a longer cycle). Prints one line per
violation and exits 1 if there is any; prints the layer summary and exits 0 otherwise.

    python3 tools/check_layers.py [SRC_DIR]
"""
import os
import re
import sys

# Lower rank = lower layer. Folders of the same rank are siblings: neither includes
# the other (train and report meet only in cmd, through observers).
RANKS = {
    "core": 0,
    "gpu": 1,
    "dist": 1,
    "ops": 2,
    "data": 3,
    "backend": 4,
    "nn": 5,
    "train": 6,
    "report": 6,
    "cmd": 7,
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE = (".c", ".h", ".cu", ".cuh", ".inc")


def scan(src):
    edges = {}
    for dirpath, _, files in os.walk(src):
        for name in files:
            if not name.endswith(SOURCE):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src)
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            edges[rel] = []
            for inc in INCLUDE.findall(text):
                # includes are written from src/ ("nn/net.h") or, rarely, relative
                # to the including file ("backend_cpu_ops.inc")
                if os.path.exists(os.path.join(src, inc)):
                    edges[rel].append(os.path.normpath(inc))
                else:
                    local = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
                    if os.path.exists(os.path.join(src, local)):
                        edges[rel].append(local)
    return edges


def folder(rel):
    return rel.split(os.sep)[0]


def layer_errors(edges):
    errors = []
    for f, incs in sorted(edges.items()):
        a = folder(f)
        if a not in RANKS:
            errors.append(f"{f}: folder '{a}' has no layer in tools/check_layers.py")
            continue
        for inc in incs:
            b = folder(inc)
            if b == a:
                continue
            if b not in RANKS:
                errors.append(f"{f}: includes {inc} from unknown folder '{b}'")
            elif RANKS[b] >= RANKS[a]:
                kind = "a sibling" if RANKS[b] == RANKS[a] else "a layer above"
                errors.append(f"{f}: includes {inc} ({kind}: {a} -> {b})")
    return errors


def cycle_errors(edges):
    errors, state = [], {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in edges.get(node, []):
            if state.get(nxt) == 1:
                cyc = stack[stack.index(nxt):] + [nxt]
                errors.append("include cycle: " + " -> ".join(cyc))
            elif nxt in edges and not state.get(nxt):
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for n in sorted(edges):
        if not state.get(n):
            visit(n, [])
    return errors


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "src"
    if not os.path.isdir(src):
        print(f"check_layers: no folder '{src}'", file=sys.stderr)
        return 2
    edges = scan(src)
    errors = layer_errors(edges) + cycle_errors(edges)
    for e in errors:
        print(e)
    if errors:
        print(f"check_layers: {len(errors)} violation(s)")
        return 1
    order = sorted(RANKS, key=lambda k: (RANKS[k], k))
    print("check_layers: ok, " + " < ".join(order) + f" ({len(edges)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
