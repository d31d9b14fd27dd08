#!/usr/bin/env bash
# understudy switchover: a planned role swap of a protected pair with
# nothing lost and no resync (the consistency oracle is the counter guest:
# every reply is the count of increments acknowledged before it, across
# every swap).
#   1. bad usage exits 2; a VM that is not protected refuses (exit 1) and runs on;
#   2. ten switchovers back and forth under a client (TLS, certificates with
#      both roles): each new primary is protected at once and, from the
#      switch on, sends a small fraction of the guest's RAM (no resync);
#      the downtime of each is reported;
#   3. after the swaps, the current primary is killed -9: the old primary
#      (now its standby) takes over and the counter holds.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_host_kvm "a bound on the bytes resent while the guest dirties its memory, which a slow copy loop cannot meet"
test_tmp
field() {   # KEY JSON: the value, or nothing when JSON is not (yet) a status
	python3 -c '
import json, sys
try:
    print(json.loads(sys.argv[1]).get(sys.argv[2], ""))
except ValueError:
    print("")' "$2" "$1"
}
status_json() { "$BIN" status --control "$1" --json 2>/dev/null || "$BIN" status --control "$1" json 2>/dev/null; }
count() {   # PORT REQ...: the counter after the requests
	python3 tests/counter_client.py "$@" | tail -1 | cut -d' ' -f1
}

# 1. usage and refusals
"$BIN" switchover --control "$tmp/x.ctl" >/dev/null 2>&1; [ $? = 2 ] || fail "no --listen: want exit 2"
"$BIN" switchover --listen 127.0.0.1:1 >/dev/null 2>&1; [ $? = 2 ] || fail "no --control: want exit 2"
rcon=$(free_port)
"$BIN" run --guest counter --console tcp:127.0.0.1:$rcon --control "$tmp/run.ctl" 2>"$tmp/run.log" &
rpid=$!
wait_port $rcon || fail "run did not start"
out=$("$BIN" switchover --control "$tmp/run.ctl" --listen 127.0.0.1:$(free_port) 2>&1)
rc=$?
[ $rc = 1 ] || fail "switchover of an unprotected VM: exit $rc ($out)"
[ "$(count $rcon incr incr)" = 2 ] || fail "the unprotected VM did not run on"
kill $rpid; wait $rpid 2>/dev/null
ok "1. bad usage exits 2; an unprotected VM refuses ($(echo "$out" | head -1 | cut -c1-70)) and runs on"

# 2. ten swaps under a client
bash tests/mkcerts.sh "$tmp/certs" >/dev/null || fail "mkcerts"
tls() { echo "--tls-cert $tmp/certs/$1.pem --tls-key $tmp/certs/$1.key --tls-ca $tmp/certs/ca.pem"; }
a_port=$(free_port); a_con=$(free_port); b_port=$(free_port); b_con=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$b_port --console tcp:127.0.0.1:$b_con $(tls hostb) \
	--failover-timeout-ms 1000 --control "$tmp/b.ctl" 2>"$tmp/b.log" &
bpid=$!
wait_port $b_port || fail "secondary did not listen"
"$BIN" primary --guest counter --mem 64M --peer 127.0.0.1:$b_port --console tcp:127.0.0.1:$a_con \
	$(tls hosta) --timeout-ms 1000 --control "$tmp/a.ctl" 2>"$tmp/a.log" &
apid=$!
for i in $(seq 100); do [ "$(field state "$(status_json "$tmp/a.ctl")")" = protected ] && break; sleep 0.1; done
[ "$(field state "$(status_json "$tmp/a.ctl")")" = protected ] || fail "the pair did not protect"

n=0
[ "$(count $a_con incr incr incr)" = 3 ] || fail "counter before the swaps"
n=3
cur=a; other=b
ram=$((64 << 20))
downs=""
for round in $(seq 10); do
	eval "cur_ctl=$tmp/$cur.ctl other_ctl=$tmp/$other.ctl other_con=\$${other}_con cur_port=\$${cur}_port"
	out=$("$BIN" switchover --control "$cur_ctl" --listen 127.0.0.1:$cur_port --json 2>&1) ||
		fail "round $round: switchover: $out"
	[ "$(field role "$out")" = secondary ] && [ "$(field state "$out")" = standby ] ||
		fail "round $round: the old primary is not a standby: $out"
	downs="$downs $(field switch_downtime_ms "$out")"
	# The new primary is protected again, without a resync.
	for i in $(seq 100); do
		st=$(status_json "$other_ctl")
		[ "$(field state "$st")" = protected ] && [ "$(field acked "$st")" -gt 0 ] && break
		sleep 0.05
	done
	[ "$(field role "$st")" = primary ] && [ "$(field state "$st")" = protected ] ||
		fail "round $round: the new primary is not protected: $st"
	# Every increment acknowledged before the swap is there, exactly once.
	got=$(count $other_con incr incr get | tail -1)
	n=$((n + 2))
	[ "$got" = $n ] || fail "round $round: counter $got after the swap, want $n"
	sleep 0.3
	st=$(status_json "$other_ctl")
	sent=$(field bytes_sent "$st")
	[ -n "$sent" ] && [ "$sent" -lt $((ram / 8)) ] ||
		fail "round $round: the new primary sent $sent bytes (a resync would be ~$ram)"
	tmpv=$cur; cur=$other; other=$tmpv
done
ok "2. ten switchovers under a client: counter $n, nothing lost; downtime ms:$downs; the new primary sends < 1/8 of RAM each time"

# 3. the current primary dies: its standby (a former primary) takes over.
eval "cur_pid=\$${cur}pid other_con=\$${other}_con"
kill -9 $cur_pid
for i in $(seq 100); do
	[ "$(field state "$(status_json "$tmp/$other.ctl")")" = unprotected ] && break
	sleep 0.1
done
st=$(status_json "$tmp/$other.ctl")
[ "$(field role "$st")" = primary ] && [ "$(field state "$st")" = unprotected ] ||
	fail "no takeover after the kill: $st"
got=$(count $other_con get)
[ "$got" = $n ] || fail "counter $got after the takeover, want $n"
ok "3. kill -9 of the primary after the swaps: its standby took over (role primary, unprotected) at counter $got"
