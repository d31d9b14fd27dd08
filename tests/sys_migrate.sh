#!/usr/bin/env bash
# understudy migrate: a running VM moves to a waiting secondary.
#   1. counter under `run`: migrated, the source exits 0, the destination's
#      guest goes on from the source's count; --json ends with a summary;
#   2. the stress guest (2 vCPUs, LAPIC timer, AVX) passes its self-check on
#      the destination; that destination was told the machine (--guest,
#      --cpus) and built its VM while it waited: the migration used that VM;
#   3. a downtime that cannot be met (a --bandwidth cap makes it so on any
#      host): --max-time cancels, the source runs on
#      unharmed and the destination drops what it got; the progress (a bar,
#      bytes, rates, round, predicted downtime, throttle) came once a second;
#   4. the destination killed before the hand-over: the source runs on;
#   5. a protected `primary` hands over to its own secondary;
#   6. auto-converge: a guest dirtying faster than the downtime allows is
#      throttled step by step until the hand-over fits;
#   7. the source killed (-9) the moment it pauses for the hand-over: the
#      destination runs the guest (it took the hand-over, or fails over from
#      the last epoch it holds) and the counter goes on;
#   8. a VM protected by `protect` moves to another host: its secondary is
#      told to stand down first (it stays waiting, takes nothing over); and a
#      protected VM hands over to its own secondary.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_host_kvm "migration steps held to 2 s timeouts"
tmp=$(mktemp -d)
cleanup() { [ -n "${MIGRATE_KEEP:-}" ] && cp -r "$tmp" "$MIGRATE_KEEP"; kill -9 $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
count() { python3 tests/counter_client.py "$@" | tail -1 | cut -d' ' -f1; }
n=0
start_dest() {   # [SECONDARY ARGS...]: sets dport dcon dp; logs $tmp/$n.dst.log
	n=$((n + 1)); dport=$(free_port); dcon=$(free_port)
	"$BIN" secondary --listen 127.0.0.1:$dport --console tcp:127.0.0.1:$dcon --insecure \
		--failover-timeout-ms 2000 --control "$tmp/$n.dst.ctl" "$@" 2>"$tmp/$n.dst.log" &
	dp=$!
	wait_port $dport || fail "destination did not listen"
}
start_run() {   # GUEST...: sets scon sp
	scon=$(free_port)
	"$BIN" run "$@" --console tcp:127.0.0.1:$scon --control "$tmp/$n.src.ctl" 2>"$tmp/$n.src.log" &
	sp=$!
	wait_port $scon || fail "source did not start"
}

# 1.
start_dest; start_run --guest counter
[ "$(count $scon incr incr incr)" = 3 ] || fail "source counter"
"$BIN" migrate --timeout-ms 2000 --control "$tmp/$n.src.ctl" --to 127.0.0.1:$dport --insecure --json >"$tmp/1.json" ||
	fail "migrate failed: $(tail -3 "$tmp/$n.src.log")"
wait $sp; rc=$?
[ $rc = 0 ] || fail "the source exited $rc after the migration"
tail -1 "$tmp/1.json" | python3 -c '
import json, sys
s = json.loads(sys.stdin.read())
assert s["summary"] and s["result"] == "migrated", s
assert 0 <= s["downtime_ms"] <= 30, s
print("   summary:", s)' || fail "summary: $(tail -1 "$tmp/1.json")"
[ "$(count $dcon incr)" = 4 ] || fail "the destination does not go on from 3"
ok "1. counter migrated: source exit 0, destination goes on at 4"
kill $dp; wait $dp 2>/dev/null

# 2.
start_dest --guest stress --cpus 2; start_run --guest stress --cpus 2
grep -q "standby VM built ahead" "$tmp/$n.dst.log" || fail "the told destination built no VM ahead"
sleep 1
"$BIN" migrate --timeout-ms 2000 --control "$tmp/$n.src.ctl" --to 127.0.0.1:$dport --insecure >/dev/null 2>"$tmp/2.out" ||
	fail "stress migrate: $(tail -2 "$tmp/2.out")"
wait $sp
out=$(python3 - $dcon <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
s.sendall(b"check\n")
buf, end = b"", time.time() + 20
while time.time() < end and b"\n" not in buf.split(b"check", 1)[-1]:
    d = s.recv(4096)
    if not d:
        break
    buf += d
print(buf.decode(errors="replace").strip().splitlines()[-1] if buf else "")
PY
)
echo "$out" | grep -qi "ok\|pass" || fail "stress self-check on the destination: $out"
! grep -q "building the standby anew" "$tmp/$n.dst.log" || fail "the VM built ahead was not used"
ok "2. stress guest (2 vCPUs) migrated: self-check '$out' ($(grep -o 'downtime.*' "$tmp/2.out"))"
kill $dp; wait $dp 2>/dev/null

# 3. Cancel at --max-time (a downtime it cannot meet). By construction, on
# any host: at --bandwidth 1 (MiB/s) the 64 MiB the guest writes cannot even
# be copied once within --max-time 2, and no epoch fits 1 ms (its vCPU state
# alone is over 1 KiB, the limit's worth of a millisecond).
start_dest; start_run --guest dirty:mb=64,rate_mb=400 --mem 128M
if "$BIN" migrate --timeout-ms 2000 --control "$tmp/$n.src.ctl" --to 127.0.0.1:$dport --insecure --downtime-ms 1 \
	--epoch-ms 25 --max-time 2 --no-auto-converge --bandwidth 1 >/dev/null 2>"$tmp/3.out"; then
	fail "a migration that cannot meet 1 ms succeeded"
fi
grep -q "cancelled" "$tmp/3.out" || fail "not cancelled: $(cat "$tmp/3.out")"
# Not a terminal: the progress line comes once a second, a bar and the figures.
grep -Eq '^(syncing|protecting|protected) +\[[#.]{20}\] round .* MiB/s +dirty .* predicted .* throttle' "$tmp/3.out" ||
	fail "no progress lines: $(head -c 600 "$tmp/3.out")"
kill -0 $sp || fail "the source died on cancel"
wait_log "$tmp/$n.dst.log" "stood down" 10 || fail "the destination did not drop: $(tail -2 "$tmp/$n.dst.log")"
grep -q "TOOK OVER" "$tmp/$n.dst.log" && fail "the destination took over after a cancel"
[ "$("$BIN" status --control "$tmp/$n.src.ctl" | sed -n 's/^state //p')" = unprotected ] || fail "source state"
ok "3. --max-time: cancelled, the source runs on, the destination stood down"
kill $sp $dp; wait $sp $dp 2>/dev/null

# 4. The destination dies before the hand-over.
start_dest; start_run --guest dirty:mb=64,rate_mb=400 --mem 128M
"$BIN" migrate --timeout-ms 2000 --control "$tmp/$n.src.ctl" --to 127.0.0.1:$dport --insecure --downtime-ms 1 \
	--epoch-ms 25 --max-time 20 --no-auto-converge >/dev/null 2>"$tmp/4.out" &
mp=$!
wait_log "$tmp/$n.src.log" "protected: secondary holds" 20 || fail "never protected"
kill -9 $dp; wait $dp 2>/dev/null
wait $mp && fail "migrate succeeded without a destination"
kill -0 $sp || fail "the source died with the destination"
[ "$("$BIN" status --control "$tmp/$n.src.ctl" | sed -n 's/^state //p')" = unprotected ] || fail "source state"
ok "4. destination killed mid-way: migrate exit 1, the source runs on"
kill $sp; wait $sp 2>/dev/null

# 5. A protected primary hands over to its own secondary.
start_dest
pcon=$(free_port)
"$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon --peer 127.0.0.1:$dport --insecure \
	--control "$tmp/p.ctl" 2>"$tmp/p.log" &
pp=$!
wait_log "$tmp/p.log" "protected: secondary holds" 20 || fail "primary never protected"
[ "$(count $pcon incr incr)" = 2 ] || fail "primary counter"
other=$(free_port)
"$BIN" migrate --timeout-ms 2000 --control "$tmp/p.ctl" --to 127.0.0.1:$other --insecure 2>"$tmp/5a.out" &&
	fail "a primary migrated to a host other than its secondary"
grep -q "keeps the secondary it was started with" "$tmp/5a.out" || fail "no clear refusal: $(cat "$tmp/5a.out")"
[ "$("$BIN" status --control "$tmp/p.ctl" | sed -n 's/^state //p')" = protected ] ||
	fail "the refused migration left the primary unprotected"
"$BIN" migrate --timeout-ms 2000 --control "$tmp/p.ctl" --to 127.0.0.1:$dport --insecure >/dev/null 2>"$tmp/5.out" ||
	fail "primary hand-over: $(cat "$tmp/5.out")"
wait $pp; rc=$?
[ $rc = 0 ] || fail "the old primary exited $rc"
[ "$(count $dcon incr)" = 3 ] || fail "the destination does not go on from 2"
ok "5. protected primary handed over to its secondary ($(grep -o 'downtime [0-9.]* ms' "$tmp/5.out"))"

# 6. Auto-converge.
start_dest; start_run --guest dirty:mb=64,rate_mb=400 --mem 128M
"$BIN" migrate --timeout-ms 2000 --control "$tmp/$n.src.ctl" --to 127.0.0.1:$dport --insecure --downtime-ms 2 \
	--max-time 60 --json >"$tmp/6.json" 2>"$tmp/6.out" ||
	fail "auto-converge did not converge: $(tail -3 "$tmp/6.out") $(grep auto-converge "$tmp/$n.src.log" | tail -2)"
wait $sp
tail -1 "$tmp/6.json" | python3 -c '
import json, sys
s = json.loads(sys.stdin.read())
assert s["result"] == "migrated" and s["throttle_pct_max"] >= 20, s
print("   summary:", s)' || fail "summary: $(tail -1 "$tmp/6.json")"
grep -q "auto-converge: predicted downtime" "$tmp/$n.src.log" || fail "no throttle step logged"
ok "6. auto-converge: $(grep -c 'auto-converge: predicted' "$tmp/$n.src.log") throttle steps, then migrated"

# 7. The source dies right after the switch.
start_dest
scon=$(free_port)
UNDERSTUDY_EVENT_LOG="$tmp/7.events" "$BIN" run --guest counter --console tcp:127.0.0.1:$scon \
	--control "$tmp/$n.src.ctl" 2>"$tmp/$n.src.log" &
sp=$!
wait_port $scon || fail "source did not start"
[ "$(count $scon incr incr)" = 2 ] || fail "source counter"
"$BIN" migrate --timeout-ms 2000 --control "$tmp/$n.src.ctl" --to 127.0.0.1:$dport --insecure \
	>/dev/null 2>"$tmp/7.out" &
mp=$!
for i in $(seq 2000); do grep -q " switch" "$tmp/7.events" 2>/dev/null && break; sleep 0.005; done
kill -9 $sp
wait $mp 2>/dev/null
wait_log "$tmp/$n.dst.log" "TOOK OVER" 20 || fail "the destination did not run the guest: $(tail -3 "$tmp/$n.dst.log")"
v=$(count $dcon incr)
[ "$v" = 3 ] || fail "the destination says $v after the source died, want 3"
ok "7. source killed at the switch: the destination runs the guest ($(grep -o 'TOOK OVER: [^;]*' "$tmp/$n.dst.log" | head -1)), counter 3"
kill $dp 2>/dev/null; wait $dp 2>/dev/null

# 8. A VM protected (run + protect) moves to another host: its secondary is
# told to stand down first (it takes nothing over), then the migration runs;
# and a protected VM hands over to its own secondary.
start_dest; a_ctl=$tmp/$n.dst.ctl; a_log=$tmp/$n.dst.log; a_port=$dport; a_con=$dcon
start_dest; b_con=$dcon
start_run --guest counter
# protect_onto CTL PORT: CTL's VM protected by the secondary at PORT
protect_onto() {
	"$BIN" protect --control "$1" --peer 127.0.0.1:$2 --insecure --timeout-ms 2000 >/dev/null ||
		fail "protect $1 onto port $2"
	for i in $(seq 100); do
		[ "$("$BIN" status --control "$1" | sed -n 's/^state //p')" = protected ] && return
		sleep 0.1
	done
}
protect_onto "$tmp/$n.src.ctl" $a_port
[ "$("$BIN" status --control "$tmp/$n.src.ctl" | sed -n 's/^peer //p')" = 127.0.0.1:$a_port ] ||
	fail "status does not name the secondary: $("$BIN" status --control "$tmp/$n.src.ctl" | head -4)"
[ "$(count $scon incr incr)" = 2 ] || fail "source counter"
"$BIN" migrate --timeout-ms 2000 --control "$tmp/$n.src.ctl" --to 127.0.0.1:$dport --insecure \
	>/dev/null 2>"$tmp/8.out" || fail "migrate of a protected VM: $(cat "$tmp/8.out"; tail -3 "$tmp/$n.src.log")"
grep -q "told to stand down first" "$tmp/8.out" || fail "the CLI did not say it drops the secondary"
wait $sp; rc=$?
[ $rc = 0 ] || fail "the source exited $rc"
[ "$(count $b_con incr)" = 3 ] || fail "the destination does not go on from 2"
grep -q "TOOK OVER" "$a_log" && fail "the dropped secondary took over"
a_state=$("$BIN" status --control "$a_ctl" | sed -n 's/^state //p')
[ "$a_state" = waiting ] || fail "the dropped secondary is '$a_state', not waiting"
ok "8. protected VM migrated to another host: its secondary stood down first (now $a_state), the destination goes on at 3"
# The new owner (a secondary that took the guest) protected by A, then
# handed over to A, its own secondary.
protect_onto "$tmp/$n.dst.ctl" $a_port
"$BIN" migrate --timeout-ms 2000 --control "$tmp/$n.dst.ctl" --to 127.0.0.1:$a_port --insecure \
	>/dev/null 2>"$tmp/8b.out" || fail "hand-over to its own secondary: $(cat "$tmp/8b.out")"
grep -q "stand down" "$tmp/8b.out" && fail "its own secondary was dropped instead of taking the guest"
wait_log "$a_log" "TOOK OVER" 20 || fail "A did not take the guest: $(tail -3 "$a_log")"
[ "$(count $a_con incr)" = 4 ] || fail "A does not go on from 3"
ok "8. and a protected VM handed over to its own secondary ($(grep -o 'downtime [0-9.]* ms' "$tmp/8b.out"))"
exit 0
