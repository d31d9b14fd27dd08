#!/usr/bin/env python3
"""Checks the module structure that docs/design.md describes.

  1. Dependencies point down only: a file of module M includes headers of M
     or of modules below M (the layer table below), never of a module beside
     or above it.
  2. No include cycle between the headers of the project.
  3. No cycle of calls between the .c files of one module: from the object
     files (nm), file a depends on file b when a uses a symbol b defines; a
     cycle a -> b -> a means the two are one unit split in two.
  4. No production file (a module's .c or .h) over MAX_LINES lines, but for
     the known exceptions below; every folder of C sources at the top of the
     tree is in the layer table (or is tests/ or bench/).

Usage: tests/lint_deps.py [BUILD_DIR]   (objects in BUILD_DIR/obj, default build)
Exit 0 when clean; 1 with one line per violation.
"""
import os
import re
import subprocess
import sys

# Layer of each module: a module may include its own headers and those of
# modules on a lower layer. tests/ and bench/ may include anything.
LAYER = {
    "kmod": 0, "guest": 0,
    "machine": 1,
    "proto": 2,          # encodes machine state, so above machine
    "checkpoint": 3, "net": 3,
    "replication": 4,
    "primary": 5, "secondary": 5,
    "host": 6,           # issue 27: the one owner of a running VM (not there yet)
    "cli": 7,
}
# Folders with C sources that are not modules of the product.
NOT_MODULES = {"tests", "bench", "build", "debian", "contrib", "docs", "man", "ocf"}

MAX_LINES = 800
# Files over MAX_LINES today. TODO(issue 27): split each (the agents into
# primary/ and secondary/, a host/ layer, module headers that export only
# what others use) and take it off this list; nothing new goes on it.
KNOWN_LONG = {
    "machine/machine.c",
}
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources():
    for mod in LAYER:
        d = os.path.join(ROOT, mod)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith((".c", ".h")):
                yield mod, f"{mod}/{name}"


def includes(path):
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        text = f.read()
    out = []
    for inc in INCLUDE.findall(text):
        if "/" in inc and inc.split("/")[0] in LAYER:
            out.append(inc)
        elif "/" not in inc:       # a header beside the file
            out.append(os.path.join(os.path.dirname(path), inc))
    return out


def cycles(graph):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def nm_symbols(obj):
    res = subprocess.run(["nm", "--defined-only", obj], capture_output=True, text=True)
    defined = {l.split()[-1] for l in res.stdout.splitlines() if len(l.split()) == 3
               and l.split()[1] in "TDBRC"}
    res = subprocess.run(["nm", "--undefined-only", obj], capture_output=True, text=True)
    used = {l.split()[-1] for l in res.stdout.splitlines() if l.split()}
    return defined, used


def size_problems():
    out = []
    for _, path in sources():
        with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES and path not in KNOWN_LONG:
            out.append(f"{path}: {n} lines, over {MAX_LINES} (split it; tests/lint_deps.py "
                       "KNOWN_LONG lists the old exceptions)")
    for path in sorted(KNOWN_LONG):
        if not os.path.exists(os.path.join(ROOT, path)):
            out.append(f"{path}: in KNOWN_LONG but gone: take it off the list")
    return out


def layer_table_problems():
    out = []
    for name in sorted(os.listdir(ROOT)):
        d = os.path.join(ROOT, name)
        if name.startswith(".") or name in LAYER or name in NOT_MODULES or not os.path.isdir(d):
            continue
        if any(f.endswith((".c", ".h")) for f in os.listdir(d)):
            out.append(f"{name}/: C sources in a folder the layer table does not know")
    return out


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    problems = []
    graph = {}
    for mod, path in sources():
        incs = includes(path)
        graph[path] = [i for i in incs if os.path.exists(os.path.join(ROOT, i))]
        for inc in incs:
            dep = inc.split("/")[0]
            if dep != mod and LAYER.get(dep, 99) >= LAYER[mod]:
                problems.append(f"{path}: includes {inc} ({dep} is not below {mod})")
    for comp in cycles(graph):
        problems.append("include cycle: " + " -> ".join(comp))
    problems += size_problems() + layer_table_problems()

    objdir = os.path.join(ROOT, build, "obj")
    checked = 0
    for mod in LAYER:
        d = os.path.join(objdir, mod)
        if not os.path.isdir(d):
            continue
        objs = {o[:-2]: os.path.join(d, o) for o in sorted(os.listdir(d)) if o.endswith(".o")}
        syms = {name: nm_symbols(p) for name, p in objs.items()}
        calls = {a: sorted(b for b in objs if b != a and syms[a][1] & syms[b][0]) for a in objs}
        checked += len(objs)
        for comp in cycles(calls):
            problems.append(f"call cycle in {mod}/: " + " <-> ".join(c + ".c" for c in comp))
    if checked == 0:
        problems.append(f"no object files under {objdir}: build first (make)")

    for p in problems:
        print("lint:", p)
    print(f"lint: {len(graph)} files, {checked} objects, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
