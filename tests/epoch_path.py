#!/usr/bin/env python3
"""How many files one steady protected epoch crosses (docs/design.md, "One
epoch"): issue 27 asks for at most MAX_FILES.

The call graph is the compiler's: every .c of primary/ and replication/ is
compiled once more at -O0 with -fcallgraph-info (so that a static function
is a node of its own, as it is in the source). The walk is breadth-first
from the three entry points of an epoch's path (ENTRIES): a function
defined in a .c of primary/ or replication/ is a core function and is
followed; the first function reached in a .c of a lower module is a helper
and is not followed; a static inline of a header is followed and not
counted (it is code of the caller's file); anything else (libc, libev) is
not counted.

The steady path only: a protected VM with no disk, no witness, no drill, no
migration, no event log, no test mode, nothing failing. COLD lists the
functions the walk does not enter, each with the reason (the case it runs
in). GUARDED lists those a caller on the path calls only behind a test of
its own: each such call on the path must have the test on its line or the
line before (else the call counts as made, and the script says so). A call
through a pointer the graph does not see is in EXTRA_EDGES.

Usage: tests/epoch_path.py [BUILD_DIR] [-v]   (make lint runs it; the flags
come from $EPOCH_PATH_CFLAGS, as make passes its CFLAGS)
Exit 0 when the path stays within MAX_FILES core files; 1 otherwise, or when
a name in ENTRIES, COLD, GUARDED or EXTRA_EDGES is gone (take it off the list),
or a guarded call has lost its test.
"""
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections import deque

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
WALKED = ("primary", "replication")
MAX_FILES = 6

# The epoch timer, the link's sent() and the bytes of an ACK arriving.
ENTRIES = [
    "repl_primary_on_epoch_timer",
    "primary/engine.c:on_sent",
    "primary/engine.c:on_recv",
]

# Calls through a pointer: (caller, callee, why).
EXTRA_EDGES = [
    ("primary/engine.c:on_recv", "primary/engine.c:on_frame",
     "on_recv feeds the bytes to repl_link_feed with on_frame as the frame callback"),
]

# Not entered by a steady epoch: name -> why.
COLD = {
    # logging and notices: counted into metrics on the hot path, logged only on a change
    "log_msg": "logging (kmod/log.h's macros)",
    "log_set_epoch": "logging: the epoch number for the log lines",
    "net_notify": "systemd notices: at protection and on changes of state",
    # the states an epoch is not in
    "primary/cycle.c:pause_for_handover": "a migration's hand-over (after p->pc says ready)",
    "repl_pc_src_room": "post-copy's pages on the link: only link-owned cookies of a migration",
    "repl_pc_src_due": "a migration's convergence",
    "primary/cycle.c:maybe_switch": "a migration's convergence (p->migrate_ms)",
    "primary/cycle.c:send_handover": "a migration's hand-over",
    "repl_primary_event": "a change of state (protected, lost, switched)",
    "repl_witness_vouch": "with a witness",
    "repl_witness_resign": "a migration's hand-over with a witness (P_SWITCHING)",
    "repl_primary_finish": "a stop: the last epoch acknowledged (p->finishing)",
    "replication/wire.c:tx_free": "a link-owned buffer's sent() (the sync, post-copy, control messages)",
    "repl_sync_room": "the initial sync (P_SYNC)",
    "repl_epoch_precopy": "pre-copy inside an epoch (UNDERSTUDY_PRECOPY)",
    "repl_epoch_precopy_wanted": "pre-copy inside an epoch (UNDERSTUDY_PRECOPY)",
    "primary/epoch.c:forget_resent": "pre-copy: the slot was opened half-way (q->open)",
    "primary/epoch.c:verify_pack": "test mode (q->verify)",
    "ckpt_digest_capture": "test mode (q->verify)",
    "repl_drill_pri_capture": "a drill (drill.want_digest)",
    "repl_drill_pri_sent": "a drill (drill.digest_ready)",
    "repl_disk_requeue": "a failed capture or send (undo)",
    # frames of the secondary other than ACK (on_frame's other cases)
    "primary/engine.c:on_hello": "the handshake (P_HELLO)",
    "primary/engine.c:switch_request": "the secondary asks for a switchover",
    "repl_drill_pri_section": "a drill's begin or end",
    "repl_primary_on_fence": "a fence: a switchover or a migration ends",
    "primary/engine.c:postcopy_frame": "post-copy's page requests",
    "proto_type_name": "an unexpected frame (logged)",
    "proto_strerror": "bad data from the secondary (logged)",
    # failures
    "primary/epoch.c:undo": "a capture that cannot reach the link",
    "repl_fault_set": "a failure",
    "repl_fault_local": "a failure",
    "repl_fault_send": "a failure",
    "repl_primary_on_fault": "a failure",
    "repl_primary_fault": "a failure",
    "ckpt_requeue": "a failed capture",
}

# Called on the path only behind a test of the caller's: name -> (the test, what it is).
GUARDED = {
    "repl_pc_src_ready": ("p->pc", "a migration's hand-over"),
    "repl_pc_src_cap_bytes_per_ms": ("p->pc", "a migration's bandwidth cap"),
    "repl_witness_valid": ("->witness", "the lease gate of a witness"),
    "repl_rate_wait_ns": ("q->rate", "a migration's bandwidth limit"),
    "repl_rate_charge": ("q->rate", "a migration's bandwidth limit"),
    "repl_drill_pri_acked": ("q->drill.id", "a drill's lag"),
    "repl_event_log": ("repl_event_log_on()", "the test event log"),
    "repl_disk_capture": ("repl_disk_cap_on(", "a disk"),
    "repl_disk_pack": ("repl_disk_cap_on(", "a disk"),
    "repl_disk_grow": ("repl_disk_cap_on(", "a disk"),
}


