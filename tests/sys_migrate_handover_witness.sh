#!/usr/bin/env bash
# understudy migrate with a witness: the destination dies in the hand-over
# at a point a test hook fixes (UNDERSTUDY_TEST_HOOKS=1
# UNDERSTUDY_TEST_STOP=where), as in sys_migrate_handover.sh, whose parts
# it shares (tests/migrate_lib.sh): a client's counter replies must run
# 1, 2, 3... with no gap or repeat once the guest runs again.
# A real etcd on loopback; the source is a `primary` protected by the
# destination, which the witness vouches for.
#   c. The destination killed right after it read the order ("handover"):
#      it cannot have run the guest without the key, so the source resumes
#      by itself (the key is still its own, or it wins it back), migrate
#      exits 1, and the key names the source.
#   d. The destination's witness thread held before it contends for the key
#      ("contend"; its loop runs on and acknowledges the final epoch, so the
#      source gives the key up for it), then killed: the source contends
#      with the destination's token, wins (the destination never took the
#      key), resumes; K/standby is "none", so the dead destination could
#      never win the key later.
#   e. As d, but the source is a survivor: a secondary that took over
#      (its primary killed) migrates on. Its own lease check, which fences
#      a copy whose key lapsed, must leave the engine be while it contends
#      for the key back; the survivor wins it and resumes. Then `protect`
#      onto a fresh secondary: the survivor is protected again and the
#      witness vouches for the new standby (a win that left a vouch
#      pending refused it for good).
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
test_tmp
FAIL_LOGS="$tmp/*.log $tmp/*.out"
# A test's own timeout (nested VM) shows the agents' logs too.
trap 'show_logs; exit 1' TERM
# The destination never fails over here (it is killed).
fo_ms=30000
to_ms=$(nested 4000 20000)
n=0
. tests/migrate_lib.sh
start_etcd "$tmp/etcd"
W="--witness etcd:$ETCD_EP --lease-ms $(nested 1000 5000)"   # a loaded emulator's
# start_w CASE DEST_STOP: with the witness W (key $n): the destination, a
# counter guest under `primary` that it protects (vouched for), the client
# and migrate.
start_w() {
	n=$1
	dest "$2" "$W --witness-key $n"
	"$BIN" primary --guest counter --peer 127.0.0.1:$dport --insecure $W --witness-key $n \
		--console tcp:127.0.0.1:$scon --control "$tmp/$n.src.ctl" 2>"$tmp/$n.src.log" &
	sp=$!
	wait_log "$tmp/$n.src.log" "the witness vouches for the standby" 120 ||
		fail "$n: never protected and vouched for: $(tail -3 "$tmp/$n.src.log")"
	client_migrate
}
# resumed_by_key CASE: the source resumed by itself under the key: migrate
# exit 1, state unprotected, K/owner the source, replies in order.
resumed_by_key() {
	echo "   $n: waiting for migrate to end"
	wait $mp; rc=$?
	[ $rc = 1 ] || fail "$n: migrate exited $rc, want 1: $(tail -2 "$tmp/$n.migrate.out")"
	alive "with the destination"
	[ "$(state)" = unprotected ] || fail "$n: source state '$(state)', want unprotected (resumed)"
	grep -q "failed: the source is unprotected" "$tmp/$n.migrate.out" ||
		fail "$n: migrate did not say the source runs on unprotected: $(tail -2 "$tmp/$n.migrate.out")"
	owner=$(etcd_get $ETCD_EP $n/owner)
	[[ "$owner" == "${who:-primary} "*"pid $sp" ]] || fail "$n: $n/owner is '$owner', want the source (pid $sp)"
	client_done
	got=$(in_order)
	[[ "$got" =~ ^[0-9]+$ ]] || fail "$n: replies out of order: $got"
	[ "$got" -gt "$before" ] || fail "$n: no reply after the resume ($got replies, $before before)"
}

# c. With a witness, the destination killed right after it read the order.
echo "   c: the destination stops at the order"
start_w c handover
wait_log "$tmp/c.dst.log" "test hook: stopping at handover" 120 ||
	fail "c: the destination never got the hand-over: $(tail -3 "$tmp/c.dst.log")"
before=$(wc -l <"$tmp/c.seen")
kill_dest
resumed_by_key
how=$(grep -o "which is still ours\|won the witness key back" "$tmp/c.src.log" | head -1)
[ -n "$how" ] || fail "c: the source did not say why it resumed: $(grep -i 'resumes\|doubt' "$tmp/c.src.log" | tail -3)"
ok "c. with a witness, destination killed after the order: the source resumed by itself ($how), migrate exit 1, owner '$owner', replies 1..$got in order"
kill -9 $sp; wait $sp 2>/dev/null

# d. With a witness, the destination acknowledged the final epoch (the
# source gave the key up for it) but never contended for the key.
echo "   d: the destination's witness thread holds before it contends"
start_w d contend
wait_log "$tmp/d.dst.log" "test hook: this thread holds at contend" 120 ||
	fail "d: the destination never came to contend: $(tail -3 "$tmp/d.dst.log")"
wait_log "$tmp/d.src.log" "given up (lease revoked)" 60 ||
	fail "d: the source never gave the key up: $(tail -3 "$tmp/d.src.log")"
