#!/usr/bin/env python3
"""Slowdown of a guest that rewrites a hot set (the dirty guest with
hot_mb: 64 MiB written once, then only 8 MiB rewritten round and round at
50 MiB/s: every page of the set again every ~160 ms, about every 6 epochs),
protected at 25 ms epochs with the hot-page set off (every rewrite pays a
write fault after its re-protection: UNDERSTUDY_HOT_PAUSE_US=0) and on (the
default), beside the same guest unprotected (the reference), ROUNDS rounds
interleaved. The figure is the guest's compute rate (work units per TSC
tick) over a 3 s window after 1 s of warm-up, as bench_protect.py measures
it.

Beside the slowdown, counts that do not depend on the host's speed
(bench/counts.py), over the same window of each protected round: pages
sent per epoch (the dirty pages each capture took, pre-copy included),
pages re-protected per epoch (harvested and cleared in KVM: every one
costs a write fault when the guest writes it again), the hot set's size
at the end, the bytes the link carried per epoch, and KVM's own count of
the write faults it served without its MMU lock (pf_fast, how a write to
a page re-protected for dirty logging is served), per epoch, where KVM's
debugfs statistics can be read (root; else the output says why not).
--counts runs only the protected rounds and prints only the counts
(make bench-counts; the nested VM).

A benchmark, not a test. usage: bench_hot.py [--rounds N] [--counts]"""
import argparse, os, statistics, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_protect as bp     # noqa: E402  (the pair, the reader, the window)
import counts                  # noqa: E402
from figures import figure     # noqa: E402

GUEST = "dirty:mb=64,hot_mb=8,rate_mb=50,report_ms=%d" % bp.REPORT_MS
NREPORTS = int(bp.WINDOW_S * 1000 / bp.REPORT_MS)


def unprotected(tmp):
    procs = bp.Procs(tempfile.mkdtemp(dir=tmp))
    try:
        con = bp.free_port()
        procs.start("run", ["run", "--guest", GUEST, "--mem", bp.DIRTY_MEM, "--console",
                            "tcp:%s:%d" % (bp.HOST, con)])
        bp.wait_port(con)
        (_, work), _ = bp.measure_pages(con, NREPORTS)
        return work, None
    finally:
        procs.kill_all()


def protected(tmp, hot):
    d = tempfile.mkdtemp(dir=tmp)
    procs = bp.Procs(d)
    if hot:
        os.environ.pop("UNDERSTUDY_HOT_PAUSE_US", None)
    else:
        os.environ["UNDERSTUDY_HOT_PAUSE_US"] = "0"
    try:
        pri, _, _, pcon, _, pctl = bp.start_pair(procs, GUEST, bp.DIRTY_MEM, 25,
                                                 bp.STEADY_TIMEOUT_MS, bp.STEADY_TIMEOUT_MS, d)
        st0, kvm0 = bp.status(pctl), counts.kvm_stats(pri.pid)[0]
        (_, work), _ = bp.measure_pages(pcon, NREPORTS)
        st1, (kvm1, why) = bp.status(pctl), counts.kvm_stats(pri.pid)
        return work, st1, window_counts(st0, st1, kvm0, kvm1, why)
    finally:
        os.environ.pop("UNDERSTUDY_HOT_PAUSE_US", None)
        procs.kill_all()


def window_counts(st0, st1, kvm0, kvm1, why):
    """The counts of a window between two status readings (and KVM's
    counters, when readable: else why)."""
    epochs = st1["epoch"] - st0["epoch"]
    total = lambda st: st["dirty_pages_avg"] * st["epoch"]   # status: the average of all epochs
    c = {"pages_sent": counts.per(total(st1) - total(st0), epochs),
         "reprotected": counts.per(st1["reprotected_pages"] - st0["reprotected_pages"], epochs),
         "hot_pages": st1["hot_pages"],
         "bytes": counts.per(st1["bytes_sent"] - st0["bytes_sent"], epochs),
         "epochs": epochs}
    if kvm0 and kvm1 and "pf_fast" in kvm1:
        c["write_faults"] = counts.per(kvm1["pf_fast"] - kvm0["pf_fast"], epochs)
        c["page_faults"] = counts.per(kvm1.get("pf_taken", 0) - kvm0.get("pf_taken", 0), epochs)
    else:
        c["why_no_faults"] = why or "KVM has no pf_fast statistic"
    return c


