#!/usr/bin/env bash
# Everything a takeover needs is acquired when the secondary starts
# (design.md invariant 6): a console port held by someone else makes the
# secondary refuse to start; a console port it holds cannot be taken by
# anyone else, and a takeover serves it with the guest's state intact.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
test_tmp
# The agents' silence bounds: 300 ms on a host's KVM, 3 s in the nested VM
# (tests/lib.sh nested), where QEMU's emulator stalls an agent for a second
# or more and a short bound gives up a live peer; waits X times longer there.
T=$(nested 300 3000)
X=$(nested 1 4)
# try_bind PORT: 0 if this process could bind 127.0.0.1:PORT
try_bind() {
	python3 -c 'import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try: s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1)
except OSError as e: print(e); sys.exit(1)' "$1"
}

# 1. The console port is held by another process: the secondary refuses to start.
sport=$(free_port); scon=$(free_port)
python3 -c 'import socket,sys,time
s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1)
print("held", flush=True); time.sleep(60)' $scon >"$tmp/holder.out" &
holder=$!
wait_log "$tmp/holder.out" held $((10 * X)) || fail "the port holder did not start"
timeout $((20 * X)) "$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
	--failover-timeout-ms $T 2>"$tmp/refused.log"
rc=$?
[ $rc = 1 ] || [ $rc = 2 ] || fail "secondary with its console port taken exited $rc: $(cat "$tmp/refused.log")"
grep -q "cannot bind the console tcp:127.0.0.1:$scon" "$tmp/refused.log" ||
	fail "no clear error naming the port: $(cat "$tmp/refused.log")"
grep -q "waiting for a primary" "$tmp/refused.log" && fail "the secondary listened for a primary anyway"
kill -9 $holder; wait $holder 2>/dev/null
ok "console port taken: secondary refused to start (exit $rc): $(grep -o 'cannot bind.*' "$tmp/refused.log" | head -1)"

# 2. The port is free at start: the secondary holds it from then on, and a
# takeover serves it with the right counter value.
sport=$(free_port); scon=$(free_port); pcon=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
	--failover-timeout-ms $T --control "$tmp/sec.ctl" 2>"$tmp/sec.log" &
sp=$!
wait_port $sport $((10 * X)) || fail "secondary did not listen"
if msg=$(try_bind $scon); then
	fail "another process could bind the standby's console port $scon"
fi
ok "standby holds its console port before any primary came: another bind fails ($msg)"
"$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon --peer 127.0.0.1:$sport \
	--insecure --timeout-ms $T 2>"$tmp/pri.log" &
pp=$!
wait_log "$tmp/pri.log" "protected: secondary holds" $((20 * X)) || fail "never protected"
out=$(python3 tests/counter_client.py $pcon incr incr) || fail "client of the primary"
[ "$(echo "$out" | tail -1 | cut -d' ' -f1)" = 2 ] || fail "primary replies: $out"
"$BIN" status --control "$tmp/sec.ctl" | grep -q "^state standby$" || fail "secondary status not standby"
try_bind $scon >/dev/null && fail "another process could bind the console port while protected"
kill -9 $pp; wait $pp 2>/dev/null
wait_log "$tmp/sec.log" "TOOK OVER" $((20 * X)) || fail "no takeover"
# Replies replayed from before the takeover may come first (n 1 or 2); then
# get says 2 and incr 3: the guest went on from the acknowledged state.
python3 - $scon $X <<'PY' || fail "console after the takeover"
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20 * int(sys.argv[2]))
s.sendall(b"get\nincr\n")
buf, seen, end = b"", [], time.time() + 20 * int(sys.argv[2])
while time.time() < end and not any(n == 3 for n in seen):
    data = s.recv(4096)
    if not data:
        break
    buf += data
    while b"\n" in buf:
        line, buf = buf.split(b"\n", 1)
        seen.append(int(line.split()[0]))
print("   console after the takeover:", seen)
if 3 not in seen or any(n not in (1, 2, 3) for n in seen) or seen[-2:] != [2, 3]:
    sys.exit("unexpected counter values %r (want ... 2 3)" % seen)
PY
kill -0 $sp || fail "secondary died after the takeover"
ok "takeover served the console it bound at start; the counter went on at 2 -> 3"
