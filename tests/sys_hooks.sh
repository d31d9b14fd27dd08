#!/usr/bin/env bash
# --on-event CMD: the agents run CMD on their events, never waiting for it.
#   1. a recording hook on both sides of a pair: the primary's 'protected'
#      and, after a kill -9 of the primary, the secondary's 'takeover' and
#      'unprotected' carry the right details (event, role, epoch > 0, peer,
#      VM, reason, time); a hook that exits 3 is logged with its last line;
#   2. a hook that hangs (sleep 600) on both sides: the pair still protects,
#      the takeover is not later than with the recording hook (the time from
#      the kill to the console's answer, generous bound), and each hanging
#      hook is killed at --on-event-timeout-ms with its process group, and
#      logged; understudy_hook_runs_total{result="timeout"} counts it;
#   3. a VM under `run` migrated away: 'migrated' with the destination;
#   4. a planned switchover: 'switchover' on both sides with the new roles,
#      and the metrics follow (switchovers_total, role, state);
#   5. hooks end with their agent: a primary's hanging 'protected' hook
#      (timeout far away) is gone within a bound of the primary's SIGTERM,
#      and a survivor's hanging 'takeover' hook within a bound of its
#      SIGINT; the takeover's UNDERSTUDY_PEER is the primary's host, not
#      the port it connected from (also in 1).
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
test_tmp
# In the nested VM (tests/lib.sh nested) QEMU's emulator stalls the agents
# for a second or more: their silence bounds there are 3 s, not 400 ms, so
# that none gives up a live peer before the test's kill, and the waits for
# a step are X times longer. The hanging hook's timeout stays longer than
# the slack, both scaled: a hook the agent waited for would still show.
T=$(nested 400 3000)
X=$(nested 1 4)
HANG_TIMEOUT_MS=$(nested 10000 20000)
SLACK_S=$(nested 5 10)   # how much later the takeover may be with the hanging hook

n=0
start_pair() {   # HOOK [more secondary args]: sets sp pp sport scon pcon smet
	n=$((n + 1))
	local hook=$1; shift
	sport=$(free_port); scon=$(free_port); pcon=$(free_port); smet=$(free_port)
	"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
		--failover-timeout-ms $T --metrics 127.0.0.1:$smet --on-event "$hook sec" "$@" \
		2>"$tmp/$n.sec.log" &
	sp=$!
	wait_port $sport $((20 * X)) || fail "secondary did not listen"
	"$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon --peer 127.0.0.1:$sport \
		--insecure --timeout-ms $T --on-event "$hook pri" "$@" 2>"$tmp/$n.pri.log" &
	pp=$!
	wait_log "$tmp/$n.pri.log" "protected: secondary holds" $((30 * X)) || fail "never protected"
	python3 tests/counter_client.py $pcon incr incr >/dev/null || fail "client of the primary"
}
# Kills the primary; prints the seconds until the secondary's console
# answers with the counter the primary had (2).
failover_s() {
	local t0 v
	t0=$(date +%s.%N)
	kill -9 $pp; wait $pp 2>/dev/null
	for _ in $(seq 1 $((600 * X))); do
		v=$(timeout 5 python3 tests/counter_client.py $scon get 2>/dev/null | tail -1 | cut -d' ' -f1)
		[ "$v" = 2 ] && break
		sleep 0.05
	done
	[ "$v" = 2 ] || fail "the secondary's console never answered 2 (got '$v'): $(tail -5 "$tmp/$n.sec.log")"
	python3 -c "import time; print('%.3f' % (time.time() - $t0))"
}
field() { sed -n "s/^$2=//p" "$1"; }

