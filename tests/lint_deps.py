#!/usr/bin/env python3
"""Checks the module structure that docs/design.md describes.

  1. Dependencies point down only: a file of module M includes headers of M
     or of modules below M (the layer table below), never of a module beside
     or above it.
  2. No include cycle between the headers of the project.
  3. No cycle of calls between the .c files of one module: from the object
     files (nm), file a depends on file b when a uses a symbol b defines; a
     cycle a -> b -> a means the two are one unit split in two.
  4. No production file (a module's .c or .h) over MAX_LINES lines; every
     folder of C sources at the top of the tree is in the layer table (or is
     tests/ or bench/).
  5. A module's public headers (those a file outside the module includes,
     *_int.h aside; cli/, the program, has none) declare only functions some
     file outside the module uses (another module, cli/, tests/, bench/):
     what only the module's own files call belongs in a header of its own
     (*_int.h), or is static. EXPORT_ALLOWED lists the exceptions, each with
     why.

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
# Functions a public header may declare though no file outside the module
# uses them today, each with the reason.
EXPORT_ALLOWED = {
    "log_msg": "the log_* macros of kmod/log.h expand to it in every module",
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
        if n > MAX_LINES:
            out.append(f"{path}: {n} lines, over {MAX_LINES} (split it along a seam)")
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


COMMENT = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
IDENT = re.compile(r'[A-Za-z_][A-Za-z0-9_]*')
DECL_NAME = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*\($')


def code_only(text):
    """text without comments and string literals, line breaks kept."""
    return COMMENT.sub(lambda m: "\n" * m.group(0).count("\n") if m.group(0)[0] == "/" else '""', text)


def header_functions(path):
    """(name, line) of each function a header declares or defines (static
    inline) at file scope: struct members, macros and typedefs aside."""
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        text = code_only(f.read())
    out, depth, stmt, stmt_line, line = [], 0, "", 0, 1
    lines = text.split("\n")
    for n, l in enumerate(lines, 1):
        if l.lstrip().startswith("#"):
            continue
        for ch in l + "\n":
            if depth == 0 and not stmt.strip() and not ch.isspace():
                stmt_line = n
            if ch == "{":
                if depth == 0:
                    name = decl_name(stmt)
                    if name and "inline" in stmt.split():
                        out.append((name, stmt_line))
                    stmt = ""
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    stmt = ""
            elif depth == 0:
                if ch == ";":
                    name = decl_name(stmt)
                    if name:
                        out.append((name, stmt_line))
                    stmt = ""
                else:
                    stmt += ch
    return out


def decl_name(stmt):
    """The function a file-scope declaration names, or None."""
    words = stmt.split()
    if not words or words[0] in ("typedef", "struct", "enum", "union") and "(" not in stmt:
        return None
    if words[0] == "typedef" or "=" in stmt.split("(")[0]:
        return None
    head = stmt.split("(")[0] + "("
    m = DECL_NAME.search(head.strip())
    if not m or m.group(1) in ("__attribute__", "sizeof"):
        return None
    return m.group(1)


def export_problems():
    """Functions of a public header no file outside its module uses."""
    words = {}                     # path -> the identifiers its code uses
    for top in sorted(os.listdir(ROOT)):
        d = os.path.join(ROOT, top)
        if top.startswith(".") or top == "build" or not os.path.isdir(d):
            continue
        for dirpath, dirnames, files in os.walk(d):
            dirnames[:] = [x for x in dirnames if not x.startswith(".")]
            for name in files:
                if name.endswith((".c", ".h")):
                    p = os.path.relpath(os.path.join(dirpath, name), ROOT)
                    with open(os.path.join(ROOT, p), encoding="utf-8", errors="replace") as f:
                        words[p] = set(IDENT.findall(code_only(f.read())))
    included = set()              # headers some file outside their module includes
    for p in words:
        for inc in includes(p):
            if inc.split("/")[0] != p.split("/")[0]:
                included.add(inc)
    out = []
    top = max(LAYER.values())
    for mod, path in sources():
        # cli/, the top, is the program: nothing links against its headers.
        if (not path.endswith(".h") or path.endswith("_int.h") or path not in included
                or LAYER[mod] == top):
            continue
        for name, line in header_functions(path):
            if name in EXPORT_ALLOWED:
                continue
            if not any(name in w for p, w in words.items() if p.split("/")[0] != mod):
                out.append(f"{path}:{line}: {name} is exported but no file outside {mod}/ "
                           "uses it (make it static, or declare it in the module's *_int.h)")
    for name in sorted(EXPORT_ALLOWED):
        if not any(name in w for w in words.values()):
            out.append(f"{name}: in EXPORT_ALLOWED but gone: take it off the list")
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
    problems += size_problems() + layer_table_problems() + export_problems()

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
