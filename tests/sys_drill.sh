#!/usr/bin/env bash
# understudy drill test-failover: a clone of the standby at its last
# complete checkpoint runs isolated on the secondary while production runs
# on protected. Checks:
#  1. bad usage (and the kinds not built yet) exit 2;
#  2. a protected counter pair, a client doing incr through the primary all
#     along: the drill PASSes (exit 0, JSON lines, summary last), its clone
#     answers "get" with the value of the epoch it started from although the
#     standby applied later incr meanwhile (the clone's view is stable), the
#     primary's epochs go on, and the client sees every reply in order with no
#     long stall;
#  3. the same on the stress guest (2 vCPUs): PASS, its "check" answers ok;
#  4. the test hook "drill corrupt" (refused without UNDERSTUDY_TEST_HOOKS=1)
#     flips a byte of the standby: the drill FAILs with "digest mismatch",
#     exit 1;
#  5. --report-dir kept each report; drill history lists them;
#  6. the primary killed -9 during a drill: the drill FAILs (production
#     changed), the clone is gone, and the real takeover still happens with
#     the acknowledged counter value;
#  7. the RPO's acknowledged outputs lost: a number with how it is known
#     (the counter's probe, else the RAM digest at the clone's epoch), or
#     "not known:" and why, never a bare "not known".
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
tmp=$(mktemp -d)
cleanup() { kill -9 $(jobs -p) 2>/dev/null; wait 2>/dev/null; [ -n "${KEEP_TMP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"; }
trap cleanup EXIT
FAIL_LOGS="$tmp/*.log"
# The pairs' silence bounds: 2 s on a host's KVM, 4 s in the nested VM
# (tests/lib.sh nested), where QEMU's emulator stalls an agent for a second
# or more and a shorter bound may give up a live peer mid-drill.
T=$(nested 2000 4000)
reports=$tmp/reports

# ---- 1. bad usage -------------------------------------------------------------------
for args in "" "test-failover" "test-failover --control" "test-failover --control x --seconds 0" \
	"test-failover --control x extra" "history" "bogus" "switchover --control x" \
	"local" "local --kind bogus" "local --kind kill --trials 0"; do
	# shellcheck disable=SC2086
	"$BIN" drill $args >"$tmp/usage.out" 2>&1
	rc=$?
	[ $rc = 2 ] || fail "'drill $args' exited $rc, want 2: $(cat "$tmp/usage.out")"
done
ok "bad usage exits 2"

# start_pair NAME GUEST_ARGS... : a protected pair; sets SEC_CTL PRI_CTL PCON SCON
start_pair() {
	local name=$1 sport
	shift
	sport=$(free_port); SCON=$(free_port); PCON=$(free_port)
	SEC_CTL=$tmp/$name-sec.ctl PRI_CTL=$tmp/$name-pri.ctl
	env ${SEC_ENV:-} "$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$SCON \
		--insecure --failover-timeout-ms $T --control "$SEC_CTL" 2>"$tmp/$name-sec.log" &
	wait_port $sport 20 || fail "secondary did not listen: $(cat "$tmp/$name-sec.log")"
	"$BIN" primary "$@" --console tcp:127.0.0.1:$PCON --peer 127.0.0.1:$sport --insecure \
		--timeout-ms $T --control "$PRI_CTL" 2>"$tmp/$name-pri.log" &
	wait_log "$tmp/$name-pri.log" "protected: secondary holds" 60 ||
		fail "$name never protected: $(tail -3 "$tmp/$name-pri.log")"
}
primary_epoch() { "$BIN" status --control "$PRI_CTL" | sed -n 's/^epoch //p'; }
# ---- 2. counter pair, a client busy all along --------------------------------------
SEC_ENV=UNDERSTUDY_TEST_HOOKS=1 start_pair counter --guest counter
cat >"$tmp/client.py" <<'PY'
# incr every 20 ms on the primary's console until the stop file appears;
# every reply must be the previous + 1; prints "n=<last> replies=<k> max_gap_ms=<g>"
import os, socket, sys, time
port, stop = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port), timeout=30)
f = s.makefile("rwb", buffering=0)
last, k, gap = 0, 0, 0.0
while not os.path.exists(stop):
    t = time.monotonic()
    f.write(b"incr\n")
    line = f.readline().decode()
    gap = max(gap, time.monotonic() - t)
    n = int(line.split()[0])
    if n != last + 1:
        sys.exit("reply %r after %d: out of order" % (line, last))
    last, k = n, k + 1
    if k == 1:
        open(stop + ".first", "w").close()   # a reply released: acknowledged
    time.sleep(0.02)