echo "   d: the key given up for the destination; killing it"
before=$(wc -l <"$tmp/d.seen")
kill_dest
resumed_by_key
grep -q "won the witness key back: the destination never took it" "$tmp/d.src.log" ||
	fail "d: the source did not win the key back: $(grep -i 'witness\|doubt' "$tmp/d.src.log" | tail -3)"
standby=$(etcd_get $ETCD_EP d/standby)
[ "$standby" = none ] || fail "d: d/standby is '$standby', want none (the dead destination shut out)"
ok "d. with a witness, the destination acknowledged but never took the key: the source won it back and resumed, migrate exit 1, d/standby none, replies 1..$got in order ($before before the kill)"

kill -9 $sp 2>/dev/null; wait $sp 2>/dev/null

# e. The survivor of a failover (a secondary that took over) migrates on;
# the destination acknowledges the final epoch but never takes the key.
echo "   e: a survivor migrates on; its destination holds before it contends"
n=e
bport=$(free_port); bcon=$(free_port); pcon=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$bport --console tcp:127.0.0.1:$bcon --insecure \
	--failover-timeout-ms $(nested 1000 4000) $W --witness-key e --control "$tmp/e.src.ctl" \
	2>"$tmp/e.src.log" &
sp=$!
wait_port $bport || fail "e: the secondary did not listen"
"$BIN" primary --guest counter --peer 127.0.0.1:$bport --insecure $W --witness-key e \
	--console tcp:127.0.0.1:$pcon --timeout-ms $(nested 1000 4000) 2>"$tmp/e.pri.log" &
pp=$!
wait_log "$tmp/e.pri.log" "the witness vouches for the standby" 120 ||
	fail "e: never protected and vouched for: $(tail -3 "$tmp/e.pri.log")"
kill -9 $pp; wait $pp 2>/dev/null
wait_log "$tmp/e.src.log" "TOOK OVER" 120 || fail "e: no takeover: $(tail -3 "$tmp/e.src.log")"
[ "$(state)" = unprotected ] || fail "e: the survivor is '$(state)', want unprotected"
dest contend "$W --witness-key e"
scon=$bcon                        # the client talks to the survivor's console
client_migrate
wait_log "$tmp/e.dst.log" "test hook: this thread holds at contend" 120 ||
	fail "e: the destination never came to contend: $(tail -3 "$tmp/e.dst.log")"
wait_log "$tmp/e.src.log" "given up (lease revoked)" 60 ||
	fail "e: the survivor never gave the key up: $(tail -3 "$tmp/e.src.log")"
before=$(wc -l <"$tmp/e.seen")
kill_dest
# Either outcome ends the wait (a fenced survivor would leave migrate
# waiting on a contest for good): only the won key may follow.
wait_log "$tmp/e.src.log" "won the witness key back\|FENCED" 300 ||
	fail "e: the survivor neither won the key back nor fenced: $(tail -3 "$tmp/e.src.log")"
grep -q "FENCED" "$tmp/e.src.log" &&
	fail "e: the survivor fenced its own guest while it contended: $(grep -m1 "FENCED" "$tmp/e.src.log")"
grep -q "won the witness key back: the destination never took it" "$tmp/e.src.log" ||
	fail "e: the survivor did not win the key back: $(grep -i 'witness\|doubt\|fenc' "$tmp/e.src.log" | tail -3)"
who=secondary resumed_by_key
ok "e. a survivor migrating on, its destination acknowledged but never took the key: the survivor won it back and resumed, replies 1..$got in order ($before before the kill)"

echo "   e: protecting the reclaimed survivor again"
vouched=$(grep -c "the witness vouches for the standby" "$tmp/e.src.log")
p2=$(free_port); c2=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$p2 --console tcp:127.0.0.1:$c2 --insecure \
	--failover-timeout-ms $fo_ms $W --witness-key e --control "$tmp/e2.dst.ctl" 2>"$tmp/e2.dst.log" &
p2pid=$!
wait_port $p2 || fail "e: the new secondary did not listen"
out=$(timeout 600 "$BIN" protect --control "$tmp/e.src.ctl" --peer 127.0.0.1:$p2 --insecure 2>&1) ||
	fail "e: protect after the reclaim: $out; $(tail -3 "$tmp/e.src.log")"
for _ in $(seq 600); do
	[ "$(grep -c "the witness vouches for the standby" "$tmp/e.src.log")" -gt "$vouched" ] && break
	sleep 0.1
done
[ "$(grep -c "the witness vouches for the standby" "$tmp/e.src.log")" -gt "$vouched" ] ||
	fail "e: the new standby was never vouched for: $(tail -3 "$tmp/e.src.log")"
[ "$(state)" = protected ] || fail "e: state after protect '$(state)', want protected"
standby=$(etcd_get $ETCD_EP e/standby)
case $standby in none|"") fail "e: e/standby is '$standby' after protect, want the new standby's token";; esac
ok "e. then protect onto a fresh secondary: protected, the witness vouches for it (e/standby $standby)"
kill -9 $p2pid $sp 2>/dev/null; wait $p2pid $sp 2>/dev/null
exit 0