# 1. A recording hook; it fails (exit 3) for 'unprotected'.
mkdir -p "$tmp/ev"
cat >"$tmp/record.sh" <<SH
#!/bin/sh
env | grep '^UNDERSTUDY_' | sort >"$tmp/ev/\$1.\$UNDERSTUDY_EVENT"
if [ "\$UNDERSTUDY_EVENT" = unprotected ]; then echo 'hook says "no" \\ bye'; exit 3; fi
exit 0
SH
chmod +x "$tmp/record.sh"
start_pair "$tmp/record.sh"
wait_log "$tmp/$n.pri.log" "'protected' hook exited 0" $((10 * X)) || fail "protected hook: $(grep hooks "$tmp/$n.pri.log")"
f=$tmp/ev/pri.protected
[ "$(field "$f" UNDERSTUDY_EVENT)" = protected ] || fail "protected: $(cat "$f")"
[ "$(field "$f" UNDERSTUDY_ROLE)" = primary ] || fail "protected role: $(cat "$f")"
[ "$(field "$f" UNDERSTUDY_PEER)" = 127.0.0.1:$sport ] || fail "protected peer: $(cat "$f")"
[ "$(field "$f" UNDERSTUDY_VM)" = counter ] || fail "protected vm: $(cat "$f")"
[ "$(field "$f" UNDERSTUDY_GUEST)" = counter ] || fail "protected guest: $(cat "$f")"
[ "$(field "$f" UNDERSTUDY_EPOCH)" -ge 1 ] || fail "protected epoch: $(cat "$f")"
base_s=$(failover_s) || { echo "$base_s"; exit 1; }
wait_log "$tmp/$n.sec.log" "'unprotected' hook FAILED" $((10 * X)) || fail "unprotected hook: $(grep hooks "$tmp/$n.sec.log")"
f=$tmp/ev/sec.takeover
[ -f "$f" ] || fail "no takeover event recorded: $(ls "$tmp/ev"); $(grep hooks "$tmp/$n.sec.log")"
[ "$(field "$f" UNDERSTUDY_EVENT)" = takeover ] || fail "takeover: $(cat "$f")"
[ "$(field "$f" UNDERSTUDY_ROLE)" = primary ] || fail "takeover role: $(cat "$f")"
[ "$(field "$f" UNDERSTUDY_EPOCH)" -gt 0 ] || fail "takeover epoch: $(cat "$f")"
[ "$(field "$f" UNDERSTUDY_VM)" = counter ] || fail "takeover vm: $(cat "$f")"
[ "$(field "$f" UNDERSTUDY_PEER)" = 127.0.0.1 ] || fail "takeover peer: $(cat "$f")"
field "$f" UNDERSTUDY_REASON | grep -q "silent" || fail "takeover reason: $(cat "$f")"
field "$f" UNDERSTUDY_TIME | grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]{3}Z$' ||
	fail "takeover time: $(cat "$f")"
[ "$(field "$tmp/ev/sec.unprotected" UNDERSTUDY_EVENT)" = unprotected ] || fail "no unprotected event"
grep -q "'unprotected' hook FAILED after [0-9]* ms: exit 3: hook says \"no\" \\\\ bye" "$tmp/$n.sec.log" ||
	fail "failure not logged with its line: $(grep FAILED "$tmp/$n.sec.log")"
ok "1. recorded: protected (primary, epoch $(field "$tmp/ev/pri.protected" UNDERSTUDY_EPOCH)), takeover (role primary, epoch $(field "$f" UNDERSTUDY_EPOCH), '$(field "$f" UNDERSTUDY_REASON)'), unprotected; the failing hook logged: $(grep -o "hook FAILED.*" "$tmp/$n.sec.log")"
ok "   takeover to console answer with a quick hook: $base_s s"
kill -9 $sp; wait $sp 2>/dev/null

# 2. A hanging hook on both sides.
cat >"$tmp/hang.sh" <<SH
#!/bin/sh
# the process group (the agent's /bin/sh -c, whose child this may be)
awk '{ print \$5 }' /proc/\$\$/stat >"$tmp/ev/hang.\$1.\$UNDERSTUDY_EVENT.pgid"
sleep 600
SH
chmod +x "$tmp/hang.sh"
start_pair "$tmp/hang.sh" --on-event-timeout-ms $HANG_TIMEOUT_MS
# The primary protected and serves with its 'protected' hook hanging; it is killed at the timeout.
wait_log "$tmp/$n.pri.log" "'protected' hook was KILLED" $((HANG_TIMEOUT_MS / 1000 + 10 * X)) || fail "the primary's hanging hook was not killed: $(grep hooks "$tmp/$n.pri.log")"
python3 tests/counter_client.py $pcon get >/dev/null || fail "the primary stopped answering"
hang_s=$(failover_s) || { echo "$hang_s"; exit 1; }
python3 -c "import sys; sys.exit(0 if $hang_s <= $base_s + $SLACK_S else 1)" ||
	fail "takeover with a hanging hook took $hang_s s, with a quick one $base_s s"
