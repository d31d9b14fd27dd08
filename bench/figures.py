#!/usr/bin/env python3
"""One line per benchmark figure, for build/bench/results.json.

A benchmark prints its figures for people; beside the main ones it calls
figure(), which prints one more line:

    FIGURE {"name": ..., "value": ..., "unit": ..., "reference": ...,
            "reference_value": ..., "ratio": ..., "goal": ..., "met": ...}

`make bench` keeps all it prints in build/bench/bench.log and then turns
the FIGURE lines (and the MACHINE line `python3 bench/figures.py machine`
prints first) into results.json (bench/plots.py --from-log). The C
benchmarks print the same line themselves.

    python3 bench/figures.py machine    the MACHINE line: cores, kernel, KVM
"""
import json, os, platform, sys


def pct(xs, p):
    """Percentile p of xs (linear rank, rounded; 0.0 for none)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else 0.0


def figure(name, value, unit, reference=None, reference_value=None, ratio=None, goal=None, met=None,
           runs=None, spread=None):
    """name: what was measured; value in unit; reference: what it is set
    against, measured in the same run (reference_value, same unit), and
    ratio = value / reference_value unless given; goal: the goal as text and
    met: whether it was met (None when there is no goal)."""
    if ratio is None and reference_value:
        ratio = value / reference_value
    rec = {"name": name, "value": round(value, 4) if isinstance(value, float) else value, "unit": unit,
           "reference": reference, "reference_value": reference_value,
           "ratio": round(ratio, 4) if ratio is not None else None, "goal": goal, "met": met}
    if runs is not None:
        rec["runs"] = runs
    if spread is not None:
        rec["spread"] = spread
    print("FIGURE " + json.dumps(rec), flush=True)
    return rec


def machine():
    """Cores, kernel and the KVM this runs on (the software KVM of this kind
    of machine, PVM, shows as /sys/module/kvm_pvm)."""
    kvm = "none"
    if os.path.exists("/dev/kvm"):
        mod = lambda m: os.path.isdir("/sys/module/" + m)
        kvm = ("PVM (software KVM)" if mod("kvm_pvm") else "kvm_intel" if mod("kvm_intel") else
               "kvm_amd" if mod("kvm_amd") else "kvm")
    return {"cores": os.cpu_count(), "kernel": platform.release(), "kvm": kvm,
            "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                         if l.startswith("model name")), "?")}


if __name__ == "__main__":
    if sys.argv[1:] == ["machine"]:
        print("MACHINE " + json.dumps(machine()), flush=True)
        sys.exit(0)
    print(__doc__, file=sys.stderr)
    sys.exit(2)
