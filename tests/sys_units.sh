#!/usr/bin/env bash
# The systemd units (contrib/systemd/) and the readiness the agents report.
# 1. systemd-analyze verify, offline, of each unit with its ExecStart
#    rewritten to the built binary (verify needs it to exist): any complaint
#    fails; a broken copy must fail (verify really checks here); the
#    exposure score of `systemd-analyze security` stays at most 3.0. The
#    units are not started by systemd (that needs PID 1 to be systemd, and
#    is not done even then): a SKIP line says so.
# 2. sd_notify, with a datagram listener as NOTIFY_SOCKET for a real pair
#    and `run`, each started with its unit's ExecStart command line and a
#    configuration file:
#    the secondary says READY=1 only once its standby is complete (after the
#    primary captured epoch 1), the primary only once protected (after ACK 1,
#    from its event log on the same clock); STATUS= follows the states; a
#    primary that was replaced exits 3 (REPL_EXIT_REPLACED, which the units'
#    RestartPreventExitStatus= names); STOPPING=1 at the end; `run` is ready
#    once the VM runs; a switchover is no stop: the old primary goes on as
#    the standby without STOPPING=1 (systemd would kill it), the new one
#    says it is protected.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
test_tmp
# The pairs' silence bounds: 300 ms and 1 s on a host's KVM, 3 s in the
# nested VM (tests/lib.sh nested), where QEMU's emulator stalls an agent
# for a second or more and a short bound gives up a live peer; waits X
# times longer there.
T=$(nested 300 3000)
X=$(nested 1 4)

# ---- 1. verify --------------------------------------------------------------------
command -v systemd-analyze >/dev/null || { echo "SKIP: systemd-analyze not installed"; exit 77; }
[ -x "$BIN" ] || fail "no binary at $BIN (make first)"
units=(contrib/systemd/understudy-primary@.service contrib/systemd/understudy-secondary@.service
       contrib/systemd/understudy-run@.service)
mkdir -p "$tmp/units" "$tmp/man/man8"
for u in "${units[@]}"; do
	[ -f "$u" ] || fail "missing $u"
	grep -q '^ExecStart=/usr/bin/understudy ' "$u" || fail "$u: ExecStart is not /usr/bin/understudy ..."
	sed "s|^ExecStart=/usr/bin/understudy |ExecStart=$BIN |" "$u" >"$tmp/units/$(basename "$u")"
done
# Documentation=man:understudy(8) is checked (verify runs man) when the page
# is in the tree; MANPATH points man at it.
man_opt=--man=no
if [ -f man/understudy.8 ] && command -v man >/dev/null; then
	cp man/understudy.8 "$tmp/man/man8/"
	man_opt=--man=yes