def compile_graphs(tmp, cflags):
    """-O0 call graphs of the walked folders: the paths of the .ci files."""
    flags = [f for f in shlex.split(cflags) if not re.match(r"-O\d?$|-g$|-Werror$", f)]
    jobs = []
    for mod in WALKED:
        for src in sorted(glob.glob(os.path.join(ROOT, mod, "*.c"))):
            rel = os.path.relpath(src, ROOT)
            base = os.path.join(tmp, rel.replace("/", "_")[:-2])
            jobs.append((rel, base, ["cc"] + flags + [
                "-O0", "-fcallgraph-info", "-c", rel, "-o", base + ".o",
                "-dumpdir", tmp + "/", "-dumpbase", os.path.basename(base)]))
    running, out = [], []
    while jobs or running:
        while jobs and len(running) < (os.cpu_count() or 1):
            rel, base, cmd = jobs.pop()
            running.append((subprocess.Popen(cmd, cwd=ROOT), rel, base + ".ci"))
        p, rel, ci = running.pop(0)
        if p.wait() != 0:
            sys.exit(f"epoch_path: cannot compile {rel}")
        out.append(ci)
    return out


NODE = re.compile(r'node: \{ title: "([^"]+)" label: "([^"\\]+)\\n([^":]+):\d+:\d+"([^}]*)\}')
EDGE = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)" label: "([^":]+):(\d+):\d+"')


def parse(graphs):
    """defined: title -> defining file; calls: title -> [(callee title, file, line)]."""
    defined, calls = {}, {}
    for ci in graphs:
        with open(ci, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for title, _name, where, rest in NODE.findall(text):
            if "ellipse" not in rest:          # defined in this unit
                defined[title] = os.path.normpath(where)
        for src, dst, where, line in EDGE.findall(text):
            calls.setdefault(src, []).append((dst, os.path.normpath(where), int(line)))
    return defined, calls


def lower_definitions(build):
    """Global functions of the other modules -> their .c (from the objects)."""
    where = {}
    for obj in glob.glob(os.path.join(build, "obj", "*", "*.o")):
        mod = os.path.basename(os.path.dirname(obj))
        if mod in WALKED:
            continue
        src = f"{mod}/{os.path.basename(obj)[:-2]}.c"
        r = subprocess.run(["nm", "--defined-only", obj], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] == "T":
                where[parts[2]] = src
    return where


def guarded(path, line, test):
    """The call at path:line has test on its line or the line before."""
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    return any(test in lines[i] for i in (line - 1, line - 2) if 0 <= i < len(lines))


def walk(defined, calls, lower):
    """core, helpers: function -> its file; parent: function -> who called it first."""
    core, helpers, parent = {}, {}, {}
    todo = deque((e, None) for e in ENTRIES)
    extra = {}
    for a, b, _ in EXTRA_EDGES:
        extra.setdefault(a, []).append(b)
    while todo:
        fn, by = todo.popleft()
        if fn in parent or fn in COLD:
            continue
        parent[fn] = by
        where = defined.get(fn)
        if where is None:
            if fn in lower:
                helpers[fn] = lower[fn]
            continue
        if where.endswith(".c") and where.split("/")[0] in WALKED:
            core[fn] = where
        elif where.endswith(".c"):
            helpers[fn] = where
            continue
        elif not where.endswith(".h"):
            continue
        for callee, where, line in calls.get(fn, []):
            if callee in GUARDED and guarded(where, line, GUARDED[callee][0]):
                continue
            todo.append((callee, fn))
        todo.extend((c, fn) for c in extra.get(fn, []))
    return core, helpers, parent


def main():
    args = [a for a in sys.argv[1:] if a != "-v"]
    verbose = "-v" in sys.argv[1:]
    build = args[0] if args else "build"
    cflags = os.environ.get("EPOCH_PATH_CFLAGS", "-std=gnu11 -D_GNU_SOURCE -pthread -I. "
                            f"-I{build}/gen")
    with tempfile.TemporaryDirectory() as tmp:
        defined, calls = parse(compile_graphs(tmp, cflags))
    lower = lower_definitions(os.path.join(ROOT, build))
    problems = []
    known = set(defined) | set(lower)
    for name in ENTRIES + [e[0] for e in EXTRA_EDGES] + [e[1] for e in EXTRA_EDGES] + list(COLD) + list(GUARDED):
        if name not in known:
            problems.append(f"{name}: named in tests/epoch_path.py but gone: take it off the list")
    core, helpers, parent = walk(defined, calls, lower)
    files = sorted(set(core.values()))
    hfiles = sorted(set(helpers.values()))
    print(f"epoch path: {len(files)} core files, {len(core)} core functions; with helpers "
          f"{len(files) + len(hfiles)} files, {len(core) + len(helpers)} functions")
    if verbose:
        for f in files + hfiles:
            fns = sorted(n for n, w in list(core.items()) + list(helpers.items()) if w == f)
            print(f"  {f} ({len(fns)}):")
            for n in fns:
                print(f"    {n.split(':')[-1]} <- {(parent[n] or 'entry').split(':')[-1]}")
    if len(files) > MAX_FILES:
        problems.append(f"a steady epoch enters {len(files)} files of primary/ and replication/ "
                        f"(at most {MAX_FILES}): {' '.join(files)}")
    for p in problems:
        print(f"epoch_path: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
