#!/usr/bin/env python3
"""Checks that every include in src/, shim/ and include/ runs downward.

The layers, lowest first (docs/design.md draws them): a file may include
files of its own layer and of the layers before it, never of a layer
after it. A module is a header and its source file (same path without the
extension); no two modules may include each other, and the modules of a
layer may not include one another in a cycle either.

  tools/check_layers.py            check; exit 1 on any violation
  tools/check_layers.py --stats    also print the counts (files per layer,
                                   biggest file, include edges)
"""
import os
import re
import sys

LAYERS = ["include", "src/base", "src/platform", "src/support", "src/meta", "src/backend", "src/diag",
          "src/frontend", "src/api", "shim"]
INCLUDE_DIRS = ["src", "include"]  # where "x/y.h" is looked up, as the build does
SOURCE_EXT = (".h", ".cpp", ".c")
MAX_LINES = 600


def layer_of(path):
    for rank, layer in enumerate(LAYERS):
        if path == layer or path.startswith(layer + "/"):
            return rank
    return None


def collect(root):
    files = []
    for top in ("src", "shim", "include"):
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in names:
                if n.endswith(SOURCE_EXT):
                    files.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(files)


def resolve(root, includer, name):
    for base in [os.path.dirname(includer)] + INCLUDE_DIRS:
        cand = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def cycles(nodes, edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
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
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    problems = []
    files = collect(root)
    module = lambda p: os.path.splitext(p)[0]
    edges = {}
    upward = 0
    for f in files:
        rank = layer_of(f)
        if rank is None:
            problems.append(f"{f}: not in a layer folder ({', '.join(LAYERS)})")
            continue
        with open(os.path.join(root, f), errors="replace") as fh:
            text = fh.read()
        lines = text.count("\n")
        if lines > MAX_LINES:
            problems.append(f"{f}: {lines} lines (one concern a file: at most {MAX_LINES})")
        for name in re.findall(r'^\s*#\s*include\s*"([^"]+)"', text, re.M):
            target = resolve(root, f, name)
            if target is None:
                problems.append(f"{f}: includes \"{name}\", which is not in the tree")
                continue
            trank = layer_of(target)
            if trank is None or trank > rank:
                upward += 1
                problems.append(f"{f} ({LAYERS[rank]}) includes {target} "
                                f"({LAYERS[trank] if trank is not None else 'no layer'}): an upward include")
            if module(target) != module(f):
                edges.setdefault(module(f), set()).add(module(target))
    nodes = {module(f) for f in files}
    mutual = sorted({tuple(sorted((a, b))) for a in edges for b in edges[a] if a in edges.get(b, ())})
    for a, b in mutual:
        problems.append(f"{a} and {b} include each other")
    loops = [c for c in cycles(nodes, edges) if len(c) > 2]
    for comp in loops:
        problems.append("include cycle among " + ", ".join(comp))
    if "--stats" in sys.argv:
        per_layer = {}
        for f in files:
            per_layer.setdefault(LAYERS[layer_of(f)] if layer_of(f) is not None else "?", []).append(f)
        sizes = sorted(((open(os.path.join(root, f)).read().count("\n"), f) for f in files), reverse=True)
        print("files per layer: " + ", ".join(f"{l} {len(per_layer.get(l, []))}" for l in LAYERS))
        print(f"biggest files: " + ", ".join(f"{f} ({n})" for n, f in sizes[:5]))
        print(f"modules {len(nodes)}, include edges between modules {sum(len(v) for v in edges.values())}, "
              f"upward includes {upward}, mutual pairs {len(mutual)}, longer cycles {len(loops)}")
    for p in problems:
        print("layers: " + p)
    if problems:
        print(f"layers: {len(problems)} problem(s); the layer order is in tools/check_layers.py and docs/design.md")
        return 1
    print(f"layers: {len(files)} files, every include runs downward, no include cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
