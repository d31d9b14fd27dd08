#!/usr/bin/env bash
# Every handshake has a deadline, and a peer that never speaks holds nobody:
# an idle connection does not keep a real primary from the secondary, and is
# closed once its Hello is overdue.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
tmp=$(mktemp -d)
cleanup() { kill -9 $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
wait_log() {   # file pattern seconds
	for _ in $(seq 1 $(($3 * 20))); do grep -q "$2" "$1" && return 0; sleep 0.05; done
	return 1
}
# idle PORT OUT: connects, says nothing; writes "connected", then "closed"
# when the other side closes.
idle() {
	python3 -c 'import socket,sys
s=socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
print("connected", flush=True)
s.settimeout(None)
try:
    while s.recv(4096): pass
except OSError: pass
print("closed", flush=True)' "$1" >"$2" &
}

# 1. An idle TCP client first, then the real primary: protected while the
# idle one is still connected (its deadline is far off here).
sport=$(free_port); scon=$(free_port); pcon=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
	--failover-timeout-ms 300 --handshake-timeout-ms 600000 --control "$tmp/sec.ctl" \
	2>"$tmp/sec.log" &
sp=$!
wait_port $sport || fail "secondary did not listen"
idle $sport "$tmp/idle1"
wait_log "$tmp/idle1" connected 10 || fail "idle client did not connect"
wait_log "$tmp/sec.log" "waiting for its Hello" 10 || fail "secondary did not see the idle client"
"$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon --peer 127.0.0.1:$sport \
	--insecure --timeout-ms 300 --control "$tmp/pri.ctl" 2>"$tmp/pri.log" &
pp=$!
wait_log "$tmp/pri.log" "protected: secondary holds" 30 ||
	fail "primary not protected with an idle client connected: $(tail -3 "$tmp/pri.log"; tail -3 "$tmp/sec.log")"
"$BIN" status --control "$tmp/pri.ctl" | grep -q "^state protected$" || fail "primary status not protected"
"$BIN" status --control "$tmp/sec.ctl" | grep -q "^state standby$" || fail "secondary status not standby"
grep -q closed "$tmp/idle1" && fail "the idle client was dropped: the test proves nothing"
grep -q "already serving a primary" "$tmp/pri.log" "$tmp/sec.log" && fail "the real primary was refused"
ok "idle client connected first; the real primary is protected while it is still connected"
kill -9 $pp $sp 2>/dev/null; wait $pp $sp 2>/dev/null

# 2. With the default deadline (5 s), an idle client is closed as a lost
# peer and the secondary goes on waiting.
sport=$(free_port); scon=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
	--control "$tmp/sec2.ctl" 2>"$tmp/sec2.log" &
sp=$!
wait_port $sport || fail "secondary did not listen"
idle $sport "$tmp/idle2"
wait_log "$tmp/idle2" connected 10 || fail "idle client did not connect"
wait_log "$tmp/idle2" closed 60 || fail "the idle client was never closed"
grep -q "no Hello from .* within 5000 ms" "$tmp/sec2.log" || fail "no clear message: $(tail -3 "$tmp/sec2.log")"
"$BIN" status --control "$tmp/sec2.ctl" | grep -q "^state waiting$" || fail "secondary not waiting after it"
ok "idle client closed at its Hello deadline: $(grep -o 'no Hello from.*' "$tmp/sec2.log" | head -1)"
