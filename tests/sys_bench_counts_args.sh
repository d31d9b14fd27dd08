#!/usr/bin/env bash
# The host-independent counts of the benchmarks (bench/counts.py, make
# bench-counts), what can be checked without KVM:
#   1. bad values exit 2 naming the option, before the check for /dev/kvm;
#   2. the arithmetic of the counts: strace -c's summary table read into
#      calls per system call, the epochs and ACKs of an event log that
#      fall within each request's span, and bench_kv's counts of a run
#      (per PUT and GET reply, per epoch) from two status readings;
#   3. without /dev/kvm: bench_syscalls.py says SKIP and exits 77, the
#      --counts runs say SKIP and print no figure, make bench-counts ends
#      with 0 and a counts.json without figures; a bad COUNTS_ROUNDS fails
#      it naming --rounds.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
BUILD=${BUILD:-build}
py() { timeout 30 python3 "bench/$1" "${@:2}" 2>&1 </dev/null; }

# expect2 PATTERN SCRIPT ARGS...: exit 2, the message matches PATTERN
expect2() {
	local pat=$1 out rc
	shift
	out=$(py "$@"); rc=$?
	[ $rc = 2 ] || fail "$*: exit $rc, expected 2: $(echo "$out" | tail -2)"
	echo "$out" | grep -q -- "$pat" || fail "$*: no '$pat' in: $out"
	echo "   $* -> $(echo "$out" | tail -1)"
}
expect2 "error: argument --rounds: must be at least 1" bench_latency.py --counts --rounds 0
expect2 "error: argument --requests: must be at least 1" bench_latency.py --requests 0
expect2 "argument --rounds: invalid int value" bench_latency.py --rounds x
expect2 "error: argument --rounds: must be at least 1" bench_hot.py --counts --rounds 0
expect2 "error: --seconds: must be above 0" bench_syscalls.py --seconds 0
expect2 "error: --top: must be 0 or more" bench_syscalls.py --top -1
expect2 "unrecognized arguments: --count" bench_syscalls.py --count
expect2 "error: --sectors: must be at least 8" bench_exits.py --sectors 4
expect2 "error: argument --rounds: must be at least 1" bench_exits.py --rounds 0
expect2 "error: argument --rounds: must be at least 1" bench_kv.py --counts --rounds 0
expect2 "error: argument --requests: must be at least 1" bench_kv.py --counts --requests 0
expect2 "error: argument --window: must be at least 1" bench_kv.py --window 0
expect2 "argument --requests: invalid int value: '1.5'" bench_kv.py --requests 1.5
expect2 "error: --seconds: must be above 0" bench_kv.py --seconds 0
ok "bad arguments exit 2 naming the option"

out=$(cd bench && python3 - <<'PY' 2>&1
import counts
# strace -c's table: the errors column is empty on some rows; -f sums threads
table = """% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 61.03    0.004000          12       333           ioctl
 20.00    0.001000           4       250        17 futex
  1.00    0.000100           1         7           write
------ ----------- ----------- --------- --------- ----------------
100.00    0.005100                   590        17 total
"""
c = counts.parse_strace_c(table)
assert c == {"ioctl": 333, "futex": 250, "write": 7}, c
# captures at 10, 20, 30 ms, ACKs at 15, 25, 35 ms: an event counts for a
# request sent before it and answered at or after it
ev = [(10, "capture", 1), (15, "ack", 1), (20, "capture", 2), (25, "ack", 2),
      (30, "capture", 3), (35, "ack", 3)]
w = counts.waits(ev, [(5, 21), (21, 40), (36, 50), (10, 20)])
assert w == [(2, 1), (1, 2), (0, 0), (1, 1)], w
assert counts.per(10, 0) == 0.0 and counts.per(10, 4) == 2.5
# bench_kv: a PUT waits for two captures and one ACK, a GET for one of each;
# 4 epochs in the window (3 by the timer, 1 by output), 2 replies
import bench_kv
before = {"epoch": 10, "acked": 9, "epochs_timer": 6, "epochs_output": 3, "bytes_sent": 1000,
          "dirty_pages_avg": 5.0, "disk_blocks": 2}
after = {"epoch": 14, "acked": 13, "epochs_timer": 9, "epochs_output": 4, "bytes_sent": 5000,
         "dirty_pages_avg": 6.0, "disk_blocks": 10}
k = bench_kv.reply_counts({"put_span": [[5, 21]], "get_span": [[21, 31]], "lost": 0}, before, after, ev)
want = {"put_epochs_waited": 2, "put_round_trips": 1, "get_epochs_waited": 1, "get_round_trips": 1,
        "epochs_per_reply": 2.0, "timer_epochs_per_reply": 1.5, "output_epochs_per_reply": 0.5,
        "bytes_per_epoch": 1000.0, "pages_per_epoch": (6.0 * 14 - 5.0 * 10) / 4,
        "blocks_per_epoch": 2.0, "epochs": 4, "lost": 0}
assert k == want, (k, want)
print("counts arithmetic ok")
PY
)
[ "$out" = "counts arithmetic ok" ] || fail "counts arithmetic: $out"
ok "strace -c summary and event-log spans counted as expected"

if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
	echo "   (/dev/kvm usable here: the skip path is not taken; make bench-counts runs the benchmarks)"
	exit 0
fi
out=$(py bench_syscalls.py --rounds 1); rc=$?
[ $rc = 77 ] && echo "$out" | grep -q "SKIP: /dev/kvm" ||
	fail "bench_syscalls.py without /dev/kvm: exit $rc, expected 77 and a SKIP reason: $out"
for b in bench_latency.py bench_hot.py bench_kv.py; do
	out=$(py $b --counts --rounds 1); rc=$?
	[ $rc = 0 ] && echo "$out" | grep -q "SKIP: /dev/kvm" ||
		fail "$b --counts without /dev/kvm: exit $rc, expected 0 and a SKIP reason: $out"
	echo "$out" | grep -q FIGURE && fail "$b --counts without /dev/kvm printed figures: $out"
done
ok "without /dev/kvm: each says SKIP and prints no figure"

rm -f "$BUILD/bench/counts.json"
out=$(make -s --no-print-directory bench-counts BUILD="$BUILD" COUNTS_ROUNDS=1 2>&1); rc=$?
[ $rc = 0 ] || fail "make bench-counts without /dev/kvm: exit $rc: $out"
python3 - "$BUILD/bench/counts.json" <<'PY' || fail "counts.json: $(cat "$BUILD/bench/counts.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert "machine" in r and not r.get("figures"), r
PY
out=$(make -s --no-print-directory bench-counts BUILD="$BUILD" COUNTS_ROUNDS=0 2>&1); rc=$?
[ $rc != 0 ] && echo "$out" | grep -q -- "--rounds: must be at least 1" ||
	fail "make bench-counts COUNTS_ROUNDS=0: exit $rc, expected a failure naming --rounds: $out"
ok "make bench-counts: skips without KVM (exit 0, no figures), fails on COUNTS_ROUNDS=0"
