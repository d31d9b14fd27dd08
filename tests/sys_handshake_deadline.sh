#!/usr/bin/env bash
# Every handshake has a deadline, and a peer that never speaks holds nobody:
# idle connections do not keep a real primary from the secondary, and are
# closed once silent for 1 s or their Hello is overdue.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
test_tmp
# The pair's silence bounds in case 1: 300 ms on a host's KVM, 3 s in the
# nested VM (tests/lib.sh nested), where QEMU's emulator stalls an agent for
# a second or more and a short bound gives up a live peer; waits X times
# longer there. The deadlines under test (1 s, the Hello's, the
# handshake's) and the bounds towards peers that never speak stay as they
# are: a stall cannot keep them from expiring.
T=$(nested 300 3000)
X=$(nested 1 4)
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

# 1. Idle TCP clients first, more than there are slots for connections
# before their Hello, reopened as soon as the secondary closes one, then
# the real primary: protected while they keep coming (issue 25: 16 idle
# connections kept it out; the deadline of a Hello is far off here).
sport=$(free_port); scon=$(free_port); pcon=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
	--failover-timeout-ms $T --handshake-timeout-ms 600000 --control "$tmp/sec.ctl" \
	2>"$tmp/sec.log" &
sp=$!
wait_port $sport $((10 * X)) || fail "secondary did not listen"
python3 -c 'import selectors,socket,sys,time
port = int(sys.argv[1]); sel = selectors.DefaultSelector(); n = 0
def one():
    global n
    s = socket.create_connection(("127.0.0.1", port), timeout=5); s.setblocking(False)
    sel.register(s, selectors.EVENT_READ); n += 1
for _ in range(16): one()
print("connected", flush=True)
while True:
    for k, _ in sel.select():
        try: d = k.fileobj.recv(4096)
        except OSError: d = b""
        if not d:
            sel.unregister(k.fileobj); k.fileobj.close(); time.sleep(1); one()
            print("reopened", n, flush=True)' $sport >"$tmp/flood1" 2>&1 &
flood=$!
wait_log "$tmp/flood1" connected $((10 * X)) || fail "idle clients did not connect: $(cat "$tmp/flood1")"
wait_log "$tmp/sec.log" "waiting for its Hello" $((10 * X)) || fail "secondary did not see the idle clients"
"$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon --peer 127.0.0.1:$sport \
	--insecure --timeout-ms $T --control "$tmp/pri.ctl" 2>"$tmp/pri.log" &
pp=$!
wait_log "$tmp/pri.log" "protected: secondary holds" $((30 * X)) ||
	fail "primary not protected with idle clients coming: $(tail -3 "$tmp/pri.log"; tail -3 "$tmp/sec.log")"
"$BIN" status --control "$tmp/pri.ctl" | grep -q "^state protected$" || fail "primary status not protected"
"$BIN" status --control "$tmp/sec.ctl" | grep -q "^state standby$" || fail "secondary status not standby"
kill -0 $flood 2>/dev/null || fail "the idle clients stopped: the test proves nothing: $(tail -3 "$tmp/flood1")"
grep -q "reopened" "$tmp/flood1" || fail "no idle client was ever closed: the test proves nothing"
grep -q "refusing .* still to say Hello\|already serving a primary" "$tmp/pri.log" && fail "the real primary was refused"
ok "16 idle clients, reopened as they are closed ($(grep -c reopened "$tmp/flood1") times); the real primary is protected"
kill -9 $pp $sp $flood 2>/dev/null; wait $pp $sp $flood 2>/dev/null

# 2. A client that sends nothing is closed after 1 s; one that sends part
# of a frame and no Hello at the Hello deadline (5 s by default), as a lost
# peer; the secondary goes on waiting.
sport=$(free_port); scon=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
	--control "$tmp/sec2.ctl" 2>"$tmp/sec2.log" &
sp=$!
wait_port $sport $((10 * X)) || fail "secondary did not listen"
idle $sport "$tmp/idle2"
wait_log "$tmp/idle2" connected $((10 * X)) || fail "idle client did not connect"
wait_log "$tmp/idle2" closed $((10 * X)) || fail "the idle client was never closed"
grep -q "sent nothing within 1000 ms" "$tmp/sec2.log" || fail "no clear message: $(tail -3 "$tmp/sec2.log")"
python3 -c 'import socket,sys
s=socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=60)
s.sendall(b"USTD")
try:
    while s.recv(4096): pass