wait_log "$tmp/$n.sec.log" "'takeover' hook was KILLED" $((HANG_TIMEOUT_MS / 1000 + 10 * X)) || fail "the secondary's hanging hook was not killed: $(grep hooks "$tmp/$n.sec.log")"
grep -q "'takeover' hook (pid [0-9]*) still runs after $HANG_TIMEOUT_MS ms: SIGTERM" "$tmp/$n.sec.log" ||
	fail "the timeout is not logged: $(grep hooks "$tmp/$n.sec.log")"
for side in pri.protected sec.takeover sec.unprotected; do
	pg=$(cat "$tmp/ev/hang.$side.pgid" 2>/dev/null) || fail "hook $side did not run"
	for _ in $(seq 1 $((100 * X))); do kill -0 -- -"$pg" 2>/dev/null || break; sleep 0.05; done
	kill -0 -- -"$pg" 2>/dev/null && fail "the hanging $side hook (group $pg) still runs"
done
wait_log "$tmp/$n.sec.log" "'unprotected' hook was KILLED" $((HANG_TIMEOUT_MS / 1000 + 10 * X)) || fail "unprotected hook not killed"
# (the secondary, given no name, took the primary's: counter, its guest's)
timeouts=$(curl -s -m 5 "http://127.0.0.1:$smet/metrics" | awk '$1 == "understudy_hook_runs_total{result=\"timeout\",vm=\"counter\"}" { print $2 }')
[ "$timeouts" = 2 ] || fail "hook_runs_total{result=timeout,vm=counter}: '$timeouts', want 2: $(curl -s -m 5 "http://127.0.0.1:$smet/metrics" | grep hook_runs)"
ok "2. hanging hooks: the takeover took $hang_s s (quick hook: $base_s s, bound +$SLACK_S s); each killed at $HANG_TIMEOUT_MS ms with its group, logged, counted ($timeouts on the secondary)"
kill -9 $sp $pp 2>/dev/null; wait 2>/dev/null

# 3. A source under `run` migrated: its 'migrated' hook runs (after the source has exited).
dport=$(free_port); dcon=$(free_port); rcon=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$dport --console tcp:127.0.0.1:$dcon --insecure \
	--failover-timeout-ms $(nested 2000 6000) 2>"$tmp/dst.log" &
dp=$!
wait_port $dport $((20 * X)) || fail "destination did not listen"
"$BIN" run --guest counter --console tcp:127.0.0.1:$rcon --control "$tmp/src.ctl" \
	--on-event "$tmp/record.sh src" 2>"$tmp/src.log" &
rp=$!
wait_port $rcon $((20 * X)) || fail "source did not start: $(tail -3 "$tmp/src.log")"
"$BIN" migrate --timeout-ms $(nested 5000 15000) --control "$tmp/src.ctl" --to 127.0.0.1:$dport --insecure >/dev/null 2>&1 ||
	fail "migrate failed: $(tail -3 "$tmp/src.log")"
wait $rp
f=$tmp/ev/src.migrated
for _ in $(seq 1 $((100 * X))); do [ -s "$f" ] && break; sleep 0.05; done
[ "$(field "$f" UNDERSTUDY_EVENT)" = migrated ] || fail "no migrated event: $(ls "$tmp/ev"); $(grep hooks "$tmp/src.log")"
[ "$(field "$f" UNDERSTUDY_PEER)" = 127.0.0.1:$dport ] || fail "migrated peer: $(cat "$f")"
[ "$(field "$tmp/ev/src.protected" UNDERSTUDY_EVENT)" = protected ] || fail "the migration's engine did not say protected"
ok "3. run -> migrate: 'protected' then 'migrated' (peer $(field "$f" UNDERSTUDY_PEER), epoch $(field "$f" UNDERSTUDY_EPOCH))"
kill $dp; wait $dp 2>/dev/null

