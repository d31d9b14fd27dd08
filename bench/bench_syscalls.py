#!/usr/bin/env python3
"""System calls per epoch of the two agents, protecting an idle guest (the
counter guest, no requests) and a busy one (the dirty guest writing 64 MiB
round and round at 50 MiB/s), 25 ms epochs, a real pair on 127.0.0.1.

The method: `strace -f -c -p PID` on every thread of the primary and of the
secondary for SECONDS seconds once the pair is protected, the primary's
epoch count (status json) read once strace is attached and again before
it detaches (the two status requests' own calls, a few dozen on the
primary, are in the count); calls / epochs. strace slows every system call down a great
deal, so the times it reports are not printed; the calls per epoch are a
count, and what the agents do for an epoch does not change under it (the
epochs are fewer). The vCPU threads' KVM_RUN are in ioctl: a guest exit to
the agent is one call. ROUNDS rounds of each guest, interleaved; the figure
is the median of the rounds with their spread, and the top calls of the
last round are printed.

A benchmark, not a test. Without a usable /dev/kvm or without strace it
says SKIP and why, and exits 77; bad arguments exit 2.
usage: bench_syscalls.py [--rounds N] [--seconds S] [--top N]"""
import argparse, os, shutil, statistics, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_protect as bp     # noqa: E402  (the pair)
import counts                  # noqa: E402

GUESTS = {"idle": ("counter", None),
          "busy": ("dirty:mb=64,rate_mb=50,report_ms=%d" % bp.REPORT_MS, bp.DIRTY_MEM)}


def one_round(tmp, kind, seconds):
    """{agent: {syscall: calls}} and the primary's epochs in the window."""
    guest, mem = GUESTS[kind]
    d = tempfile.mkdtemp(dir=tmp)
    procs = bp.Procs(d)
    try:
        pri, _, _, _, _, pctl = bp.start_pair(procs, guest, mem, 25, bp.STEADY_TIMEOUT_MS,
                                              bp.STEADY_TIMEOUT_MS, d)
        sec = procs.procs[0]
        time.sleep(1.0)          # past the first epochs' faults
        tr = counts.Strace([pri.pid, sec.pid])
        try:
            # Both readings while traced: the window's epochs are the ones
            # strace saw (attaching and detaching may take long), and the
            # two status requests' own calls on the primary are counted.
            e0 = bp.status(pctl)["epoch"]
            time.sleep(seconds)
            e1 = bp.status(pctl)["epoch"]
        finally:
            calls = tr.stop()
        return {"primary": calls[0], "secondary": calls[1]}, e1 - e0
    finally:
        procs.kill_all()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description="system calls per epoch of the agents")
    ap.add_argument("--rounds", type=counts.positive_int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--top", type=int, default=6)
    a = ap.parse_args()
    if not a.seconds > 0:
        ap.error("--seconds: must be above 0")
    if a.top < 0:
        ap.error("--top: must be 0 or more")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        print("bench_syscalls: SKIP: /dev/kvm not usable here")
        return 77
    if not counts.strace_available():
        print("bench_syscalls: SKIP: no strace (apt-get install strace)")
        return 77
    tmp = tempfile.mkdtemp()
    per_epoch = {(k, ag): [] for k in GUESTS for ag in ("primary", "secondary")}
    last = {}
    for _ in range(a.rounds):
        for kind in GUESTS:
            calls, epochs = one_round(tmp, kind, a.seconds)
            print("  (%s guest: %d epochs in the window)" % (kind, epochs), flush=True)
            if epochs <= 0:
                raise SystemExit("bench_syscalls: no epoch committed in %.1f s (%s guest)" %
                                 (a.seconds, kind))
            for ag, c in calls.items():
                per_epoch[(kind, ag)].append(sum(c.values()) / epochs)
                last[(kind, ag)] = (c, epochs)
    print("system calls per committed epoch, 25 ms epochs, %d rounds of %.1f s "
          "(strace -f -c -p on every thread of each agent; median of rounds, [min..max]):"
          % (a.rounds, a.seconds))
    for (kind, ag), vals in per_epoch.items():
        c, epochs = last[(kind, ag)]
        top = sorted(c.items(), key=lambda kv: -kv[1])[:a.top]
        print("  %-4s guest, %-9s %8.1f [%.1f..%.1f]   top (last round, %d epochs): %s" %
              (kind, ag, statistics.median(vals), min(vals), max(vals), epochs,
               ", ".join("%s %.1f" % (n, v / epochs) for n, v in top)))
        counts.count_figure("system calls per epoch, %s, %s guest (%s)" %
                            (ag, kind, GUESTS[kind][0]), vals, "calls/epoch",
                            "strace -f -c -p, host-independent count")
    return 0


if __name__ == "__main__":
    sys.exit(main())