except OSError as e: sys.exit("not closed: %s" % e)' $sport || fail "the partial client was not closed"
grep -q "no Hello from .* within 5000 ms" "$tmp/sec2.log" || fail "no clear message: $(tail -3 "$tmp/sec2.log")"
"$BIN" status --control "$tmp/sec2.ctl" | grep -q "^state waiting$" || fail "secondary not waiting after it"
ok "silent client closed after 1 s, one without its Hello at the deadline: $(grep -o 'no Hello from.*' "$tmp/sec2.log" | head -1)"

# 3. The primary against a "secondary" that accepts TCP and never speaks:
# over TLS (stuck in the handshake) and plaintext (no Hello, while the
# failure timeout is long), the primary gives up at its deadline with a
# clear message: never protected, so it exits 1 (no retry). A console client
# waiting on the guest's reply is not held forever.
bash tests/mkcerts.sh "$tmp/certs" >/dev/null 2>&1 || fail "mkcerts"
c=$tmp/certs
for mode in tls tcp; do
	fport=$(free_port); pcon=$(free_port)
	python3 -c 'import socket,sys,time
l=socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1]))); l.listen(4)
print("listening", flush=True)
conns=[]
while True: conns.append(l.accept()[0])' $fport >"$tmp/fake.out" &
	fake=$!
	wait_log "$tmp/fake.out" listening $((10 * X)) || fail "fake secondary"
	if [ $mode = tls ]; then
		link="--tls-cert $c/client.pem --tls-key $c/client.key --tls-ca $c/ca.pem --timeout-ms 300"
	else
		link="--insecure --timeout-ms 600000"
	fi
	"$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon --peer 127.0.0.1:$fport $link \
		--handshake-timeout-ms 2000 2>"$tmp/pri-$mode.log" &
	pp=$!
	wait_port $pcon $((10 * X)) || fail "$mode: primary console did not open"
	python3 -c 'import socket,sys
s=socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=60)
s.sendall(b"incr\n")
print(repr(s.recv(4096)))' $pcon >"$tmp/client-$mode.out" 2>&1 ||
		fail "$mode: a console client was held: $(cat "$tmp/client-$mode.out")"
	for _ in $(seq 1 1200); do kill -0 $pp 2>/dev/null || break; sleep 0.05; done
	kill -0 $pp 2>/dev/null && fail "$mode: the primary still waits: $(tail -3 "$tmp/pri-$mode.log")"
	wait $pp; rc=$?
	[ $rc = 1 ] || fail "$mode: primary exit $rc: $(tail -3 "$tmp/pri-$mode.log")"
	grep -q "cannot protect the VM" "$tmp/pri-$mode.log" || fail "$mode: unclear: $(tail -3 "$tmp/pri-$mode.log")"
	grep -q "handshake deadline\|timed out" "$tmp/pri-$mode.log" ||
		fail "$mode: the deadline is not named: $(tail -3 "$tmp/pri-$mode.log")"
	kill -9 $fake 2>/dev/null; wait $fake 2>/dev/null
	ok "$mode peer that never speaks: primary exit 1: $(grep -o 'handshake deadline.*\|cannot protect.*timed out.*' "$tmp/pri-$mode.log" | head -1)"
done

# 4. A "primary" that says a valid Hello and then nothing: the secondary
# closes it as a lost peer at the deadline and waits for a primary again.
sport=$(free_port); scon=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
	--failover-timeout-ms 300 --handshake-timeout-ms 1000 --control "$tmp/sec4.ctl" \
	2>"$tmp/sec4.log" &
sp=$!
wait_port $sport $((10 * X)) || fail "secondary did not listen"
python3 - $sport <<'PY' || fail "hello-only peer"
import socket, struct, sys
def crc32c(b):
    c = 0xffffffff
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82f63b78 if c & 1 else 0)
    return c ^ 0xffffffff
hello = bytes([0x08, 1, 0x10, 1, 0x28, 3, 0x40, 0x64, 0x48, 0xe8, 0x07])   # Hello{version 1, role PRIMARY, LZ4|XOR, heartbeat 100 ms, timeout 1000 ms}
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=60)
s.sendall(struct.pack("<IHHII", 0x44545355, 1, 1, len(hello), crc32c(hello)) + hello)
try:
    while s.recv(4096):
        pass
except OSError as e:
    sys.exit("not closed by the secondary: %s" % e)
PY
grep -q "primary .* connected" "$tmp/sec4.log" || fail "the Hello was not taken: $(tail -3 "$tmp/sec4.log")"
grep -q "silent for .* before the first checkpoint" "$tmp/sec4.log" || fail "unclear: $(tail -3 "$tmp/sec4.log")"
"$BIN" status --control "$tmp/sec4.ctl" | grep -q "^state waiting$" || fail "secondary not waiting after it"
ok "Hello then silence: $(grep -o 'the primary was silent.*' "$tmp/sec4.log" | head -1); waiting again"
