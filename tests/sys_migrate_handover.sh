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
state() { "$BIN" status --control "$tmp/$n.src.ctl" 2>/dev/null | sed -n 's/^state //p'; }
# start CASE DEST_STOP SRC_STOP: a destination and a counter guest under
# `run`, hooks as given; a client increments until $tmp/$n.stop exists,
# then once more, one value a line in $tmp/$n.seen; migrate starts.
start() {
	n=$1
	dport=$(free_port); dcon=$(free_port); scon=$(free_port)
	UNDERSTUDY_TEST_HOOKS=1 UNDERSTUDY_TEST_STOP=$2 "$BIN" secondary --listen 127.0.0.1:$dport \
		--console tcp:127.0.0.1:$dcon --insecure --failover-timeout-ms $fo_ms \
		--control "$tmp/$n.dst.ctl" 2>"$tmp/$n.dst.log" &
	dp=$!
	wait_port $dport || fail "$n: destination did not listen"
	UNDERSTUDY_TEST_HOOKS=1 UNDERSTUDY_TEST_STOP=$3 "$BIN" run --guest counter \
		--console tcp:127.0.0.1:$scon --control "$tmp/$n.src.ctl" 2>"$tmp/$n.src.log" &
	sp=$!
	wait_port $scon || fail "$n: source did not start"
	python3 - $scon "$tmp/$n.stop" >"$tmp/$n.seen" 2>"$tmp/$n.client.out" <<'PY' &
import os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=600)
f = s.makefile("rwb", buffering=0)
while True:
    last = os.path.exists(sys.argv[2])
    f.write(b"incr\n")
    line = f.readline().decode()
    if not line:
        sys.exit("console closed")
    print(line.split()[0], flush=True)
    if last:
        break
PY
	cp=$!
	for _ in $(seq 200); do [ "$(wc -l <"$tmp/$n.seen")" -ge 3 ] && break; sleep 0.1; done
	[ "$(wc -l <"$tmp/$n.seen")" -ge 3 ] || fail "$n: the client got no replies: $(cat "$tmp/$n.client.out")"
	"$BIN" migrate --timeout-ms $to_ms --control "$tmp/$n.src.ctl" --to 127.0.0.1:$dport --insecure \
		--max-time 600 >/dev/null 2>"$tmp/$n.migrate.out" &
	mp=$!
}
# kill_dest: the destination killed -9 and reaped: its socket is closed.
kill_dest() { kill -9 $dp; wait $dp 2>/dev/null; }
# alive WHY: the source still answers on its control socket (not merely
# an unreaped process: kill -0 passes a zombie).
alive() { [ -n "$(state)" ] || { wait $sp; fail "$n: the source ended (exit $?) $1: $(tail -2 "$tmp/$n.src.log")"; }; }
# client_done: the client makes its last request and ends.
client_done() {
	touch "$tmp/$n.stop"
	wait $cp || fail "$n: the client: $(cat "$tmp/$n.client.out")"
}
# in_order: the client's values were 1..N, each once; prints N (else why).
in_order() { awk '$1 != NR { print "reply " NR " was " $1; bad = 1; exit } END { if (!bad) print NR }' "$tmp/$n.seen"; }

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