print("n=%d replies=%d max_gap_ms=%.0f" % (last, k, gap * 1000))
PY
python3 "$tmp/client.py" $PCON "$tmp/stop" >"$tmp/client.out" 2>&1 &
cpid=$!
# The drill's clone must start after a reply was acknowledged, for its probe
# to have one to compare with (in the nested VM the client takes seconds).
for _ in $(seq 1 1200); do [ -e "$tmp/stop.first" ] && break; sleep 0.05; done
[ -e "$tmp/stop.first" ] || fail "the client had no reply in 60 s: $(cat "$tmp/client.out")"
sleep 1
e0=$(primary_epoch)
"$BIN" drill test-failover --control "$SEC_CTL" --seconds 3 --json --report-dir "$reports" \
	>"$tmp/d1.json" 2>"$tmp/d1.err"
rc=$?
e1=$(primary_epoch)
sleep 0.5
touch "$tmp/stop"
wait $cpid || fail "the client of the primary saw something wrong: $(cat "$tmp/client.out")"
cat "$tmp/d1.json"
[ $rc = 0 ] || fail "drill on the counter exited $rc: $(cat "$tmp/d1.err")"
python3 - "$tmp/d1.json" "$tmp/client.out" "$e0" "$e1" <<'PY' || fail "counter drill report"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rep = lines[-1]
client = dict(kv.split("=") for kv in open(sys.argv[2]).read().split())
e0, e1 = int(sys.argv[3]), int(sys.argv[4])
assert len(lines) >= 2 and "event" in lines[0], "no event line before the summary"
assert rep["verdict"] == "PASS", rep["reason"]
assert rep["kind"] == "test-failover" and rep["vm"]["guest"] == "counter"
assert rep["digest"]["match"] and rep["digest"]["clone"] == rep["digest"]["primary"]
assert rep["epochs"]["applied_during"] > 10, rep["epochs"]
assert rep["rto_ms"] > 0 and rep["rto_ms"] < 2000, rep["rto_ms"]
assert rep["rpo"]["acked_outputs_lost"] == 0
# the number comes with how it is known: here the probe's reply against the acknowledged one
assert rep["rpo"]["acked_outputs_lost_why"].startswith("the probe: get answered "), rep["rpo"]
assert rep["rpo"]["clone_epoch"] == rep["epochs"]["start"], rep["rpo"]
assert rep["output"]["released_bytes"] == 0
assert rep["probe"]["ok"] and rep["probe"]["result"].startswith("get -> "), rep["probe"]
# the clone answered the value of its start epoch, the client went further
got = int(rep["probe"]["result"].split("'")[1].split()[0])
assert int(client["n"]) > got + 5, "client n=%s, clone answered %d: the client stalled?" % (client["n"], got)
assert rep["memory"]["used_bytes"] is not None and rep["memory"]["pages_copied_before_applies"] > 0
for k in ("pause_p50_before_ms", "pause_p99_during_ms", "lag_max_during_ms"):
    assert k in rep["production"], k
assert e1 - e0 > 10, "primary epochs %d -> %d during the drill" % (e0, e1)
assert float(client["max_gap_ms"]) < 3000, client
print("   RTO %.3f ms, clone get %d, client reached n=%s (max reply %s ms), primary epochs %d -> %d, "
      "memory %d bytes" % (rep["rto_ms"], got, client["n"], client["max_gap_ms"], e0, e1,
                           rep["memory"]["used_bytes"]))
PY
ok "counter: PASS while the client went on and the primary's epochs continued"

# --probe CMD: the clone's console on the command's stdin and stdout
probe='printf "get\n"; read -r line; echo "probe read: $line"; case "$line" in [0-9]*" "*) exit 0;; esac; exit 1'
"$BIN" drill test-failover --control "$SEC_CTL" --seconds 1 --probe "$probe" >"$tmp/p1.out" 2>&1 ||
	fail "drill with a passing --probe: $(cat "$tmp/p1.out")"
grep -q "probe *command exited 0" "$tmp/p1.out" || fail "probe outcome: $(cat "$tmp/p1.out")"
"$BIN" drill test-failover --control "$SEC_CTL" --seconds 1 --probe 'printf "get\n"; exit 3' \
	>"$tmp/p2.out" 2>&1
rc=$?
[ $rc = 1 ] || fail "a failing --probe gave exit $rc: $(cat "$tmp/p2.out")"
grep -q "verdict *FAIL: probe: command exited 3" "$tmp/p2.out" || fail "probe failure: $(cat "$tmp/p2.out")"
ok "--probe CMD: exit 0 passes, exit 3 fails the drill (exit 1)"

# ---- 4. the corrupt hook ------------------------------------------------------------
out=$(ctl "$SEC_CTL" "drill corrupt")
echo "$out" | grep -q "^ok flipped" || fail "drill corrupt: $out"
"$BIN" drill test-failover --control "$SEC_CTL" --seconds 1 --report-dir "$reports" \
	>"$tmp/d2.out" 2>&1
