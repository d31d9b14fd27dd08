#!/usr/bin/env bash
# The control requests around a switchover, on a real pair (counter guest,
# no witness, no fence command):
#   1. an unknown control request gets an error from the one-step primary
#      and from the secondary, never the status with success;
#   2. "switchover listen=127.0.0.1:0" is refused as --listen 127.0.0.1:0 is
#      (exit 2, drill switchover too), on the control socket too, and the
#      pair stays protected;
#   3. understudy switchover returns once the new primary is protected; the
#      old primary's control socket stays open across it (the same file) and
#      answers as a standby;
#   4. a switchover whose new primary cannot reach this side's standby (its
#      port is taken by another process): the command does not say success
#      (exit 3, the new primary runs unprotected), and `takeover` on the side
#      that handed over is refused (its successor runs the guest: two live
#      copies otherwise) until a person says the successor is off
#      (--fenced-by-operator), then it resumes from the switch epoch.
# Every check runs, and the failures are listed together at the end.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
test_tmp
# The pair's silence bounds: 1 s on a host's KVM, 3 s in the nested VM
# (tests/lib.sh nested), where QEMU's emulator stalls an agent for a second
# or more and a short bound gives up a live peer; waits X times longer there.
T=$(nested 1000 3000)
X=$(nested 1 4)
bad=()
check() {   # MESSAGE COMMAND...: records MESSAGE when COMMAND fails
	local m=$1
	shift
	"$@" || { bad+=("$m"); echo "not ok - $m"; }
}
field() {   # KEY CONTROL: a field of the agent's status json ("" if none)
	"$BIN" status --control "$2" --json 2>/dev/null |
		python3 -c 'import json,sys
try: print(json.load(sys.stdin).get(sys.argv[1], ""))
except ValueError: print("")' "$1"
}
count() { python3 tests/counter_client.py "$@" | tail -1 | cut -d' ' -f1; }
starts() { case $1 in "$2"*) return 0;; esac; return 1; }
state_is() {   # CONTROL STATE [SECONDS]: the agent reaches STATE in time (X times that)
	for _ in $(seq $((${3:-1} * 10 * X))); do [ "$(field state "$1")" = "$2" ] && return 0; sleep 0.1; done
	return 1
}

a_port=$(free_port); a_con=$(free_port); b_port=$(free_port); b_con=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$b_port --console tcp:127.0.0.1:$b_con --insecure \
	--failover-timeout-ms $T --control "$tmp/b.ctl" 2>"$tmp/b.log" &
bpid=$!
wait_port $b_port $((10 * X)) || fail "secondary did not listen"
"$BIN" primary --guest counter --peer 127.0.0.1:$b_port --console tcp:127.0.0.1:$a_con --insecure \
	--timeout-ms $T --control "$tmp/a.ctl" 2>"$tmp/a.log" &
apid=$!
wait_log "$tmp/a.log" "protected: secondary holds" 60 || fail "never protected: $(tail -3 "$tmp/a.log")"
[ "$(count $a_con incr incr)" = 2 ] || fail "counter on the primary"

# 1. Unknown requests
r=$(ctl "$tmp/a.ctl" "bogus")
check "1. the primary answered 'bogus' with: $(echo "$r" | head -1)" starts "$r" "error unknown request 'bogus'"
r=$(ctl "$tmp/b.ctl" "bogus")
check "1. the secondary answered 'bogus' with: $(echo "$r" | head -1)" starts "$r" "error unknown request 'bogus'"
check "1. status still answers" state_is "$tmp/a.ctl" protected
ok "1. unknown requests: $(ctl "$tmp/a.ctl" "bogus" | head -1)"

