#!/usr/bin/env bash
# make plots on sample figures (tests/data): results.json in, four PNGs out;
# the text of `make bench` (a sample log in the format the benchmarks print)
# turned into results.json and drawn; a missing part named and left out; no
# results at all is an error that says how to make them. Every plot's title
# says "sample data" unless the figures come from a `make bench` run (its
# MACHINE line, in results.json as "machine"), and then names that machine.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot not installed (make deps)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
figs="pause_vs_dirty slowdown output_latency_cdf migration_downtime"

# pngs DIR: every figure there is a non-empty PNG of a sane size
pngs() {
	local f size
	for f in $figs; do
		[ -s "$1/$f.png" ] || fail "$1/$f.png missing or empty"
		head -c 8 "$1/$f.png" | od -An -tx1 | tr -d ' \n' | grep -q '^89504e470d0a1a0a$' ||
			fail "$1/$f.png is not a PNG"
		size=$(stat -c %s "$1/$f.png")
		[ "$size" -gt 5000 ] || fail "$1/$f.png only $size bytes: an empty plot?"
	done
}

# titles DIR PATTERN: the title gnuplot drew on each figure of DIR (from the
# script it was given, kept beside the PNG) matches PATTERN
titles() {
	local f t
	for f in $figs; do
		t=$(grep '^set title ' "$1/$f.gp") || fail "$1/$f.gp: no title"
		echo "$t" | grep -qE "$2" || fail "$f's title does not match '$2': $t"
	done
}

make --no-print-directory plots RESULTS=tests/data/bench_results_sample.json PLOTS="$tmp/json" \
	>"$tmp/json.out" 2>&1 || fail "make plots on the sample results: $(cat "$tmp/json.out")"
pngs "$tmp/json"
titles "$tmp/json" '\\nsample data '
ok "make plots RESULTS=tests/data/bench_results_sample.json: 4 PNGs ($(du -sh "$tmp/json" | cut -f1)), titled sample data"

# The same figures with the MACHINE line of a run: titled with that machine.
python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
r["machine"] = {"cores": 8, "kernel": "6.1.0-99-amd64", "kvm": "kvm_intel", "cpu": "Test CPU \"X\" @ 2.0GHz"}
json.dump(r, open(sys.argv[2], "w"))' tests/data/bench_results_sample.json "$tmp/run.json"
python3 bench/plots.py --results "$tmp/run.json" --out "$tmp/run" >"$tmp/run.out" 2>&1 ||
	fail "plots of a run's results: $(cat "$tmp/run.out")"