# 4. A planned switchover: both sides say 'switchover', each with its new role;
#    understudy_switchovers_total and the roles follow.
a_port=$(free_port); a_con=$(free_port); a_met=$(free_port)
b_port=$(free_port); b_con=$(free_port); b_met=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$b_port --console tcp:127.0.0.1:$b_con --insecure \
	--failover-timeout-ms $(nested 1000 3000) --control "$tmp/b.ctl" --metrics 127.0.0.1:$b_met \
	--on-event "$tmp/record.sh b" 2>"$tmp/b.log" &
bp=$!
wait_port $b_port $((20 * X)) || fail "secondary did not listen"
"$BIN" primary --guest counter --peer 127.0.0.1:$b_port --console tcp:127.0.0.1:$a_con --insecure \
	--timeout-ms $(nested 1000 3000) --control "$tmp/a.ctl" --metrics 127.0.0.1:$a_met \
	--on-event "$tmp/record.sh a" 2>"$tmp/a.log" &
ap=$!
wait_log "$tmp/a.log" "protected: secondary holds" $((30 * X)) || fail "never protected: $(tail -3 "$tmp/a.log")"
"$BIN" switchover --control "$tmp/a.ctl" --listen 127.0.0.1:$a_port >/dev/null 2>"$tmp/sw.err" ||
	fail "switchover: $(cat "$tmp/sw.err"; tail -3 "$tmp/a.log")"
for f in a.switchover b.switchover; do
	for _ in $(seq 1 $((200 * X))); do [ -s "$tmp/ev/$f" ] && break; sleep 0.05; done
	[ -s "$tmp/ev/$f" ] || fail "no $f event: $(ls "$tmp/ev"); $(grep -h hooks "$tmp/a.log" "$tmp/b.log")"
done
[ "$(field "$tmp/ev/a.switchover" UNDERSTUDY_ROLE)" = secondary ] || fail "old primary: $(cat "$tmp/ev/a.switchover")"
[ "$(field "$tmp/ev/b.switchover" UNDERSTUDY_ROLE)" = primary ] || fail "new primary: $(cat "$tmp/ev/b.switchover")"
[ "$(field "$tmp/ev/b.switchover" UNDERSTUDY_EPOCH)" -gt 0 ] || fail "new primary epoch: $(cat "$tmp/ev/b.switchover")"
mval() { curl -s -m 5 "http://127.0.0.1:$1/metrics" | sed -E 's/,vm="[^"]*"\}/}/; s/\{vm="[^"]*"\}//' |
	awk -v k="$2" '$1 == k { print $2 }'; }
for _ in $(seq 1 $((100 * X))); do [ "$(mval $b_met 'understudy_state{state="protected"}')" = 1 ] && break; sleep 0.1; done
[ "$(mval $a_met understudy_switchovers_total)" = 1 ] && [ "$(mval $b_met understudy_switchovers_total)" = 1 ] ||
	fail "switchovers_total: a $(mval $a_met understudy_switchovers_total), b $(mval $b_met understudy_switchovers_total)"
