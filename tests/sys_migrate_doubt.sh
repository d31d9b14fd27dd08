#!/usr/bin/env bash
# understudy migrate: the destination dies in the hand-over; the VM is not
# lost with it. The destination stops itself right after it read the
# hand-over order (test hook UNDERSTUDY_TEST_STOP=handover) and is killed
# -9 there: the order left the source, so the destination may have run the
# guest. Before, the source ended with exit 3 ("the secondary takes over")
# and the only copy went with it. Now the source process stays, the guest
# paused (state in-doubt, the reason in status and the log), `understudy
# migrate` exits 1 and says what to do, and `understudy takeover` on the
# source resumes the guest there: the counter goes on from where it was.
# (The destination killed before the hand-over: sys_migrate case 4.)
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
tmp=$(mktemp -d)
cleanup() { kill -9 $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
count() { python3 tests/counter_client.py "$@" | tail -1 | cut -d' ' -f1; }
state() { "$BIN" status --control "$tmp/src.ctl" 2>/dev/null | sed -n 's/^state //p'; }

dport=$(free_port); dcon=$(free_port); scon=$(free_port)
UNDERSTUDY_TEST_HOOKS=1 UNDERSTUDY_TEST_STOP=handover "$BIN" secondary --listen 127.0.0.1:$dport \
	--console tcp:127.0.0.1:$dcon --insecure --failover-timeout-ms 4000 --control "$tmp/dst.ctl" \
	2>"$tmp/dst.log" &
dp=$!
wait_port $dport || fail "destination did not listen"
"$BIN" run --guest counter --console tcp:127.0.0.1:$scon --control "$tmp/src.ctl" 2>"$tmp/src.log" &
sp=$!
wait_port $scon || fail "source did not start"
[ "$(count $scon incr incr)" = 2 ] || fail "source counter"
"$BIN" migrate --timeout-ms 4000 --control "$tmp/src.ctl" --to 127.0.0.1:$dport --insecure \
	--max-time 120 >/dev/null 2>"$tmp/m.out" &
mp=$!
wait_log "$tmp/dst.log" "test hook: stopping at handover" 120 ||
	fail "the destination never got the hand-over: $(tail -3 "$tmp/dst.log")"
kill -9 $dp; wait $dp 2>/dev/null
wait $mp; rc=$?
[ $rc = 1 ] || fail "migrate exited $rc, want 1: $(tail -2 "$tmp/m.out")"
# Alive, not a zombie yet to be reaped: it answers on its control socket.
[ -n "$(state)" ] || { wait $sp; fail "the source ended (exit $?) with the destination: $(tail -2 "$tmp/src.log")"; }
grep -q "in doubt" "$tmp/m.out" || fail "migrate did not say the hand-over is in doubt: $(tail -2 "$tmp/m.out")"
grep -q "understudy takeover --control" "$tmp/m.out" || fail "migrate did not say what to do"
grep -q "MIGRATION IN DOUBT" "$tmp/src.log" || fail "the source did not say why it stays paused"
[ "$(state)" = in-doubt ] || fail "source state '$(state)', want in-doubt"
"$BIN" status --control "$tmp/src.ctl" | grep -q "^reason .*in doubt" || fail "status gives no reason"
"$BIN" takeover --control "$tmp/src.ctl" >"$tmp/t.out" 2>&1 || fail "takeover on the source: $(cat "$tmp/t.out")"
[ "$(state)" = unprotected ] || fail "after takeover the source is '$(state)'"
v=$(count $scon incr)
[ "$v" = 3 ] || fail "the resumed source says $v, want 3"
ok "destination killed at the hand-over: source stays (in-doubt, paused), migrate exit 1, takeover resumed it, counter 3"
exit 0
