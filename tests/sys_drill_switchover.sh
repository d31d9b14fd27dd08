#!/usr/bin/env bash
# understudy drill switchover: a planned switchover and back as a drill.
#   1. bad usage exits 2; a VM that is not protected: FAIL, exit 1, it runs on;
#   2. a protected counter pair with a client before and after: --back PASS
#      (exit 0), each leg's downtime and bytes reported, the JSON summary
#      last, the report kept and listed by drill history; the counter goes on
#      from where it was (nothing lost, no reply twice).
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
test_tmp
# The pair's silence bounds: the default 500 ms (given here) on a host's KVM, 3 s in the nested VM
# (tests/lib.sh nested), where QEMU's emulator stalls an agent for a second
# or more and a short bound gives up a live peer; waits X times longer there.
T=$(nested 500 3000)
X=$(nested 1 4)
count() { python3 tests/counter_client.py "$@" | tail -1 | cut -d' ' -f1; }

"$BIN" drill switchover --listen 127.0.0.1:1 >/dev/null 2>&1; [ $? = 2 ] || fail "no --control: want 2"
"$BIN" drill switchover --control "$tmp/x" >/dev/null 2>&1; [ $? = 2 ] || fail "no --listen: want 2"
rcon=$(free_port)
"$BIN" run --guest counter --console tcp:127.0.0.1:$rcon --control "$tmp/run.ctl" 2>"$tmp/run.log" &
rpid=$!
wait_port $rcon $((10 * X)) || fail "run did not start"
out=$("$BIN" drill switchover --control "$tmp/run.ctl" --listen 127.0.0.1:$(free_port) 2>&1)
rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "FAIL" || fail "an unprotected VM: exit $rc: $out"
[ "$(count $rcon incr)" = 1 ] || fail "the unprotected VM did not run on"
kill $rpid; wait $rpid 2>/dev/null
ok "1. bad usage exits 2; an unprotected VM: FAIL ($(echo "$out" | tail -1 | cut -c1-60)), it runs on"

a_port=$(free_port); a_con=$(free_port); b_port=$(free_port); b_con=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$b_port --console tcp:127.0.0.1:$b_con --insecure \
	--failover-timeout-ms $T --control "$tmp/b.ctl" 2>"$tmp/b.log" &
wait_port $b_port $((10 * X)) || fail "secondary did not listen"
"$BIN" primary --guest counter --peer 127.0.0.1:$b_port --console tcp:127.0.0.1:$a_con --insecure \
	--timeout-ms $T --control "$tmp/a.ctl" 2>"$tmp/a.log" &
wait_log "$tmp/a.log" "protected: secondary holds" $((20 * X)) || fail "the pair did not protect"
[ "$(count $a_con incr incr incr)" = 3 ] || fail "counter before the drill"
out=$("$BIN" drill switchover --control "$tmp/a.ctl" --listen 127.0.0.1:$a_port --back --json \
	--report-dir "$tmp/rep")
rc=$?
[ $rc = 0 ] || fail "drill switchover --back: exit $rc: $out"
echo "$out" | tail -1 | python3 -c '
import json, sys
s = json.loads(sys.stdin.read())
assert s["kind"] == "switchover" and s["verdict"] == "PASS", s
for leg in ("away", "back"):
    assert s[leg]["downtime_ms"] > 0 and s[leg]["epoch"] > 0, s
    assert 0 < s[leg]["bytes_to_protect_again"] < 32 << 20, s   # RAM is 64 MiB: no resync
print("   away %.3f ms / %d KiB, back %.3f ms / %d KiB" % (s["away"]["downtime_ms"],
      s["away"]["bytes_to_protect_again"] // 1024, s["back"]["downtime_ms"],
      s["back"]["bytes_to_protect_again"] // 1024))' || fail "summary: $(echo "$out" | tail -1)"
[ "$(echo "$out" | wc -l)" -ge 4 ] || fail "no event lines before the summary: $out"
# The guest is home again, protected, and goes on from 3.
st=$("$BIN" status --control "$tmp/a.ctl")
echo "$st" | grep -q "^role primary$" && echo "$st" | grep -q "^state protected$" ||
	fail "not home and protected: $st"
[ "$(count $a_con incr get)" = 4 ] || fail "counter after the drill"
"$BIN" drill history "$tmp/rep" | grep -q "switchover.*PASS" || fail "history: $("$BIN" drill history "$tmp/rep")"
ok "2. drill switchover --back: PASS, both legs reported, the counter went on from 3 to 4, history lists it"