[ "$(mval $a_met 'understudy_role{role="secondary"}')" = 1 ] || fail "the old primary's role: $(curl -s "http://127.0.0.1:$a_met/metrics" | grep '^understudy_role')"
[ "$(mval $b_met 'understudy_role{role="primary"}')" = 1 ] || fail "the new primary's role"
[ "$(mval $b_met 'understudy_state{state="protected"}')" = 1 ] || fail "the new primary is not protected: $(curl -s "http://127.0.0.1:$b_met/metrics" | grep '^understudy_state.* 1$')"
ok "4. switchover: 'switchover' on both sides (old primary: role secondary; new: role primary, epoch $(field "$tmp/ev/b.switchover" UNDERSTUDY_EPOCH)); switchovers_total 1 on both, roles swapped, the new primary protected"
# The standby (the old primary) dies: the new primary says 'unprotected'.
rm -f "$tmp/ev/b.unprotected"
kill -9 $ap; wait $ap 2>/dev/null
f=$tmp/ev/b.unprotected
for _ in $(seq 1 $((200 * X))); do [ -s "$f" ] && break; sleep 0.05; done
[ "$(field "$f" UNDERSTUDY_ROLE)" = primary ] || fail "no unprotected event on the primary: $(ls "$tmp/ev"); $(tail -3 "$tmp/b.log")"
[ -n "$(field "$f" UNDERSTUDY_REASON)" ] || fail "unprotected without a reason: $(cat "$f")"
ok "   the standby killed: the primary said 'unprotected' ($(field "$f" UNDERSTUDY_REASON))"
kill $bp; wait $bp 2>/dev/null

# 5. Hooks end with their agent. The agent gives a hook a second to finish,
#    then SIGTERM, SIGKILL a second later: gone within END_S of the signal.
END_S=$(nested 5 20)
cat >"$tmp/linger.sh" <<SH
#!/bin/sh
env | grep '^UNDERSTUDY_' | sort >"$tmp/ev/linger.\$1.\$UNDERSTUDY_EVENT"
awk '{ print \$5 }' /proc/\$\$/stat >"$tmp/ev/linger.\$1.\$UNDERSTUDY_EVENT.pgid"
sleep 600
SH
chmod +x "$tmp/linger.sh"
# gone AGENT_PID PGID_FILE WHAT: the agent exits and the group is gone within END_S
gone() {
	local pg
	pg=$(cat "$2") || fail "$3: the hook did not run"
	for _ in $(seq 1 $((END_S * 20))); do
		kill -0 "$1" 2>/dev/null || kill -0 -- -"$pg" 2>/dev/null || return 0
		sleep 0.05
	done
	kill -0 "$1" 2>/dev/null && fail "$3: the agent still runs $END_S s after the signal"
	fail "$3: the hook's group $pg still runs $END_S s after its agent ended: $(pgrep -a -g "$pg")"
}
start_pair "$tmp/linger.sh" --on-event-timeout-ms 600000
for _ in $(seq 1 $((100 * X))); do [ -s "$tmp/ev/linger.pri.protected.pgid" ] && break; sleep 0.05; done
kill -0 -- -"$(cat "$tmp/ev/linger.pri.protected.pgid")" || fail "the 'protected' hook is not running"
kill -TERM $pp
gone $pp "$tmp/ev/linger.pri.protected.pgid" "primary SIGTERM"
grep -q "'protected' hook (pid [0-9]*) still runs as the agent ends: SIGTERM" "$tmp/$n.pri.log" ||
	fail "the primary did not say it ended its hook: $(grep hooks "$tmp/$n.pri.log")"
kill -9 $sp 2>/dev/null; wait 2>/dev/null
start_pair "$tmp/linger.sh" --on-event-timeout-ms 600000
kill -9 $pp; wait $pp 2>/dev/null
wait_log "$tmp/$n.sec.log" "TOOK OVER" $((30 * X)) || fail "no takeover: $(tail -5 "$tmp/$n.sec.log")"
for _ in $(seq 1 $((100 * X))); do [ -s "$tmp/ev/linger.sec.takeover.pgid" ] && break; sleep 0.05; done
[ "$(field "$tmp/ev/linger.sec.takeover" UNDERSTUDY_PEER)" = 127.0.0.1 ] ||
	fail "takeover peer: $(cat "$tmp/ev/linger.sec.takeover")"
kill -INT $sp
gone $sp "$tmp/ev/linger.sec.takeover.pgid" "survivor SIGINT"
ok "5. hooks end with their agent: the primary's 'protected' hook after its SIGTERM, the survivor's 'takeover' hook after its SIGINT, each within $END_S s; the takeover's UNDERSTUDY_PEER is 127.0.0.1"
echo "PASS sys_hooks"
