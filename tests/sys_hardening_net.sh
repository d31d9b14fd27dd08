#!/usr/bin/env bash
# Hardening of net/ seen from the agents (issue 9): ports that used to wrap
# are refused with exit status 2; a secondary out of file descriptors under
# a flood of connections (link and control socket) does not spin; a second
# plaintext primary refused in the accept callback is no use after free
# (run with BUILD=build/san to have the sanitizers check it).
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
[ -n "${BUILD:-}" ] && BIN=${UNDERSTUDY_BIN:-$PWD/$BUILD/understudy}
[ -x "$BIN" ] || { echo "SKIP: $BIN not built"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null' EXIT

# ---- 8: HOST:PORT from the command line: 1..65535, else exit 2 and why -------
expect2() {
	local out rc
	out=$(timeout 10 "$BIN" "$@" 2>&1 </dev/null); rc=$?
	[ $rc = 2 ] || fail "'$*' exited $rc, expected 2: $out"
	echo "$out" | grep -q "bad port\|HOST:PORT" || fail "'$*' said: $out"
	echo "   '$*' -> $(echo "$out" | head -1)"
}
port=$(free_port)
expect2 secondary --insecure --listen 127.0.0.1:70000 --console tcp:127.0.0.1:$port
expect2 secondary --insecure --listen=127.0.0.1:0 --console tcp:127.0.0.1:$port
expect2 secondary --insecure --lis 127.0.0.1:-1 --console tcp:127.0.0.1:$port
expect2 secondary --insecure --listen 127.0.0.1 --console tcp:127.0.0.1:$port
expect2 secondary --insecure --listen 127.0.0.1:$port --console tcp:127.0.0.1:65536
expect2 primary --insecure --guest counter --peer 127.0.0.1:65536
expect2 primary --insecure --guest counter --peer=127.0.0.1:99999999999
expect2 run --guest counter --console tcp:127.0.0.1:0
ok "bad ports refused with exit 2"

# ---- 6: out of file descriptors: no busy loop, few log lines -----------------
# A secondary with a handful of fds; silent TLS clients and control clients
# use them up, so accept() fails with EMFILE while they stay.
command -v openssl >/dev/null || { echo "SKIP: openssl not installed (certificates)"; exit 77; }
tests/mkcerts.sh "$tmp/certs" >/dev/null || fail "mkcerts"
lport=$(free_port); cport=$(free_port)
(ulimit -n 24 && exec "$BIN" secondary --listen 127.0.0.1:$lport --console tcp:127.0.0.1:$cport \
	--control "$tmp/ctl" --tls-cert "$tmp/certs/server.pem" --tls-key "$tmp/certs/server.key" \
	--tls-ca "$tmp/certs/ca.pem") 2>"$tmp/emfile.err" &
spid=$!
wait_port $lport || fail "secondary never listened: $(cat "$tmp/emfile.err")"
cpu() { awk '{ print $14 + $15 }' /proc/$spid/stat; }
timeout 20 python3 - $lport "$tmp/ctl" >"$tmp/flood" 2>&1 <<'PY' &
import socket, sys, time
port, ctl = int(sys.argv[1]), sys.argv[2]
held = []
for i in range(60):  # non-blocking: a full backlog must not stop the flood
    s = socket.socket(); s.setblocking(False); s.connect_ex(("127.0.0.1", port)); held.append(s)
    u = socket.socket(socket.AF_UNIX); u.setblocking(False); u.connect_ex(ctl); held.append(u)
print("connected", len(held), flush=True)
time.sleep(4)
PY
fpid=$!
sleep 1
c0=$(cpu); sleep 2; c1=$(cpu)
wait $fpid || fail "flood client: $(cat "$tmp/flood")"
kill -0 $spid 2>/dev/null || fail "secondary died: $(tail -5 "$tmp/emfile.err")"
grep -q "Too many open files" "$tmp/emfile.err" || fail "never ran out of fds: $(tail -5 "$tmp/emfile.err")"
ticks=$((c1 - c0)); hz=$(getconf CLK_TCK)
[ $ticks -lt $((hz / 2)) ] || fail "secondary used $ticks/$hz s of CPU in 2 s out of fds (busy loop)"
lines=$(grep -c "accept\|closed:" "$tmp/emfile.err")
[ "$lines" -le 10 ] || fail "$lines log lines about accepting: $(grep -m3 accept "$tmp/emfile.err")"
echo "   $ticks/$hz s of CPU over 2 s, $lines log lines: $(grep -m1 "Too many" "$tmp/emfile.err")"
# The clients are gone: the control socket answers again.
sleep 0.5
"$BIN" status --control "$tmp/ctl" >"$tmp/status" 2>&1 || fail "status after the flood: $(cat "$tmp/status")"
ok "out of fds: accept backs off, logs little, recovers"
kill $spid; wait $spid 2>/dev/null

# ---- 7: two plaintext connections at once ----
# The use-after-free itself (an accept callback that closes the connection)
# is reproduced at the net level by test_net_hardening under the sanitizers;
# here a secondary takes two plaintext connections (both wait as candidates
# for their Hello), closes one as it goes, and stays well.
lport=$(free_port); cport=$(free_port)
"$BIN" secondary --insecure --listen 127.0.0.1:$lport --console tcp:127.0.0.1:$cport \
	2>"$tmp/uaf.err" &
spid=$!
wait_port $lport || fail "secondary never listened: $(cat "$tmp/uaf.err")"
timeout 10 python3 - $lport <<'PY' || fail "clients: could not connect twice"
import socket, sys, time
port = int(sys.argv[1])
a = socket.create_connection(("127.0.0.1", port)); time.sleep(0.3)
b = socket.create_connection(("127.0.0.1", port)); time.sleep(0.3)
a.close(); time.sleep(0.3); b.close()
PY
sleep 0.3
kill -0 $spid 2>/dev/null || fail "secondary died: $(tail -20 "$tmp/uaf.err")"
[ "$(grep -c "closed before its Hello" "$tmp/uaf.err")" -ge 2 ] || fail "both connections not seen closing: $(cat "$tmp/uaf.err")"
kill $spid; wait $spid 2>/dev/null
grep -q "AddressSanitizer\|runtime error" "$tmp/uaf.err" && fail "sanitizer: $(grep -A5 Sanitizer "$tmp/uaf.err")"
ok "two plaintext connections, closed before their Hello: secondary fine"

exit 0
