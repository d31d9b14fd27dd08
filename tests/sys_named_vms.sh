#!/usr/bin/env bash
# Named VMs with real agents on one host, none given --control (their
# sockets in a run directory of this test's, UNDERSTUDY_RUN_DIR):
#   1. run --name alpha and run of the counter guest (named counter by
#      default) both start; the run directory is made 0700 with alpha.sock
#      and counter.sock; every log line of alpha says vm=alpha;
#   2. a third run of the counter guest exits 2, naming counter.sock;
#   3. protect --name alpha attaches a secondary: alpha's --on-event hook
#      gets UNDERSTUDY_VM=alpha, UNDERSTUDY_GUEST=counter; status --name
#      alpha --json says name alpha, protected;
#   4. understudy list shows alpha (primary, protected, its peer) and
#      counter (primary, unprotected), and --json the same;
#   5. counter killed -9: list says "not answering" for its socket, and a
#      new run of the counter guest replaces the stale socket and answers;
#   6. the secondary of step 3 was given no name: it takes alpha's from
#      the Hello: its log lines say vm=alpha from then on, status --json
#      says name alpha, its metrics carry vm="alpha"; alpha killed -9: it
#      takes over, its 'takeover' hook and its fence command get
#      UNDERSTUDY_VM=alpha;
#   7. a secondary named beta refuses a primary named gamma (both names in
#      the secondary's log and in the primary's, which exits 1), and waits on.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
tmp=$(mktemp -d)
T=$(nested 500 3000)
W=$(nested 10 60)   # seconds to wait for a step
run=$tmp/run
export UNDERSTUDY_RUN_DIR=$run
FAIL_LOGS="$tmp/alpha.log $tmp/counter.log $tmp/sec.log $tmp/beta.log $tmp/gamma.log"
cleanup() { kill -9 $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
wait_sock() { for _ in $(seq 1 $(($2 * 20))); do [ -S "$1" ] && return 0; sleep 0.05; done; return 1; }

# 1.
mkdir -p "$tmp/ev"
cat >"$tmp/hook.sh" <<SH
#!/bin/sh
env | grep '^UNDERSTUDY_' | sort >"$tmp/ev/\$UNDERSTUDY_EVENT"
SH
chmod +x "$tmp/hook.sh"
acon=$(free_port); ccon=$(free_port)
"$BIN" run --guest counter --name alpha --console tcp:127.0.0.1:$acon --on-event "$tmp/hook.sh" \
	2>"$tmp/alpha.log" &
apid=$!
wait_port $acon $W || fail "alpha did not start: $(tail -3 "$tmp/alpha.log")"
"$BIN" run --guest counter --console tcp:127.0.0.1:$ccon 2>"$tmp/counter.log" &
cpid=$!
wait_port $ccon $W || fail "counter did not start: $(tail -3 "$tmp/counter.log")"
wait_sock "$run/alpha.sock" $W || fail "no $run/alpha.sock: $(ls -la "$run" 2>&1)"
wait_sock "$run/counter.sock" $W || fail "no $run/counter.sock: $(ls -la "$run" 2>&1)"
[ "$(stat -c %a "$run")" = 700 ] || fail "$run is $(stat -c %a "$run"), want 700"
[ "$(python3 tests/counter_client.py $acon incr incr | tail -1 | cut -d' ' -f1)" = 2 ] || fail "alpha's counter"
[ -s "$tmp/alpha.log" ] && ! grep -qv '^understudy\[run\] vm=alpha +' "$tmp/alpha.log" ||
	fail "alpha's log lines: $(grep -v 'vm=alpha' "$tmp/alpha.log" | head -3)"
ok "1. alpha and counter run side by side; $run is 0700 with alpha.sock and counter.sock; alpha's lines say vm=alpha"

# 2.
out=$(timeout $((W * 2)) "$BIN" run --guest counter --console tcp:127.0.0.1:$(free_port) 2>&1 </dev/null); rc=$?
[ $rc = 2 ] || fail "a second VM named counter: exit $rc, want 2: $out"
echo "$out" | grep -qF "$run/counter.sock" || fail "the refusal does not name counter.sock: $out"
kill -0 $cpid || fail "the first counter died"
ok "2. a second VM named counter: exit 2: $out"

# 3. (the secondary, given no name, is checked in 6.)
mkdir -p "$tmp/sev"
sed "s|/ev/|/sev/|" "$tmp/hook.sh" >"$tmp/shook.sh" && chmod +x "$tmp/shook.sh"
sport=$(free_port); scon=$(free_port); smet=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
	--failover-timeout-ms $T --control "$tmp/sec.ctl" --on-event "$tmp/shook.sh" \
	--metrics 127.0.0.1:$smet --fence-cmd "env | grep '^UNDERSTUDY_' | sort >$tmp/fence.env" \
	2>"$tmp/sec.log" &
spid=$!
wait_port $sport $W || fail "the secondary did not listen"
out=$("$BIN" protect --name alpha --peer 127.0.0.1:$sport --insecure --timeout-ms $T 2>&1) ||
	fail "protect --name alpha: $out"
for _ in $(seq 1 $((W * 20))); do [ -s "$tmp/ev/protected" ] && break; sleep 0.05; done
[ -s "$tmp/ev/protected" ] || fail "no protected hook: $(grep hooks "$tmp/alpha.log")"
grep -qx 'UNDERSTUDY_VM=alpha' "$tmp/ev/protected" || fail "hook VM: $(cat "$tmp/ev/protected")"
grep -qx 'UNDERSTUDY_GUEST=counter' "$tmp/ev/protected" || fail "hook guest: $(cat "$tmp/ev/protected")"
j=$("$BIN" status --name alpha --json) || fail "status --name alpha: $j"
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert (d["name"], d["state"]) == ("alpha", "protected"), d' "$j" ||
	fail "status --name alpha: $j"
ok "3. protect --name alpha: the hook has UNDERSTUDY_VM=alpha, UNDERSTUDY_GUEST=counter; status --name alpha: protected"

# 4.
out=$("$BIN" list) || fail "list exited $?: $out"
echo "$out"
[ "$(echo "$out" | wc -l)" = 3 ] || fail "list: want a header and two lines: $out"
echo "$out" | grep -qE "^alpha +primary +protected +[0-9]+ +[0-9.]+ +127\.0\.0\.1:$sport\$" || fail "list alpha: $out"
echo "$out" | grep -qE '^counter +primary +unprotected +' || fail "list counter: $out"
j=$("$BIN" list --json) || fail "list --json: $j"
python3 -c '
import json, sys
rows = json.loads(sys.argv[1])
assert [(r["name"], r["role"], r["state"], r["answering"]) for r in rows] == \
    [("alpha", "primary", "protected", True), ("counter", "primary", "unprotected", True)], rows
' "$j" || fail "list --json: $j"
ok "4. list: alpha protected (peer 127.0.0.1:$sport), counter unprotected; --json the same"

# 5.
kill -9 $cpid; wait $cpid 2>/dev/null
[ -S "$run/counter.sock" ] || fail "the killed agent's socket is gone: nothing stale to test"
out=$("$BIN" list) || fail "list with a stale socket exited $?: $out"
echo "$out" | grep -qE '^counter +- +not answering' || fail "list stale counter: $out"
ccon=$(free_port)
"$BIN" run --guest counter --console tcp:127.0.0.1:$ccon 2>"$tmp/counter.log" &
cpid=$!
wait_port $ccon $W || fail "a new counter did not start over the stale socket: $(tail -3 "$tmp/counter.log")"
for _ in $(seq 1 $((W * 20))); do "$BIN" status --name counter >/dev/null 2>&1 && break; sleep 0.05; done
"$BIN" status --name counter | grep -q "state unprotected" || fail "the new counter does not answer on counter.sock"
ok "5. a killed VM's socket is listed as not answering; a new counter replaced it and answers"

# 6.
j=$("$BIN" status --control "$tmp/sec.ctl" --json) || fail "the secondary's status: $j"
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert (d["name"], d["state"]) == ("alpha", "standby"), d' "$j" ||
	fail "the secondary given no name: status $j"
grep -q "^understudy\[secondary\] vm=alpha .*the primary names the VM 'alpha'" "$tmp/sec.log" &&
	grep -q "^understudy\[secondary\] vm=alpha .*first checkpoint applied" "$tmp/sec.log" ||
	fail "the secondary's log lines do not say vm=alpha: $(grep -v 'vm=alpha' "$tmp/sec.log" | tail -3)"
curl -s -m 5 "http://127.0.0.1:$smet/metrics" | grep -q '^understudy_role{role="secondary",vm="alpha"} 1$' ||
	fail "the secondary's metrics: $(curl -s -m 5 "http://127.0.0.1:$smet/metrics" | grep '^understudy_role')"
kill -9 $apid; wait $apid 2>/dev/null
for _ in $(seq 1 $((W * 20))); do [ -s "$tmp/sev/takeover" ] && break; sleep 0.05; done
[ -s "$tmp/sev/takeover" ] || fail "no takeover hook on the secondary: $(tail -5 "$tmp/sec.log")"
grep -qx 'UNDERSTUDY_VM=alpha' "$tmp/sev/takeover" || fail "takeover hook VM: $(cat "$tmp/sev/takeover")"
grep -qx 'UNDERSTUDY_VM=alpha' "$tmp/fence.env" || fail "fence VM: $(cat "$tmp/fence.env" 2>&1)"
j=$("$BIN" status --control "$tmp/sec.ctl" --json) || fail "the survivor's status: $j"
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["name"] == "alpha", d' "$j" ||
	fail "the survivor's status: $j"
ok "6. the secondary given no name took alpha's: log lines vm=alpha, status name alpha, metrics vm=\"alpha\"; alpha killed: its takeover hook and fence command got UNDERSTUDY_VM=alpha"

# 7.
bport=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$bport --console tcp:127.0.0.1:$(free_port) --insecure \
	--failover-timeout-ms $T --name beta --control "$tmp/beta.ctl" 2>"$tmp/beta.log" &
bpid=$!
wait_port $bport $W || fail "beta did not listen"
timeout $((W * 3)) "$BIN" primary --guest counter --name gamma --console tcp:127.0.0.1:$(free_port) \
	--peer 127.0.0.1:$bport --insecure --timeout-ms $T --control "$tmp/gamma.ctl" 2>"$tmp/gamma.log"
rc=$?
[ $rc = 1 ] || fail "primary gamma against secondary beta: exit $rc, want 1: $(tail -3 "$tmp/gamma.log")"
why="the primary's VM is named 'gamma', this secondary's 'beta'"
grep -qF "refusing primary: $why" "$tmp/beta.log" || fail "beta's log: $(tail -3 "$tmp/beta.log")"
grep -qF "$why" "$tmp/gamma.log" || fail "gamma's log does not say why: $(tail -3 "$tmp/gamma.log")"
kill -0 $bpid || fail "beta ended"
"$BIN" status --control "$tmp/beta.ctl" | grep -q "state waiting" || fail "beta is not waiting"
ok "7. secondary beta refused primary gamma (exit 1): $why"
echo PASS