rc=$?
cat "$tmp/d2.out"
[ $rc = 1 ] || fail "a corrupted standby's drill exited $rc, want 1"
grep -q "verdict *FAIL: digest mismatch" "$tmp/d2.out" || fail "no 'digest mismatch' verdict"
ok "a byte flipped in the standby: FAIL with digest mismatch, exit 1"

# ---- 3. stress pair ------------------------------------------------------------------
start_pair stress --guest stress --cpus 2 --mem 16M
out=$(ctl "$SEC_CTL" "drill corrupt")
echo "$out" | grep -q "^error.*UNDERSTUDY_TEST_HOOKS" || fail "corrupt hook accepted without the env: $out"
"$BIN" drill test-failover --control "$SEC_CTL" --seconds 2 --report-dir "$reports" \
	>"$tmp/d3.out" 2>&1
rc=$?
cat "$tmp/d3.out"
[ $rc = 0 ] || fail "drill on the stress guest exited $rc"
grep -q "probe *check -> 'ok cpus=2" "$tmp/d3.out" || fail "stress probe"
grep -q "digest .*: match" "$tmp/d3.out" || fail "stress digest"
# no reply to compare: the RAM digest at the clone's epoch says that nothing acknowledged was lost
grep -q "RPO *acknowledged outputs lost: 0 (the RAM digest: the clone holds epoch [0-9]* as the primary had it" \
	"$tmp/d3.out" || fail "stress RPO: $(grep RPO "$tmp/d3.out")"
ok "stress: PASS, check answered ok, digest matched (corrupt hook refused without the env)"

# ---- 5. history -----------------------------------------------------------------------
[ "$(ls "$reports" | grep -c '^drill-.*-test-failover.*\.json$')" = 3 ] ||
	fail "reports kept: $(ls "$reports")"
"$BIN" drill history "$reports" >"$tmp/hist.out" || fail "drill history failed"
cat "$tmp/hist.out"
[ "$(grep -c 'test-failover  PASS' "$tmp/hist.out")" = 2 ] || fail "history: two PASS rows"
grep -q "test-failover  FAIL .*digest mismatch" "$tmp/hist.out" || fail "history: the FAIL row"
grep -q "^(3 drills)" "$tmp/hist.out" || fail "history count"
ok "--report-dir kept 3 reports; drill history lists them"
# ---- 6. the primary dies during a drill ------------------------------------------------
kill -9 $(jobs -p) 2>/dev/null; wait 2>/dev/null
start_pair dies --guest counter
out=$(python3 tests/counter_client.py $PCON incr incr incr incr) || fail "client of the primary"
[ "$(echo "$out" | tail -1 | cut -d' ' -f1)" = 4 ] || fail "primary replies: $out"
"$BIN" drill test-failover --control "$SEC_CTL" --seconds 10 >"$tmp/d6.out" 2>&1 &
dpid=$!
wait_log "$tmp/dies-sec.log" "clone running" 20 || fail "the clone did not start: $(tail -3 "$tmp/dies-sec.log")"
pkill -9 -f -- "--control $PRI_CTL"
wait $dpid
rc=$?
cat "$tmp/d6.out"
[ $rc = 1 ] || fail "a drill whose primary died exited $rc, want 1"
grep -q "production changed during the drill" "$tmp/d6.out" || fail "no 'production changed' reason"
wait_log "$tmp/dies-sec.log" "TOOK OVER" 20 || fail "no takeover after the primary died mid-drill"
"$BIN" status --control "$SEC_CTL" | grep -q "^role primary$" || fail "the secondary does not run the guest: $("$BIN" status --control "$SEC_CTL")"
python3 - "$SCON" <<'PY' || fail "the guest after the takeover"
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
f = s.makefile("rwb", buffering=0)
f.write(b"get\n")
lines = [f.readline().decode() for _ in range(1)]
while lines[-1].split()[0] != "4" and len(lines) < 10:
    lines.append(f.readline().decode())
print("   after the takeover:", [l.strip() for l in lines])
if lines[-1].split()[0] != "4":
    sys.exit("the taken-over guest answered %r, want 4" % lines)
PY
ok "the primary killed during a drill: the drill FAILs (exit 1), the takeover happens, the counter holds at 4"
# every report gave the RPO's number or said why it has none
for f in "$tmp"/d2.out "$tmp"/d3.out "$tmp"/d6.out "$tmp"/p1.out "$tmp"/p2.out; do
	grep -q "RPO *acknowledged outputs lost: \([0-9]* (.\+)\|not known: .\+\);" "$f" ||
		fail "$(basename "$f"): the RPO line gives no number nor why: $(grep RPO "$f")"
done
ok "every drill's RPO line: $(grep -ho 'outputs lost: [^;]*' "$tmp"/d[236].out "$tmp"/p[12].out | cut -c1-60 | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
echo "PASS: sys_drill"