COUNTS = [("pages_sent", "pages sent per epoch", "pages/epoch"),
          ("reprotected", "pages re-protected per epoch", "pages/epoch"),
          ("hot_pages", "hot-set size at the end", "pages"),
          ("bytes", "bytes on the link per epoch", "bytes/epoch"),
          ("write_faults", "KVM write faults (pf_fast) per epoch", "faults/epoch"),
          ("page_faults", "KVM page faults (pf_taken) per epoch", "faults/epoch")]


def print_counts(cnt, rounds):
    print("counts (host-independent), %s, 25 ms epochs, %d rounds (median of rounds, [min..max]):"
          % (GUEST, rounds))
    for mode, rs in cnt.items():
        for k, name, unit in COUNTS:
            vals = [r[k] for r in rs if k in r]
            if not vals:
                continue
            print("  %-7s %-38s %10.1f [%.1f..%.1f]" % (mode, name, statistics.median(vals),
                                                       min(vals), max(vals)))
            counts.count_figure("%s, hot-set rewriter (%s), %s" % (name, GUEST, mode), vals, unit)
        why = [r["why_no_faults"] for r in rs if "why_no_faults" in r]
        if why:
            print("  %-7s write faults per epoch: not measured (%s)" % (mode, why[0]))


def main():
    ap = argparse.ArgumentParser(description="slowdown of a guest rewriting a hot set")
    ap.add_argument("--rounds", type=counts.positive_int, default=3)
    ap.add_argument("--counts", action="store_true", help="only the host-independent counts")
    a = ap.parse_args()
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        print("bench_hot: SKIP: /dev/kvm not usable here")
        return 0
    rounds = a.rounds
    tmp = tempfile.mkdtemp()
    res = {"unprotected": [], "hot off": [], "hot on": []}
    st, cnt = {}, {"hot off": [], "hot on": []}
    for i in range(rounds):
        if i:
            print("  (round %d done)" % i, flush=True)
        if not a.counts:
            res["unprotected"].append(unprotected(tmp)[0])
        for mode, hot in (("hot off", False), ("hot on", True)):
            w, st[mode], c = protected(tmp, hot)
            res[mode].append(w)
            cnt[mode].append(c)
    if a.counts:
        print_counts(cnt, rounds)
        return 0
    ref = statistics.median(res["unprotected"])
    print("guest rewriting a hot set (%s), 25 ms epochs, %d rounds interleaved; compute rate "
          "(median of rounds) vs unprotected" % (GUEST, rounds))
    for mode in ("hot off", "hot on"):
        slow = [100 * (1 - w / ref) for w in res[mode]]
        print("  protected, %-7s slowdown %5.1f %% [%.1f..%.1f]  pause p50 %.0f us, p99 %.0f us, "
              "dirty pages/epoch %.0f (last round)" % (mode, statistics.median(slow), min(slow),
                                                      max(slow), st[mode]["pause_p50_us"],
                                                      st[mode]["pause_p99_us"],
                                                      st[mode]["dirty_pages_avg"]))
        figure("guest slowdown, hot-set rewriter (%s), %s" % (GUEST, mode), statistics.median(slow), "%",
               "unprotected compute rate, same run", None, goal="<= 5 %", met=statistics.median(slow) <= 5,
               runs=len(slow), spread=[min(slow), max(slow)])
    print("  reference: unprotected, same guest, same run (spread of its rounds %.1f %%)" %
          (100 * (max(res["unprotected"]) - min(res["unprotected"])) / ref))
    print_counts(cnt, rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
