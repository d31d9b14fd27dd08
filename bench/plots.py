#!/usr/bin/env python3
"""make plots: the benchmark figures as PNGs, drawn by gnuplot.

    python3 bench/plots.py [--results FILE] [--from-log LOG] [--out DIR]

Reads FILE (default build/bench/results.json), writes one gnuplot data file
and one PNG per figure under DIR (default build/plots), and prints what it
drew and what it could not (a figure whose data is missing is named and left
out; no figure at all is an error, exit 1). --from-log LOG first turns the
text `make bench` prints (`make bench | tee LOG`) into FILE.

results.json (every part optional; times in the unit their name says):
  "figures": [{"name", "value", "unit", "reference", "reference_value",
               "ratio", "goal", "met"}, ...]   (the FIGURE lines, bench/figures.py)
  "machine": {"cores", "kernel", "kvm", "cpu"}   (the MACHINE line)
  {"checkpoint_pause": [{"dirty_pages": 1000, "pause_us": 800, "memcpy_us": 550}, ...],
   "slowdown": [{"rate_mib_s": 10, "slowdown_pct": 3.2}, ...],
   "output_latency": [{"epoch_ms": 25,
                       "protected_ms": [samples...] or "protected_pct": {"50": 25.0, "99": 28.9},
                       "unprotected_ms": [...]     or "unprotected_pct": {...}}, ...],
   "migration": [{"case": "idle, RAM untouched", "downtime_ms": 0.64, "total_ms": 27.4,
                  "qemu_downtime_ms": 4, "qemu_total_ms": 28}, ...]}

Each plot's title says where its figures come from: the machine of the
`make bench` run that made them (its MACHINE line, "machine" above, which
`make bench` prints before any figure), else "sample data" (a results file
without it, such as tests/data/bench_results_sample.json, is no
measurement).

Figures: pause vs dirty pages beside memcpy of the same bytes
(pause_vs_dirty.png), guest slowdown vs dirty rate (slowdown.png), the
output-commit latency CDF protected vs unprotected (output_latency_cdf.png:
from the samples, else from the percentiles given), migration downtime beside
QEMU's (migration_downtime.png).
"""
import argparse, json, os, re, subprocess, sys

TERM = "set terminal pngcairo size 900,560 enhanced font 'sans,11'\n"
NUM = r"(-?[0-9]+(?:\.[0-9]+)?)"


def from_log(text):
    """The figures of `make bench` output, as results.json."""
    res = {"checkpoint_pause": [], "slowdown": [], "output_latency": [], "migration": [], "figures": []}
    lat = {}
    for line in text.splitlines():
        # bench/figures.py: one JSON object a figure, and the machine
        if line.startswith("FIGURE {"):
            res["figures"].append(json.loads(line[7:]))
            continue
        if line.startswith("MACHINE {"):
            res["machine"] = json.loads(line[8:])
            continue
        m = re.match(r"\s*([0-9]+) pages \(\s*[0-9]+ MiB\): pause\s+" + NUM + r" us.*?memcpy\s+" + NUM + " us",
                     line)
        if m:
            res["checkpoint_pause"].append({"dirty_pages": int(m.group(1)), "pause_us": float(m.group(2)),
                                            "memcpy_us": float(m.group(3))})
            continue
        m = re.match(r"slowdown rate_mb=([0-9]+):.*\(slowdown " + NUM + r"%\)", line)
        if m:
            res["slowdown"].append({"rate_mib_s": int(m.group(1)), "slowdown_pct": float(m.group(2))})
            continue
        m = re.match(r"commit latency epoch_ms=([0-9]+) p([0-9]+): protected " + NUM + " ms vs unprotected "
                     + NUM + " ms", line)
        if m:
            e = lat.setdefault(int(m.group(1)), {"epoch_ms": int(m.group(1)), "protected_pct": {},
                                                 "unprotected_pct": {}})
            e["protected_pct"][m.group(2)] = float(m.group(3))
            e["unprotected_pct"][m.group(2)] = float(m.group(4))
            continue
        m = re.match(r"migrate idle [0-9]+ MiB \((.*?)\), loopback.*?: understudy total p50 " + NUM +
                     r" ms.*?downtime p50 " + NUM + " ms", line)
        if m:
            row = {"case": "idle, " + m.group(1), "total_ms": float(m.group(2)),
                   "downtime_ms": float(m.group(3))}
            q = re.search(r"vs QEMU total p50 " + NUM + r" ms.*?downtime p50 " + NUM + " ms", line)
            if q:
                row.update(qemu_total_ms=float(q.group(1)), qemu_downtime_ms=float(q.group(2)))
            res["migration"].append(row)
            continue
        m = re.match(r"migrate dirty ([0-9]+) MiB/s.*?: total p50 " + NUM + r" ms.*?downtime p50 " + NUM + " ms",
                     line)
        if m:
            res["migration"].append({"case": "dirty %s MiB/s" % m.group(1), "total_ms": float(m.group(2)),
                                     "downtime_ms": float(m.group(3))})
    res["output_latency"] = [lat[k] for k in sorted(lat)]
    return {k: v for k, v in res.items() if v}


