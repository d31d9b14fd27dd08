#!/usr/bin/env bash
# understudy drill local: a self-contained pair in the drill's own network
# namespace, a fault at seeded moments, every reply checked against an
# uninterrupted run of the counter guest.
#   1. bad usage exits 2 (no --kind, an unknown kind, partition without
#      --witness, a guest without an oracle), and so does a user not root;
#   2. kill x5 with --json and --report-dir: PASS, the summary (last line)
#      says 5 trials, RPO 0, PASS, an RTO per trial; drill history lists it;
#   3. stop, loss, slowlink x5 each: PASS;
#   4. partition --witness x5 (etcd): PASS, no takeover in any trial; stop
#      --witness x3: PASS, the old primary fenced;
#   5. the drill can fail: the release_early mutant (output released before
#      its epoch is acknowledged, make MUTANT=release_early) killed just
#      after a reply: FAIL, exit 1, the verdict names the lost output. The
#      kill lands before the ACK of the reply's epoch in about 2 trials of 3
#      (measured: 10 caught of 15), so 10 trials: all missing is ~1e-5.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_host_kvm "a kill landing between a reply and its acknowledgement, the timing the release_early mutant's verdict depends on"
[ "$(id -u)" = 0 ] || { echo "SKIP: drill local needs root (a network namespace)"; exit 77; }
for t in ip nft tc; do command -v $t >/dev/null || { echo "SKIP: $t missing (make deps)"; exit 77; }; done
test_tmp
seed=${UNDERSTUDY_SEED:-$(date +%s)}
echo "seed $seed (UNDERSTUDY_SEED=$seed replays the moments)"

for args in "" "--kind crash" "--kind partition" "--kind kill --guest stress" "--kind kill --trials 0"; do
	"$BIN" drill local $args >"$tmp/usage.out" 2>&1
	rc=$?
	[ $rc = 2 ] || fail "drill local $args: exit $rc, want 2: $(cat "$tmp/usage.out")"
done
grep -q "needs --witness" <(("$BIN" drill local --kind partition 2>&1)) ||
	fail "partition without --witness: no reason given"
if command -v setpriv >/dev/null; then
	out=$(setpriv --reuid 65534 --regid 65534 --clear-groups "$BIN" drill local --kind kill 2>&1)
	rc=$?
	[ $rc = 2 ] && echo "$out" | grep -q "must run as root" || fail "not root: exit $rc: $out"
else
	echo "SKIP: setpriv missing (the not-root case only)"
fi
ok "1. bad usage exits 2, not root too (partition without --witness: $("$BIN" drill local --kind partition 2>&1 | cut -c1-70)...)"

# 2. kill, JSON and a kept report
out=$("$BIN" drill local --kind kill --trials 5 --seed $seed --json --report-dir "$tmp/rep" 2>"$tmp/kill.err")
rc=$?
[ $rc = 0 ] || fail "drill local --kind kill: exit $rc: $(echo "$out" | tail -3) $(tail -3 "$tmp/kill.err")"
echo "$out" | python3 -c '
import json, sys
lines = [json.loads(l) for l in sys.stdin.read().splitlines()]
s, trials = lines[-1], lines[:-1]
assert s["kind"] == "local-kill" and s["verdict"] == "PASS", s
assert s["trials"] == 5 and s["passed"] == 5 and s["rpo"] == 0, s
assert len(trials) == 5 and all(t["verdict"] == "PASS" and t["took_over"] for t in trials), trials
assert len(s["rto_ms_per_trial"]) == 5 and all(0 < r < 10000 for r in s["rto_ms_per_trial"]), s
assert sum(t["replies"] for t in trials) >= 50, trials
print("   kill: RTO mean %.1f ms, max %.1f ms; RPO %d; %d replays; %d replies checked" % (
      s["rto_ms"], s["rto_ms_max"], s["rpo"], s["replays"], sum(t["replies"] for t in trials)))' ||
	fail "kill summary: $(echo "$out" | tail -1)"
hist=$("$BIN" drill history "$tmp/rep")
echo "$hist" | grep -q "local-kill *PASS" || fail "drill history does not list the drill: $hist"
ok "2. kill x5 PASS, JSON summary checked, kept and listed by drill history"

# 3. stop, loss, slowlink
for kind in stop loss slowlink; do
	out=$("$BIN" drill local --kind $kind --trials 5 --seed $seed 2>&1)
	rc=$?
	echo "$out" | grep "^trial" | sed 's/^/   /'
	[ $rc = 0 ] && echo "$out" | grep -q "^drill local $kind: PASS" ||
		fail "drill local --kind $kind: exit $rc: $(echo "$out" | tail -4)"
	ok "3. $kind x5 PASS ($(echo "$out" | grep -m1 '  RTO' | sed 's/^ *//'))"
done

# 4. partition with the witness
if [ -x /usr/bin/etcd ] || command -v etcd >/dev/null; then
	out=$("$BIN" drill local --kind partition --witness --trials 5 --seed $seed 2>&1)
	rc=$?
	echo "$out" | grep "^trial" | sed 's/^/   /'
	[ $rc = 0 ] && echo "$out" | grep -q "^drill local partition: PASS" ||
		fail "drill local --kind partition --witness: exit $rc: $(echo "$out" | tail -4)"
	[ "$(echo "$out" | grep -c '^trial.*PASS.*no takeover')" = 5 ] || fail "a takeover under a partition"
	ok "4. partition --witness x5 PASS, the primary kept the key and served, no takeover"
	out=$("$BIN" drill local --kind stop --witness --trials 3 --seed $seed 2>&1)
	rc=$?
	echo "$out" | grep "^trial" | sed 's/^/   /'
	[ $rc = 0 ] && [ "$(echo "$out" | grep -c '^trial.*PASS.*took over.*old primary fenced')" = 3 ] ||
		fail "drill local --kind stop --witness: exit $rc: $(echo "$out" | tail -4)"
	ok "4. stop --witness x3 PASS, the takeover through etcd, the old primary fenced"
else
	echo "SKIP: etcd not installed (cell 4 only)"
fi

# 5. the drill can fail
mut=build/mutant-release_early
make -s -j2 BUILD=$mut MUTANT=release_early $mut/understudy >"$tmp/mutant.log" 2>&1 ||
	fail "cannot build the release_early mutant: $(tail -5 "$tmp/mutant.log")"
out=$("$mut/understudy" drill local --kind kill --trials 10 --seed $seed 2>&1)
rc=$?
echo "$out" | grep "^trial" | sed 's/^/   /'
logs=$(echo "$out" | sed -n 's/^  logs     //p')
case $logs in /tmp/understudy-drill-local-*) rm -rf "$logs" ;; esac   # a failed drill keeps them
[ $rc = 1 ] || fail "the release_early mutant: drill exit $rc, want 1 (FAIL): $(echo "$out" | tail -3)"
echo "$out" | grep -q "verdict  FAIL: .*failed, [1-9][0-9]* acknowledged replies lost" || fail "the FAIL verdict does not name lost output: $(echo "$out" | tail -2)"
ok "5. the release_early mutant: FAIL ($(echo "$out" | grep -o 'verdict  FAIL: .*' | cut -c1-120))"
