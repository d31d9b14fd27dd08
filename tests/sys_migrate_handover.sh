#!/usr/bin/env bash
# understudy migrate: the destination dies in the hand-over, at a point a
# test hook fixes (UNDERSTUDY_TEST_HOOKS=1 UNDERSTUDY_TEST_STOP=where: the
# agent stops itself there and is killed -9), not at a moment timing picks.
# A client increments the counter guest all along; each reply it got was
# acknowledged output, so the values it saw must run 1, 2, 3... with no
# gap or repeat once the guest runs again (none lost, none run twice).
#   a. Before the order left: the source stops itself with the guest
#      paused, the final epoch queued and the hand-over order next
#      ("paused"); the destination is killed there. The source, continued,
#      finds the destination's end closed before the order left (it does not
#      send it: it would never be read): the destination never got it, so
#      the source resumes the guest by itself (unprotected), `migrate` exits
#      1, and the source does not end with exit 3 ("the secondary takes
#      over": that was the dead destination).
#   b. After the order left: the destination stops itself right after it
#      read the order ("handover") and is killed there: it may have run the
#      guest. The source stays, the guest paused (state in-doubt, the
#      reason in status and the log; no reply reaches the client), `migrate`
#      exits 1 and says what to do, and `understudy takeover` on the source
#      (the operator says the destination is dead) resumes it there.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
test_tmp
FAIL_LOGS="$tmp/*.log $tmp/*.out"
# The destination never fails over here (it is killed): its failover timeout
# is long, so that the source's own stop at the hook (the test's kill and
# SIGCONT, seconds at worst in the nested VM) is no stall past it.
fo_ms=30000
to_ms=$(nested 4000 20000)
n=0
. tests/migrate_lib.sh
# start CASE DEST_STOP SRC_STOP: a destination and a counter guest under
# `run`, hooks as given; the client and migrate start.
start() {
	n=$1
	dest "$2"
	UNDERSTUDY_TEST_HOOKS=1 UNDERSTUDY_TEST_STOP=$3 "$BIN" run --guest counter \
		--console tcp:127.0.0.1:$scon --control "$tmp/$n.src.ctl" 2>"$tmp/$n.src.log" &
	sp=$!
	wait_port $scon || fail "$n: source did not start"
	client_migrate
}

# a. The destination killed while the source holds the final epoch and the
# order, not yet written.
start a none paused
wait_log "$tmp/a.src.log" "test hook: stopping at paused" 120 ||
	fail "a: the source never paused for the hand-over: $(tail -3 "$tmp/a.src.log")"
before=$(wc -l <"$tmp/a.seen")
kill_dest
kill -CONT $sp
wait $mp; rc=$?
[ $rc = 1 ] || fail "a: migrate exited $rc, want 1: $(tail -2 "$tmp/a.migrate.out")"
alive "with the destination that never got the hand-over"
grep -q "never got the hand-over order" "$tmp/a.src.log" ||
	fail "a: the source did not resume for the reason that the order never left: $(grep -i 'hand-over\|doubt' "$tmp/a.src.log" | tail -3)"
[ "$(state)" = unprotected ] || fail "a: source state '$(state)', want unprotected (resumed)"
grep -q "failed: the source is unprotected" "$tmp/a.migrate.out" ||
	fail "a: migrate did not say the source runs on unprotected: $(tail -2 "$tmp/a.migrate.out")"
client_done
got=$(in_order)
[[ "$got" =~ ^[0-9]+$ ]] || fail "a: replies out of order: $got"
[ "$got" -gt "$before" ] || fail "a: no reply after the resume ($got replies, $before before the kill)"
how=$(grep -o "closed the connection before the hand-over order\|never left this host" "$tmp/a.src.log" | head -1)
ok "a. destination killed before the order left ($how): the source resumed the guest itself, migrate exit 1, replies 1..$got in order ($before before the kill)"
kill $sp; wait $sp 2>/dev/null

# b. The destination killed right after it read the order.
start b handover none
wait_log "$tmp/b.dst.log" "test hook: stopping at handover" 120 ||
	fail "b: the destination never got the hand-over: $(tail -3 "$tmp/b.dst.log")"
kill_dest
wait $mp; rc=$?
[ $rc = 1 ] || fail "b: migrate exited $rc, want 1: $(tail -2 "$tmp/b.migrate.out")"
alive "with the destination"
grep -q "in doubt" "$tmp/b.migrate.out" || fail "b: migrate did not say the hand-over is in doubt: $(tail -2 "$tmp/b.migrate.out")"
grep -q "understudy takeover --control" "$tmp/b.migrate.out" || fail "b: migrate did not say what to do"
grep -q "MIGRATION IN DOUBT" "$tmp/b.src.log" || fail "b: the source did not say why it stays paused"
[ "$(state)" = in-doubt ] || fail "b: source state '$(state)', want in-doubt"
"$BIN" status --control "$tmp/b.src.ctl" | grep -q "^reason .*in doubt" || fail "b: status gives no reason"
# Paused: the client's pending request gets no reply while in doubt.
held=$(wc -l <"$tmp/b.seen")
sleep 2
[ "$(wc -l <"$tmp/b.seen")" = "$held" ] || fail "b: the guest ran on while in doubt ($held replies, then $(wc -l <"$tmp/b.seen"))"
"$BIN" takeover --control "$tmp/b.src.ctl" >"$tmp/b.takeover.out" 2>&1 ||
	fail "b: takeover on the source: $(cat "$tmp/b.takeover.out")"
[ "$(state)" = unprotected ] || fail "b: after takeover the source is '$(state)'"
client_done
got=$(in_order)
[[ "$got" =~ ^[0-9]+$ ]] || fail "b: replies out of order: $got"
[ "$got" -gt "$held" ] || fail "b: no reply after the takeover ($got replies, $held before)"
ok "b. destination killed after the order left: the source stayed paused (in-doubt, no reply for 2 s), migrate exit 1, takeover resumed it, replies 1..$got in order ($held before)"
exit 0
