#!/usr/bin/env bash
# The witness lease on etcd (--witness), on loopback with a real etcd:
#   1. etcd unreachable at start: the primary refuses to run the guest;
#   2. a primary and secondary that do not name the same witness are refused;
#   3. protected: the primary owns K/owner, K/standby holds the standby's
#      token; a second primary for the same key is refused;
#   4. SIGKILL of the primary: the secondary takes over only after winning
#      the key (once the dead primary's lease ran out), the counter goes on;
#   5. SIGSTOP of the primary for 3 s: the secondary takes over; after
#      SIGCONT the old primary is "fenced" and released nothing after the
#      new owner's first release (event logs, CLOCK_MONOTONIC);
#   6. etcd dies while protected: the primary stops releasing at its
#      deadline (fenced) and the secondary cannot take over (no key to win);
#   7. a manual takeover against a live owner is refused;
#   8. migration with a witness: the key moves with the guest; then
#      re-protection of the new owner and a second failover through the key.
#   9. switchover with a witness, there and back: the key moves to the new
#      primary each time, the old one waits as its vouched-for standby (no
#      resync), nothing is lost; then the owner is killed and the standby
#      wins the key and goes on.
#  10. post-copy migration with a witness (every page fetched on demand):
#      the key moves to the destination, which goes on from the source's
#      count while its pages arrive; the source exits 0.
# WITNESS_CASES="4 5" runs some cases.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_host_kvm "a 1 s witness lease and a 300 ms failover timeout"
tmp=$(mktemp -d)
cleanup() { [ -n "${WITNESS_KEEP:-}" ] && cp -r "$tmp" "$WITNESS_KEEP"; kill -CONT $(jobs -p) 2>/dev/null; kill -9 $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
want() { [ -z "${WITNESS_CASES:-}" ] || [[ " $WITNESS_CASES " == *" $1 "* ]]; }
state_of() { "$BIN" status --control "$1" 2>/dev/null | sed -n 's/^state //p'; }
n=0
# start_pair KEY "SECONDARY ARGS" "PRIMARY ARGS": sets sp pp sport scon pcon, logs in $tmp/$n.*
start_pair() {
	n=$((n + 1))
	sport=$(free_port); scon=$(free_port); pcon=$(free_port)
	UNDERSTUDY_EVENT_LOG=$tmp/$n.sec.ev "$BIN" secondary --listen 127.0.0.1:$sport \
		--console tcp:127.0.0.1:$scon --insecure --control "$tmp/$n.sec.ctl" \
		--failover-timeout-ms 300 $2 2>"$tmp/$n.sec.log" &
	sp=$!
	wait_port $sport || fail "secondary did not listen: $(cat "$tmp/$n.sec.log")"
	UNDERSTUDY_EVENT_LOG=$tmp/$n.pri.ev "$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon \
		--peer 127.0.0.1:$sport --insecure --control "$tmp/$n.pri.ctl" --timeout-ms 300 $3 \
		2>"$tmp/$n.pri.log" &
	pp=$!
}
stop_pair() { kill -CONT $pp $sp 2>/dev/null; kill -9 $pp $sp 2>/dev/null; wait $pp $sp 2>/dev/null; return 0; }
protected() {
	wait_log "$tmp/$n.pri.log" "the witness vouches for the standby" 30 ||
		fail "never protected and vouched for: $(tail -5 "$tmp/$n.pri.log")"
}
incr3() {   # three increments on the primary: the last reply must be 3
	local out
	out=$(python3 tests/counter_client.py $pcon incr incr incr) || fail "client of the primary"
	[ "$(echo "$out" | tail -1 | cut -d' ' -f1)" = 3 ] || fail "primary replies: $out"
}
# after_takeover: the secondary's guest answers get with 3 (acknowledged state kept)
after_takeover() {
	local out
	out=$(python3 tests/counter_client.py $scon get | tail -1 | cut -d' ' -f1)
	[ "$out" = 3 ] || fail "the new owner's guest says $out, want 3"
}

start_etcd "$tmp/etcd"
W="--witness etcd:$ETCD_EP --lease-ms 1000"

if want 1; then
	dead=$(free_port); pcon=$(free_port)
	timeout 20 "$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon --peer 127.0.0.1:1 \
		--insecure --witness etcd:127.0.0.1:$dead --witness-key t1 2>"$tmp/1.log"
	rc=$?
	[ $rc = 1 ] || fail "primary without its etcd exited $rc"
	grep -q "witness: cannot get a lease from etcd" "$tmp/1.log" || fail "no clear error: $(cat "$tmp/1.log")"
	grep -q "refusing to run the guest" "$tmp/1.log" || fail "no refusal: $(cat "$tmp/1.log")"
	ok "1. etcd unreachable at start: $(grep -o 'witness: .*' "$tmp/1.log" | head -1)"
	"$BIN" primary --guest counter --peer 127.0.0.1:1 --insecure --witness 127.0.0.1:1 \
		2>"$tmp/1b.log"
	[ $? = 2 ] && grep -q "use etcd:HOST:PORT" "$tmp/1b.log" || fail "--witness without etcd: accepted"
	ok "1. --witness without etcd: refused (exit 2)"
fi

if want 2; then
	start_pair t2 "$W --witness-key t2" ""
	wait_log "$tmp/$n.pri.log" "witness differs" 20 || fail "mismatch not refused: $(tail -3 "$tmp/$n.pri.log")"
	wait $pp; rc=$?
	[ $rc = 1 ] || fail "primary exited $rc after the refusal"
	ok "2. witness on one side only: refused: $(grep -o 'witness differs.*' "$tmp/$n.pri.log" | head -1)"
	stop_pair
fi

if want 3 || want 4; then
	start_pair t4 "$W --witness-key t4" "$W --witness-key t4"
	protected
	owner=$(etcd_get $ETCD_EP t4/owner); standby=$(etcd_get $ETCD_EP t4/standby)
	[[ "$owner" == "primary "*"pid $pp" ]] || fail "t4/owner is '$owner', want the primary (pid $pp)"
	[[ "$standby" == standby-* ]] || fail "t4/standby is '$standby'"
	"$BIN" status --control "$tmp/$n.pri.ctl" | grep -q "^fencing: witness lease on etcd (key t4.*vouched for" ||
		fail "primary status: $("$BIN" status --control "$tmp/$n.pri.ctl" | grep fencing)"
	ok "3. protected: t4/owner '$owner', t4/standby '$standby'"
	pcon2=$(free_port)
	timeout 20 "$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon2 --peer 127.0.0.1:$sport \
		--insecure $W --witness-key t4 2>"$tmp/3b.log"
	rc=$?
	[ $rc = 1 ] && grep -q "t4/owner is held by primary" "$tmp/3b.log" ||
		fail "a second primary for t4 was not refused (exit $rc): $(tail -2 "$tmp/3b.log")"
	ok "3. a second primary for the same key: $(grep -o 'witness: .*' "$tmp/3b.log" | head -1)"
	incr3
	t0=$(date +%s%N)
	kill -9 $pp; wait $pp 2>/dev/null
	wait_log "$tmp/$n.sec.log" "TOOK OVER" 20 || fail "no takeover: $(tail -5 "$tmp/$n.sec.log")"
	t1=$(date +%s%N)
	grep -q "won the witness key" "$tmp/$n.sec.log" || fail "took over without winning the key"
	after_takeover
	owner=$(etcd_get $ETCD_EP t4/owner)
	[[ "$owner" == "secondary "*"pid $sp" ]] || fail "t4/owner after the takeover is '$owner'"
	ok "4. SIGKILL: takeover $(( (t1 - t0) / 1000000 )) ms after the kill (lease 1000 ms), key won by '$owner'; counter kept 3"
	stop_pair
fi

if want 5; then
	start_pair t5 "$W --witness-key t5" "$W --witness-key t5"
	protected
	incr3
	kill -STOP $pp
	wait_log "$tmp/$n.sec.log" "TOOK OVER" 20 || fail "no takeover while the primary is stopped"
	sleep 3
	kill -CONT $pp
	wait_log "$tmp/$n.pri.log" "FENCED" 10 || fail "the old primary did not fence: $(tail -5 "$tmp/$n.pri.log")"
	[ "$(state_of "$tmp/$n.pri.ctl")" = fenced ] || fail "old primary state: $(state_of "$tmp/$n.pri.ctl")"
	after_takeover
	python3 - "$tmp/$n.pri.ev" "$tmp/$n.sec.ev" <<'PY' || fail "releases overlap"
import sys
def events(path):
    out = []
    for line in open(path):
        t, kind = line.split()[:2]
        out.append((int(t), kind))
    return out
pri, sec = events(sys.argv[1]), events(sys.argv[2])
rel = ("release", "out", "replay")
last_old = max((t for t, k in pri if k in rel), default=0)
first_new = min((t for t, k in sec if k in rel), default=None)
fenced = [t for t, k in pri if k == "fenced"]
if first_new is None:
    sys.exit("the new owner released nothing")
if not fenced:
    sys.exit("no fenced event from the old primary")
if any(t > fenced[0] for t, k in pri if k in rel):
    sys.exit("the old primary released after it fenced")
gap_ms = (first_new - last_old) / 1e6
print("   last release of the old owner -> first of the new: %.1f ms (must be > 0)" % gap_ms)
if gap_ms <= 0:
    sys.exit("overlap: the new owner released %.1f ms before the old one's last release" % -gap_ms)
PY
	ok "5. SIGSTOP 3 s: the secondary took over after winning the key; the old primary is fenced and released nothing after"
	stop_pair
fi

if want 6; then
	start_pair t6 "$W --witness-key t6" "$W --witness-key t6"
	protected
	incr3
	kill -9 $ETCD_PID; wait $ETCD_PID 2>/dev/null
	t0=$(python3 -c 'import time; print(time.monotonic_ns())')
	wait_log "$tmp/$n.pri.log" "FENCED" 10 || fail "primary did not fence without etcd"
	python3 - "$tmp/$n.pri.ev" $t0 <<'PY' || fail "released after the deadline"
import sys
t0 = int(sys.argv[2])
ev = [(int(l.split()[0]), l.split()[1]) for l in open(sys.argv[1])]
fenced = [t for t, k in ev if k == "fenced"][0]
late = [t for t, k in ev if k in ("release", "out") and t > fenced]
print("   fenced %.0f ms after etcd died (lease 1000 ms)" % ((fenced - t0) / 1e6))
if late or (fenced - t0) / 1e6 > 1200:
    sys.exit("released after fencing (%d) or fenced late" % len(late))
PY
	sleep 1.5
	grep -q "TOOK OVER" "$tmp/$n.sec.log" && fail "the secondary took over without a witness"
	[ "$(state_of "$tmp/$n.sec.ctl")" = contending ] || fail "secondary state: $(state_of "$tmp/$n.sec.ctl")"
	ok "6. etcd died: the primary fenced at its deadline; the secondary waits to win the key (contending)"
	stop_pair
fi

if want 7; then
	start_etcd "$tmp/etcd7"
	W="--witness etcd:$ETCD_EP --lease-ms 1000"
	start_pair t7 "$W --witness-key t7 --takeover manual" "$W --witness-key t7"
	protected
	incr3
	if out=$("$BIN" takeover --control "$tmp/$n.sec.ctl" 2>&1); then
		fail "a takeover while the primary owns the key succeeded: $out"
	fi
	grep -q "stood down: the witness no longer vouches" "$tmp/$n.sec.log" ||
		fail "the secondary did not stand down: $(tail -3 "$tmp/$n.sec.log")"
	v=$(python3 tests/counter_client.py $pcon incr | tail -1 | cut -d' ' -f1)
	[ "$v" = 4 ] || fail "the primary does not serve on: $v"
	ok "7. manual takeover while the primary owns the key: refused, the standby stood down, the primary serves on"
	stop_pair
	start_pair t7b "$W --witness-key t7b --takeover manual" "$W --witness-key t7b"
	protected
	incr3
	kill -9 $pp; wait $pp 2>/dev/null
	out=$("$BIN" takeover --control "$tmp/$n.sec.ctl") || fail "manual takeover after the kill: $out"
	echo "$out" | grep -q "won the witness key" || fail "takeover said: $out"
	after_takeover
	ok "7. manual takeover after SIGKILL: $(echo "$out" | tail -1)"
	stop_pair
fi

if want 8; then
	start_etcd "$tmp/etcd8"
	W="--witness etcd:$ETCD_EP --lease-ms 1000"
	start_pair t8 "$W --witness-key t8" "$W --witness-key t8"
	protected
	incr3
	out=$("$BIN" migrate --control "$tmp/$n.pri.ctl" --to 127.0.0.1:$sport --insecure 2>&1) ||
		fail "migrate with a witness: $out $(tail -3 "$tmp/$n.pri.log")"
	wait $pp; rc=$?
	[ $rc = 0 ] || fail "the source exited $rc after the hand-over"
	owner=$(etcd_get $ETCD_EP t8/owner)
	[[ "$owner" == "secondary "*"pid $sp" ]] || fail "t8/owner after the migration is '$owner'"
	after_takeover
	ok "8. migration with a witness: the key moved to '$owner' ($(echo "$out" | grep -o 'downtime [0-9.]* ms'))"
	# Re-protection of the new owner with a witness, then its death.
	bport=$(free_port); bcon=$(free_port)
	"$BIN" secondary --listen 127.0.0.1:$bport --console tcp:127.0.0.1:$bcon --insecure \
		--control "$tmp/b.ctl" --failover-timeout-ms 300 $W --witness-key t8 2>"$tmp/b.log" &
	bp=$!
	wait_port $bport || fail "B did not listen"
	"$BIN" protect --control "$tmp/$n.sec.ctl" --peer 127.0.0.1:$bport --insecure --timeout-ms 300 \
		>/dev/null || fail "re-protect with a witness: $(tail -3 "$tmp/$n.sec.log")"
	wait_log "$tmp/$n.sec.log" "the witness vouches for the standby" 10 || fail "B never vouched for"
	v=$(python3 tests/counter_client.py $scon incr | tail -1 | cut -d' ' -f1)
	[ "$v" = 4 ] || fail "the re-protected guest says $v"
	kill -9 $sp; wait $sp 2>/dev/null
	wait_log "$tmp/b.log" "TOOK OVER" 20 || fail "B did not take over: $(tail -3 "$tmp/b.log")"
	grep -q "won the witness key" "$tmp/b.log" || fail "B took over without the key"
	v=$(python3 tests/counter_client.py $bcon get | tail -1 | cut -d' ' -f1)
	[ "$v" = 4 ] || fail "B says $v, want 4"
	ok "8. re-protected with a witness, owner killed: B won the key and goes on at 4"
	kill -9 $bp; wait $bp 2>/dev/null
	stop_pair
fi

if want 9; then
	start_etcd "$tmp/etcd9"
	W="--witness etcd:$ETCD_EP --lease-ms 1000"
	start_pair t9 "$W --witness-key t9" "$W --witness-key t9"
	protected
	incr3
	aport=$(free_port)
	out=$("$BIN" switchover --control "$tmp/$n.pri.ctl" --listen 127.0.0.1:$aport 2>&1) ||
		fail "switchover with a witness: $out $(tail -3 "$tmp/$n.pri.log")"
	owner=$(etcd_get $ETCD_EP t9/owner)
	[[ "$owner" == "secondary "*"pid $sp" ]] || fail "t9/owner after the switchover is '$owner'"
	wait_log "$tmp/$n.sec.log" "the witness vouches for the standby" 20 ||
		fail "the new primary never vouched for the old one: $(tail -3 "$tmp/$n.sec.log")"
	kill -0 $pp 2>/dev/null || fail "the old primary exited instead of becoming the standby"
	v=$(python3 tests/counter_client.py $scon incr | tail -1 | cut -d' ' -f1)
	[ "$v" = 4 ] || fail "the new primary's guest says $v, want 4"
	ok "9. switchover with a witness: the key moved to '$owner', the old primary is its vouched-for standby; counter 4"
	# ...and back: the key returns to the first process.
	bport=$(free_port)
	out=$("$BIN" switchover --control "$tmp/$n.sec.ctl" --listen 127.0.0.1:$bport 2>&1) ||
		fail "switchover back with a witness: $out $(tail -3 "$tmp/$n.sec.log")"
	owner=$(etcd_get $ETCD_EP t9/owner)
	[[ "$owner" == *"pid $pp" ]] || fail "t9/owner after the switch back is '$owner'"
	for _ in $(seq 200); do
		[ "$(grep -c "the witness vouches for the standby" "$tmp/$n.pri.log")" -ge 2 ] && break
		sleep 0.1
	done
	[ "$(grep -c "the witness vouches for the standby" "$tmp/$n.pri.log")" -ge 2 ] ||
		fail "the first process never vouched for its standby again"
	v=$(python3 tests/counter_client.py $pcon incr | tail -1 | cut -d' ' -f1)
	[ "$v" = 5 ] || fail "after the switch back the guest says $v, want 5"
	grep -q "standby built" "$tmp/$n.pri.log" && fail "a resync after a switchover"
	# The owner dies: its standby (the second process) wins the key and goes on at 5.
	sleep 0.3
	kill -9 $pp; wait $pp 2>/dev/null
	wait_log "$tmp/$n.sec.log" "won the witness key" 20 || fail "no takeover through the key: $(tail -3 "$tmp/$n.sec.log")"
	sleep 0.5
	v=$(python3 tests/counter_client.py $scon get | tail -1 | cut -d' ' -f1)
	[ "$v" = 5 ] || fail "after the owner died the standby's guest says $v, want 5"
	ok "9. and back: the key returned to pid $pp; owner killed: the standby won the key and goes on at 5"
	stop_pair
fi

if want 10; then
	start_etcd "$tmp/etcd10"
	W="--witness etcd:$ETCD_EP --lease-ms 1000"
	export UNDERSTUDY_POSTCOPY_VERIFY=1 UNDERSTUDY_POSTCOPY_STALE_ALL=1 UNDERSTUDY_POSTCOPY_BG_DELAY_MS=2000
	start_pair t10 "$W --witness-key t10" "$W --witness-key t10"
	unset UNDERSTUDY_POSTCOPY_VERIFY UNDERSTUDY_POSTCOPY_STALE_ALL UNDERSTUDY_POSTCOPY_BG_DELAY_MS
	protected
	incr3
	"$BIN" migrate --control "$tmp/$n.pri.ctl" --to 127.0.0.1:$sport --insecure --downtime-ms 1 \
		--postcopy-after 2 --no-auto-converge --bandwidth 5 --json >"$tmp/10.json" 2>"$tmp/10.err" &
	mp=$!
	wait_log "$tmp/$n.sec.log" "stale pages made missing" 30 || fail "no post-copy: $(tail -3 "$tmp/$n.sec.log")"
	v=$(python3 tests/counter_client.py $scon incr | tail -1 | cut -d' ' -f1)
	[ "$v" = 4 ] || fail "the destination says $v during post-copy, want 4"
	owner=$(etcd_get $ETCD_EP t10/owner)
	[[ "$owner" == "secondary "*"pid $sp" ]] || fail "t10/owner during post-copy is '$owner'"
	wait $mp || fail "migrate: $(tail -2 "$tmp/10.err"; tail -3 "$tmp/$n.pri.log")"
	wait $pp; rc=$?
	[ $rc = 0 ] || fail "the source exited $rc after post-copy"
	grep -q '"postcopy": *true' "$tmp/10.json" || fail "not a post-copy migration: $(tail -1 "$tmp/10.json")"
	wait_log "$tmp/$n.sec.log" "post-copy verify" 20 || fail "no digest check"
	grep -q "post-copy verify: the RAM at the switch equals" "$tmp/$n.sec.log" ||
		fail "$(grep 'post-copy verify' "$tmp/$n.sec.log")"
	ok "10. post-copy with a witness: the key moved to '$owner', the destination went on at 4 while its pages arrived; RAM at the switch equal"
	stop_pair
fi