pngs "$tmp/run"
titles "$tmp/run" "\\\\nmake bench on Test CPU 'X' @ 2.0GHz, 8 cores, KVM kvm_intel, kernel 6.1.0-99-amd64\" noenhanced$"
grep -l "sample data" "$tmp"/run/*.gp && fail "a run's figures titled sample data"
ok "a make bench run's results: titles name its machine, not sample data"

python3 bench/plots.py --from-log tests/data/bench_sample.log --results "$tmp/log/results.json" \
	--out "$tmp/log" >"$tmp/log.out" 2>&1 || fail "plots from the sample bench log: $(cat "$tmp/log.out")"
pngs "$tmp/log"
titles "$tmp/log" '\\nsample data '
python3 - "$tmp/log/results.json" <<'PY' || fail "figures read from the bench log are wrong: $(cat "$tmp/log/results.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert [p["dirty_pages"] for p in r["checkpoint_pause"]] == [1000, 10000, 100000]
assert r["checkpoint_pause"][2]["pause_us"] == 29000.0 and r["checkpoint_pause"][2]["memcpy_us"] == 25500.0
assert [(s["rate_mib_s"], s["slowdown_pct"]) for s in r["slowdown"]] == [(10, 3.2), (50, 3.8), (200, 17.0)]
lat = {e["epoch_ms"]: e for e in r["output_latency"]}
assert lat[25]["protected_pct"] == {"50": 25.0, "99": 28.9} and lat[5]["unprotected_pct"]["99"] == 2.3
m = {x["case"]: x for x in r["migration"]}
assert m["idle, RAM untouched"]["qemu_downtime_ms"] == 4 and m["idle, RAM untouched"]["downtime_ms"] == 0.64
assert m["dirty 200 MiB/s"]["downtime_ms"] == 6.8 and "qemu_downtime_ms" not in m["dirty 200 MiB/s"]
PY
ok "bench log -> results.json -> 4 PNGs, figures read right"

python3 -c '
import json, sys
r = json.load(open(sys.argv[1])); del r["migration"]; json.dump(r, open(sys.argv[2], "w"))' \
	tests/data/bench_results_sample.json "$tmp/part.json"
python3 bench/plots.py --results "$tmp/part.json" --out "$tmp/part" >"$tmp/part.out" 2>&1 ||
	fail "a results file without migration figures failed: $(cat "$tmp/part.out")"
grep -q "no migration in" "$tmp/part.out" || fail "the missing part was not named: $(cat "$tmp/part.out")"
[ -e "$tmp/part/migration_downtime.png" ] && fail "a migration figure drawn without data"
[ -s "$tmp/part/slowdown.png" ] || fail "the other figures were not drawn"
ok "a missing part is named and left out"

python3 bench/plots.py --results "$tmp/none.json" --out "$tmp/none" >"$tmp/none.out" 2>&1 && fail "no results: exit 0"
grep -q "make bench" "$tmp/none.out" || fail "no results: does not say how to make them: $(cat "$tmp/none.out")"
ok "no results: exit 1, says to run make bench"

# results.json as make bench writes it: the MACHINE line and the FIGURE lines
# the benchmarks print (bench/figures.py; bench_net prints its own in C).
{
	python3 bench/figures.py machine
	python3 -c '
import sys; sys.path.insert(0, "bench")
from figures import figure
figure("switchover downtime p50", 0.85, "ms", "epoch pause p50, same pair", 0.4, goal="downtime - pause <= 2 ms", met=True)
figure("guest slowdown, round-robin writer at 50 MiB/s", 7.8, "%", "unprotected", None, ratio=0.922, goal="<= 5 %", met=False)'
	cat tests/data/bench_sample.log
} >"$tmp/fig.log"
python3 bench/plots.py --from-log "$tmp/fig.log" --results "$tmp/fig/results.json" --no-draw >"$tmp/fig.out" 2>&1 ||
	fail "FIGURE lines -> results.json: $(cat "$tmp/fig.out")"
[ -e "$tmp/fig/slowdown.png" ] && fail "--no-draw drew"
python3 - "$tmp/fig/results.json" <<'PY' || fail "figures in results.json are wrong: $(cat "$tmp/fig/results.json")"
import json, sys
r = json.load(open(sys.argv[1]))
f = {x["name"]: x for x in r["figures"]}
assert len(f) == 2, f
s = f["switchover downtime p50"]
assert s["value"] == 0.85 and s["unit"] == "ms" and s["reference_value"] == 0.4 and abs(s["ratio"] - 2.125) < 1e-9
assert s["goal"] and s["met"] is True and f["guest slowdown, round-robin writer at 50 MiB/s"]["met"] is False
assert set(["name", "value", "unit", "reference", "ratio", "goal", "met"]) <= set(s)
m = r["machine"]
assert m["cores"] >= 1 and m["kernel"] and m["kvm"], m
assert r["slowdown"], "the text figures are still read beside"
print("   machine:", m)
PY
grep -q "2 figures, 2 with a goal, 1 met" "$tmp/fig.out" || fail "no summary of the goals: $(cat "$tmp/fig.out")"
ok "make bench's results.json: FIGURE lines (name, value, unit, reference, ratio, goal, met) and the machine"
exit 0
