#!/usr/bin/env bash
# --takeover manual: the standby never takes over by itself (a cluster
# manager decides, e.g. Pacemaker's promote through ocf/understudy); the
# control request "takeover" (understudy takeover) makes it resume the guest
# from its last complete checkpoint, and is refused while it holds none.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
test_tmp
# The agents' silence bounds: 300 ms on a host's KVM, 3 s in the nested VM
# (tests/lib.sh nested), where QEMU's emulator stalls an agent for a second
# or more and a short bound gives up a live peer; waits X times longer there.
T=$(nested 300 3000)
X=$(nested 1 4)

"$BIN" secondary --listen 127.0.0.1:1 --console tcp:127.0.0.1:2 --insecure --takeover maybe \
	2>"$tmp/bad.log"
[ $? = 2 ] || fail "--takeover maybe was accepted"
grep -q "takeover auto|manual" "$tmp/bad.log" || fail "no clear error: $(cat "$tmp/bad.log")"
ok "--takeover maybe refused (exit 2)"

sport=$(free_port); scon=$(free_port); pcon=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
	--failover-timeout-ms $T --takeover manual --control "$tmp/sec.ctl" 2>"$tmp/sec.log" &
sp=$!
wait_port $sport $((10 * X)) || fail "secondary did not listen"
if out=$("$BIN" takeover --control "$tmp/sec.ctl" 2>&1); then
	fail "takeover without a checkpoint was accepted: $out"
fi
echo "$out" | grep -q "holds no complete checkpoint" || fail "refusal does not say why: $out"
ok "takeover refused without a complete checkpoint: $out"

"$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon --peer 127.0.0.1:$sport \
	--insecure --timeout-ms $T 2>"$tmp/pri.log" &
pp=$!
wait_log "$tmp/pri.log" "protected: secondary holds" $((20 * X)) || fail "never protected"
out=$(python3 tests/counter_client.py $pcon incr incr incr) || fail "client of the primary"
[ "$(echo "$out" | tail -1 | cut -d' ' -f1)" = 3 ] || fail "primary replies: $out"
kill -9 $pp; wait $pp 2>/dev/null
wait_log "$tmp/sec.log" "takeover is manual" $((10 * X)) || fail "the silence was not noticed"
sleep $X   # an automatic takeover would have come by now
grep -q "TOOK OVER" "$tmp/sec.log" && fail "a manual standby took over by itself"
"$BIN" status --control "$tmp/sec.ctl" | grep -q "^state standby$" || fail "not standby after the primary died"
ok "primary killed: the manual standby waits (no takeover of its own after $X s past its timeout)"

out=$("$BIN" takeover --control "$tmp/sec.ctl") || fail "takeover refused: $out"
echo "$out" | grep -q "^ok took over at epoch [1-9]" || fail "takeover reply: $out"
wait_log "$tmp/sec.log" "TOOK OVER" $((10 * X)) || fail "no takeover in the log"
"$BIN" status --control "$tmp/sec.ctl" | grep -q "^state unprotected$" || fail "not running the guest (unprotected) after takeover"
out2=$("$BIN" takeover --control "$tmp/sec.ctl") || fail "a second takeover request failed: $out2"
echo "$out2" | grep -q "already active" || fail "second takeover reply: $out2"
python3 - $scon <<'PY' || fail "console after the takeover"
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
s.sendall(b"get\n")
buf, seen, end = b"", [], time.time() + 20
while time.time() < end and 3 not in seen[-1:]:
    data = s.recv(4096)
    if not data:
        break
    buf += data
    while b"\n" in buf:
        line, buf = buf.split(b"\n", 1)
        seen.append(int(line.split()[0]))
print("   console after the takeover:", seen)
if not seen or seen[-1] != 3:
    sys.exit("unexpected counter values %r (want the acknowledged 3)" % seen)
PY
ok "understudy takeover: $out; the guest went on at 3"