# 2. listen=...:0
"$BIN" switchover --control "$tmp/a.ctl" --listen 127.0.0.1:0 >/dev/null 2>"$tmp/sw0.err"
rc=$?
check "2. switchover --listen 127.0.0.1:0: exit $rc, want 2" [ $rc = 2 ]
"$BIN" drill switchover --control "$tmp/a.ctl" --listen 127.0.0.1:0 >/dev/null 2>&1
rc=$?
check "2. drill switchover --listen 127.0.0.1:0: exit $rc, want 2" [ $rc = 2 ]
r=$(ctl "$tmp/a.ctl" "switchover listen=127.0.0.1:0")
check "2. 'switchover listen=127.0.0.1:0' answered: $(echo "$r" | head -1)" starts "$r" "error"
check "2. the pair is not protected any more after listen=127.0.0.1:0" state_is "$tmp/a.ctl" protected 2
check "2. the secondary is not a standby after listen=127.0.0.1:0" state_is "$tmp/b.ctl" standby 2
ok "2. listen port 0: $(cat "$tmp/sw0.err" | head -1); control socket: $(echo "$r" | head -1)"

# 3. A switchover that protects: the new primary is protected when it returns.
sock=$(stat -c '%i %z' "$tmp/a.ctl")
out=$("$BIN" switchover --control "$tmp/a.ctl" --listen 127.0.0.1:$a_port 2>&1)
rc=$?
[ $rc = 0 ] || fail "3. switchover: exit $rc: $out; $(tail -3 "$tmp/b.log")"
check "3. the old primary's control socket was opened again at the switchover" \
	[ "$(stat -c '%i %z' "$tmp/a.ctl")" = "$sock" ]
r=$(ctl "$tmp/a.ctl" "bogus")
check "3. the old primary, now a standby, answered 'bogus' with: $(echo "$r" | head -1)" \
	starts "$r" "error unknown request 'bogus' (this agent knows: status, takeover, switchback"
# (its ACK may still be on the way when the command returns: a second at most)
check "3. the new primary is $(field state "$tmp/b.ctl") when switchover returns" \
	state_is "$tmp/b.ctl" protected 1
[ "$(count $b_con incr)" = 3 ] || fail "3. counter on the new primary"
ok "3. $out"

# 4. The new primary cannot reach the standby: B hands over to A, but B's
#    listen port is held by another process.
python3 -c 'import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(64); print(s.getsockname()[1], flush=True)
time.sleep(600)' >"$tmp/taken" &
for _ in $(seq $((50 * X))); do [ -s "$tmp/taken" ] && break; sleep 0.1; done
taken=$(cat "$tmp/taken")
out=$("$BIN" switchover --control "$tmp/b.ctl" --listen 127.0.0.1:$taken --timeout-ms 8000 2>&1)
rc=$?
check "4. switchover to an unreachable standby: exit $rc ($out), want 3" [ $rc = 3 ]
# (it gives the standby up at its handshake deadline and runs on unprotected)
state_is "$tmp/a.ctl" unprotected 30 || fail "4. the new primary is $(field state "$tmp/a.ctl"), want unprotected"
[ "$(count $a_con get)" = 3 ] || fail "4. counter on the new primary (unprotected)"
out=$("$BIN" takeover --control "$tmp/b.ctl" 2>&1)
rc=$?
check "4. takeover on the side that handed over: exit $rc ($out), want 1" [ $rc = 1 ]
check "4. the refusal does not name --fenced-by-operator: $out" grep -q -- "--fenced-by-operator" <<<"$out"
check "4. the side that handed over runs the guest after takeover: $(field state "$tmp/b.ctl")" \
	state_is "$tmp/b.ctl" standby 1
ok "4. switched over to a new primary that cannot be protected: exit 3; takeover refused: $(echo "$out" | head -1)"
# The operator powers the successor off and resumes the standby.
kill -9 $apid; wait $apid 2>/dev/null
out=$("$BIN" takeover --control "$tmp/b.ctl" --fenced-by-operator 2>&1)
rc=$?
check "4. takeover --fenced-by-operator: exit $rc ($out)" [ $rc = 0 ]
check "4. counter after --fenced-by-operator: $(count $b_con get), want 3" [ "$(count $b_con get)" = 3 ]
ok "4. after the successor was killed: takeover --fenced-by-operator resumed the standby ($out)"

[ ${#bad[@]} = 0 ] || fail "${#bad[@]} checks failed: $(printf '%s; ' "${bad[@]}")"
ok "switchover guards: all checks held"