def write(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(r + "\n")


def origin(res):
    """Where the figures come from, for the titles: the machine of the
    `make bench` run, or that they are sample data."""
    m = res.get("machine")
    if not isinstance(m, dict):
        return "sample data (no make bench run): not a measurement"
    return "make bench on %s, %s cores, KVM %s, kernel %s" % (
        m.get("cpu", "?"), m.get("cores", "?"), m.get("kvm", "?"), m.get("kernel", "?"))


def gnuplot(out, name, title, origin_text, script):
    gp = os.path.join(out, name + ".gp")
    png = os.path.join(out, name + ".png")
    # title and origin on two lines, as text (no enhanced-mode markup)
    clean = lambda t: t.replace("\\", "/").replace('"', "'")
    with open(gp, "w") as f:
        f.write(TERM + "set output '%s'\n" % png +
                'set title "%s\\n%s" noenhanced\n' % (clean(title), clean(origin_text)) + script)
    r = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
    if r.returncode or not os.path.getsize(png):
        raise RuntimeError("gnuplot %s: %s" % (gp, r.stderr.strip()))
    return png


def plot_pause(res, out):
    rows = sorted(res["checkpoint_pause"], key=lambda r: r["dirty_pages"])
    write(os.path.join(out, "pause.dat"), ["%d %g %g" % (r["dirty_pages"], r["pause_us"] / 1e3,
                                                         r["memcpy_us"] / 1e3) for r in rows])
    return gnuplot(out, "pause_vs_dirty",
                   "Checkpoint pause vs dirty pages (median), beside memcpy of the same bytes",
                   origin(res), """
set xlabel 'dirty pages in the epoch'; set ylabel 'ms'
set logscale xy; set grid; set key top left
plot '{d}/pause.dat' using 1:2 with linespoints lw 2 pt 7 title 'checkpoint pause', \\
     '' using 1:3 with linespoints lw 2 pt 5 dt 2 title 'memcpy (reference, same run)'
""".format(d=out))


def plot_slowdown(res, out):
    rows = sorted(res["slowdown"], key=lambda r: r["rate_mib_s"])
    write(os.path.join(out, "slowdown.dat"), ["%g %g" % (r["rate_mib_s"], r["slowdown_pct"]) for r in rows])
    return gnuplot(out, "slowdown",
                   "Guest slowdown under protection vs its dirty rate (25 ms epochs)",
                   origin(res), """
set xlabel 'guest dirty rate (MiB/s)'; set ylabel 'less compute than unprotected (%)'
set logscale x; set grid; set key top left; set yrange [0:*]
plot '{d}/slowdown.dat' using 1:2 with linespoints lw 2 pt 7 title 'protected', \\
     5 with lines dt 2 lc rgb 'gray40' title 'goal 5%'
""".format(d=out))


def cdf_rows(entry, kind):
    """(latency ms, fraction) points of one curve: from samples, else from percentiles."""
    samples = entry.get(kind + "_ms")
    if samples:
        s = sorted(samples)
        return ["%g %g" % (v, (i + 1) / len(s)) for i, v in enumerate(s)]
    pct = entry.get(kind + "_pct") or {}
    return ["%g %g" % (v, float(p) / 100) for p, v in sorted(pct.items(), key=lambda kv: float(kv[0]))]


def plot_latency(res, out):
    curves = []
    for e in res["output_latency"]:
        for kind in ("protected", "unprotected"):
            rows = cdf_rows(e, kind)
            if not rows:
                continue
            dat = os.path.join(out, "latency_%s_%s.dat" % (e["epoch_ms"], kind))
            write(dat, rows)
            title = "%s, %d ms epochs" % (kind, e["epoch_ms"]) if kind == "protected" else \
                "unprotected (reference, run of the %d ms figure)" % e["epoch_ms"]
            curves.append("'%s' using 1:2 with linespoints lw 2 %s title '%s'" % (
                dat, "dt 2" if kind == "unprotected" else "", title))
    if not curves:
        raise KeyError("output_latency")
    return gnuplot(out, "output_latency_cdf",
                   "Output-commit latency (incr on the counter guest, request -> reply): CDF",
                   origin(res), """
set xlabel 'latency (ms)'; set ylabel 'fraction of requests'
set logscale x; set grid; set key bottom right; set yrange [0:1.02]
plot """ + ", \\\n     ".join(curves) + "\n")


def plot_migration(res, out):
    rows = res["migration"]
    write(os.path.join(out, "migration.dat"), ['"%s" %g %s' % (
        r["case"], r["downtime_ms"], "%g" % r["qemu_downtime_ms"] if "qemu_downtime_ms" in r else "NaN")
        for r in rows])
    return gnuplot(out, "migration_downtime",
                   "Live migration downtime (p50), beside QEMU on the same RAM size where measured",
                   origin(res), """
set ylabel 'downtime (ms)'; set logscale y; set grid ytics
set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8 border -1
set boxwidth 0.9; set xtics rotate by -20 scale 0; set key top left; set yrange [0.1:*]
plot '{d}/migration.dat' using 2:xtic(1) title 'understudy', '' using 3 title 'QEMU (reference, same run)'
""".format(d=out))


FIGURES = [("checkpoint_pause", plot_pause), ("slowdown", plot_slowdown),
           ("output_latency", plot_latency), ("migration", plot_migration)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default="build/bench/results.json")
    ap.add_argument("--from-log", help="make bench output to turn into --results first")
    ap.add_argument("--out", default="build/plots")
    ap.add_argument("--no-draw", action="store_true", help="only write --results (make bench)")
    a = ap.parse_args()
    if a.from_log:
        with open(a.from_log) as f:
            res = from_log(f.read())
        os.makedirs(os.path.dirname(a.results) or ".", exist_ok=True)
        with open(a.results, "w") as f:
            json.dump(res, f, indent=1)
        print("plots: %s -> %s (%s; %d figures, %d with a goal, %d met)" % (
            a.from_log, a.results, ", ".join(k for k in sorted(res) if res[k]) or "nothing",
            len(res.get("figures", [])), sum(f.get("met") is not None for f in res.get("figures", [])),
            sum(f.get("met") is True for f in res.get("figures", []))))
    if a.no_draw:
        return 0
    if not os.path.exists(a.results):
        print("plots: %s not found: run `make bench | tee build/bench/bench.log` first, then "
              "`make plots` (or give RESULTS=FILE)" % a.results, file=sys.stderr)
        return 1
    with open(a.results) as f:
        res = json.load(f)
    os.makedirs(a.out, exist_ok=True)
    made = 0
    for key, fn in FIGURES:
        if not res.get(key):
            print("plots: no %s in %s: figure left out" % (key, a.results))
            continue
        try:
            print("plots: %s" % fn(res, a.out))
            made += 1
        except (KeyError, ValueError, TypeError) as e:
            print("plots: %s in %s is malformed (%r): figure left out" % (key, a.results, e))
        except RuntimeError as e:
            print("plots: %s" % e, file=sys.stderr)
            return 1
    if not made:
        print("plots: nothing to draw in %s" % a.results, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