fi
out=$(cd "$tmp/units" && MANPATH=$tmp/man systemd-analyze verify $man_opt ./*.service 2>&1); rc=$?
[ $rc = 0 ] && [ -z "$out" ] || fail "systemd-analyze verify: exit $rc: $out"
[ $man_opt = --man=yes ] ||
	echo "SKIP: man/understudy.8 not in this tree: Documentation=man:understudy(8) not checked"
# A unit with a mistake must fail the same check (verify is not a no-op here).
sed 's/^Restart=on-failure/Restart=sometimes/' "$tmp/units/understudy-primary@.service" \
	>"$tmp/understudy-broken@.service"
bad=$(cd "$tmp" && systemd-analyze verify --man=no ./understudy-broken@.service 2>&1)
[ -n "$bad" ] || fail "verify did not notice Restart=sometimes"
# Hardening does not erode: systemd's exposure score (0 best, 10 worst) of
# each unit stays at most 3.0 ("OK"; the units are at 2.5-2.6 as written).
scores=""
for u in "${units[@]}"; do
	n=$(basename "$u")
	out=$(cd "$tmp/units" && systemd-analyze security --offline=true --threshold=30 --no-pager "./$n" 2>&1) ||
		fail "$n: exposure above 3.0: $(echo "$out" | tail -1)"
	scores="$scores ${n%@.service}=$(echo "$out" | sed -n 's/.*exposure level for .*: \([0-9.]*\) .*/\1/p')"
done
ok "systemd-analyze security --offline: exposure$scores (threshold 3.0)"
pid1=$(ps -p 1 -o comm= 2>/dev/null)
ok "systemd-analyze verify (offline, $(systemd-analyze --version | head -1 | cut -d' ' -f1-2)," \
   "ExecStart rewritten to $BIN, man check: ${man_opt#--man=}): ${#units[@]} units clean;" \
   "a broken copy is caught"
if [ "$pid1" = systemd ]; then
	echo "SKIP: PID 1 is systemd, but starting the units here is left to a deployment test"
else
	echo "SKIP: PID 1 is '$pid1', not systemd: the units were verified, not started"
fi

# The restart policy matches the agent's exit statuses.
replaced=$(sed -n 's/^#define REPL_EXIT_REPLACED \([0-9]*\).*/\1/p' primary/primary.h)
[ -n "$replaced" ] || fail "REPL_EXIT_REPLACED not found"
for u in primary run; do
	grep -Eq "^RestartPreventExitStatus=.*\\b$replaced\\b" contrib/systemd/understudy-$u@.service ||
		fail "understudy-$u@: RestartPreventExitStatus= lacks $replaced (replaced)"
	grep -q '^Restart=on-failure' contrib/systemd/understudy-$u@.service || fail "understudy-$u@: Restart="
done
grep -q '^Restart=always' contrib/systemd/understudy-secondary@.service || fail "secondary: Restart="
ok "restart policy: a replaced primary (exit $replaced) is not restarted, a secondary always is"

# ---- 2. readiness -----------------------------------------------------------------
need_kvm
# One listener for the three sockets: "<name> <CLOCK_MONOTONIC ns> <fields|...>"
# per datagram (the clock of the agents' UNDERSTUDY_EVENT_LOG).
python3 - "$tmp" <<'PY' >"$tmp/listener.out" 2>&1 &
import os, select, socket, sys, time
tmp = sys.argv[1]
socks = {}
for name in ("pri", "sec", "run", "swa", "swb"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(os.path.join(tmp, name + ".sock"))
    socks[s] = name
open(os.path.join(tmp, "listening"), "w").close()
with open(os.path.join(tmp, "notify.log"), "a", buffering=1) as log:
    while True:
        for s in select.select(list(socks), [], [])[0]:
            data = s.recv(4096).decode(errors="replace")
            log.write("%s %d %s\n" % (socks[s], time.monotonic_ns(), data.replace("\n", "|")))
PY
for _ in $(seq $((300 * X))); do [ -e "$tmp/listening" ] && break; sleep 0.05; done
[ -e "$tmp/listening" ] || fail "notify listener: $(cat "$tmp/listener.out")"
# notes NAME: what NAME sent, one datagram a line
notes() { grep "^$1 " "$tmp/notify.log" 2>/dev/null; }
# first_ns NAME PATTERN: when NAME first sent a datagram matching PATTERN
first_ns() { notes "$1" | grep -m1 -- "$2" | cut -d' ' -f2; }

# The pair and `run` start with the units' own ExecStart command lines, the
# configuration file in a temporary place instead of /etc/understudy/%i.conf.
unit_cmd() {   # ROLE CONF
	sed -n "s|^ExecStart=/usr/bin/understudy |$BIN |p" "contrib/systemd/understudy-$1@.service" |
		sed "s|/etc/understudy/%i.conf|$2|"
}
sport=$(free_port); scon=$(free_port); pcon=$(free_port)
printf 'listen = 127.0.0.1:%s\nconsole = tcp:127.0.0.1:%s\ninsecure = true\nfailover-timeout-ms = %s\n' \
	$sport $scon $T >"$tmp/sec.conf"
sec_cmd=$(unit_cmd secondary "$tmp/sec.conf")
NOTIFY_SOCKET=$tmp/sec.sock $sec_cmd 2>"$tmp/sec.log" &
sp=$!
wait_port $sport $((20 * X)) || fail "secondary did not listen"
sleep 0.5
notes sec | grep -q "STATUS=waiting for a primary on 127.0.0.1:$sport" ||
	fail "secondary: no waiting STATUS: $(notes sec)"
notes sec | grep -q READY=1 && fail "secondary READY before any primary: $(notes sec)"
ok "secondary started as its unit does ($(unit_cmd secondary CONF | sed "s|$BIN|understudy|")):" \
   "STATUS=waiting for a primary, no READY=1 yet"

printf 'guest = counter\nconsole = tcp:127.0.0.1:%s\npeer = 127.0.0.1:%s\ninsecure = true\ntimeout-ms = %s\n' \
	$pcon $sport $T >"$tmp/pri.conf"
pri_cmd=$(unit_cmd primary "$tmp/pri.conf")
NOTIFY_SOCKET=$tmp/pri.sock UNDERSTUDY_EVENT_LOG=$tmp/pri.events $pri_cmd \
	2>"$tmp/pri.log" &
pp=$!
wait_log "$tmp/pri.log" "protected: secondary holds" $((30 * X)) || fail "never protected"
for _ in $(seq $((300 * X))); do
	notes pri | grep -q READY=1 && notes sec | grep -q READY=1 && break
	sleep 0.05
done
pri_ready=$(first_ns pri READY=1); sec_ready=$(first_ns sec READY=1)
[ -n "$pri_ready" ] || fail "primary: no READY=1 once protected: $(notes pri)"
[ -n "$sec_ready" ] || fail "secondary: no READY=1 once its standby was complete: $(notes sec)"
capture1=$(awk '$2 == "capture" && $3 == 1 { print $1; exit }' "$tmp/pri.events")
ack1=$(awk '$2 == "ack" && $3 == 1 { print $1; exit }' "$tmp/pri.events")
[ -n "$capture1" ] && [ -n "$ack1" ] || fail "no capture/ack of epoch 1 in the event log"
[ "$sec_ready" -gt "$capture1" ] ||
	fail "secondary READY=1 $(( (capture1 - sec_ready) / 1000 )) us before epoch 1 was even captured"
[ "$pri_ready" -ge "$ack1" ] ||
	fail "primary READY=1 $(( (ack1 - pri_ready) / 1000 )) us before ACK 1"
sync_ns=$(first_ns pri "STATUS=initial sync")
[ -n "$sync_ns" ] && [ "$sync_ns" -lt "$pri_ready" ] || fail "primary: no initial sync STATUS before READY: $(notes pri)"
notes sec | grep -m1 -B100 READY=1 | grep -q "STATUS=syncing a standby" ||
	fail "secondary: no syncing STATUS before READY: $(notes sec)"
notes pri | grep READY=1 | grep -q "STATUS=protected by 127.0.0.1:$sport" || fail "primary READY STATUS: $(notes pri)"
ok "READY=1: secondary $(( (sec_ready - capture1) / 1000 )) us after capture 1 (standby complete)," \
   "primary $(( (pri_ready - ack1) / 1000 )) us after ACK 1 (protected)"

# The secondary takes over from a primary stopped past its timeout; the
# primary, resumed, reads that it was replaced and exits 3.
out=$(python3 tests/counter_client.py $pcon incr incr) || fail "client of the primary"
kill -STOP $pp
wait_log "$tmp/sec.log" "TOOK OVER" $((20 * X)) || { kill -CONT $pp; fail "no takeover: $(tail -3 "$tmp/sec.log")"; }
kill -CONT $pp
wait $pp; rc=$?
[ "$rc" = "$replaced" ] || fail "a replaced primary exited $rc, want $replaced: $(tail -3 "$tmp/pri.log")"
notes pri | grep -q "STOPPING=1|STATUS=stopping (exit status $replaced)" || fail "primary STOPPING: $(notes pri)"
for _ in $(seq $((300 * X))); do notes sec | grep -q "STATUS=TOOK OVER" && break; sleep 0.05; done
notes sec | grep -q "STATUS=TOOK OVER: runs the guest from epoch [1-9]" || fail "secondary STATUS: $(notes sec)"
kill -TERM $sp
wait $sp
notes sec | grep -q "STOPPING=1" || fail "secondary: no STOPPING=1: $(notes sec)"
ok "replaced primary: exit $replaced, STOPPING=1; secondary: STATUS=TOOK OVER, STOPPING=1 on SIGTERM"

rcon=$(free_port)
printf 'guest = counter\nconsole = tcp:127.0.0.1:%s\n' $rcon >"$tmp/run.conf"
run_cmd=$(unit_cmd run "$tmp/run.conf")
NOTIFY_SOCKET=$tmp/run.sock $run_cmd 2>"$tmp/run.log" &
rp=$!
wait_port $rcon $((20 * X)) || fail "run: no console: $(tail -3 "$tmp/run.log")"
for _ in $(seq $((300 * X))); do notes run | grep -q READY=1 && break; sleep 0.05; done
notes run | grep -q "READY=1|STATUS=the VM runs" || fail "run: no READY=1: $(notes run)"
kill -TERM $rp
wait $rp; rc=$?
[ $rc = 0 ] || fail "run exited $rc on SIGTERM"
notes run | grep -q "STOPPING=1" || fail "run: no STOPPING=1: $(notes run)"
ok "run: READY=1 once the VM runs, STOPPING=1 on SIGTERM"

a_port=$(free_port); a_con=$(free_port); b_port=$(free_port); b_con=$(free_port)
NOTIFY_SOCKET=$tmp/swb.sock "$BIN" secondary --listen 127.0.0.1:$b_port --console tcp:127.0.0.1:$b_con \
	--insecure --failover-timeout-ms $(nested 1000 3000) --control "$tmp/b.ctl" 2>"$tmp/b.log" &
bp=$!
wait_port $b_port $((20 * X)) || fail "secondary b did not listen: $(tail -3 "$tmp/b.log")"
NOTIFY_SOCKET=$tmp/swa.sock "$BIN" primary --guest counter --console tcp:127.0.0.1:$a_con \
	--peer 127.0.0.1:$b_port --insecure --timeout-ms $(nested 1000 3000) --control "$tmp/a.ctl" 2>"$tmp/a.log" &
ap=$!
wait_log "$tmp/a.log" "protected: secondary holds" $((30 * X)) || fail "a never protected: $(tail -3 "$tmp/a.log")"
out=$("$BIN" switchover --control "$tmp/a.ctl" --listen 127.0.0.1:$a_port 2>&1) || fail "switchover: $out"
for _ in $(seq $((300 * X))); do notes swb | grep -q "STATUS=protected by 127.0.0.1:$a_port" && break; sleep 0.05; done
notes swb | grep -q "STATUS=protected by 127.0.0.1:$a_port" || fail "new primary b: no protected STATUS: $(notes swb)"
sleep 0.5
kill -0 $ap 2>/dev/null || fail "the old primary exited after the switchover"
notes swa | grep -q STOPPING=1 && fail "the old primary said STOPPING=1 at the switchover: $(notes swa)"
notes swa | tail -1 | grep -q "STATUS=waiting for a primary on 127.0.0.1:$a_port" ||
	fail "old primary a: last STATUS is not its standby's: $(notes swa)"
kill -TERM $ap $bp
wait $ap $bp
notes swa | grep -q STOPPING=1 || fail "old primary a: no STOPPING=1 when it did stop: $(notes swa)"
ok "switchover: no STOPPING=1 from the old primary (a standby now: STATUS=waiting for a primary)," \
   "the new one STATUS=protected; STOPPING=1 on SIGTERM"
echo "PASS"
