#!/usr/bin/env bash
# A console client that half-closes (sends its requests, then EOF) still
# receives every reply, with real netcat (netcat-openbsd):
#   1. `nc -N` against `run`: both replies, and nc ends by itself (the console
#      closes the connection once the replies are out and it is quiet); a
#      port probe before it (nothing sent) was let go at once;
#   2. plain `nc` (never half-closes, waits for the server) gets both replies;
#   3. `nc -N` against a protected primary: the replies leave only after the
#      secondary's ACK, long after the client's EOF;
#   4. the secondary stopped: the replies are held (output commit) until the
#      primary gives up on it (--timeout-ms 3000, past the console's quiet
#      period), and the half-closed client still gets them;
#   5. a half-closed client of a guest that never stops talking is closed at
#      the cap (CONSOLE_EOF_MAX_MS), and the next client gets in.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
command -v nc >/dev/null || { echo "SKIP: nc not installed (netcat-openbsd, make deps)"; exit 77; }
nc -h 2>&1 | grep -q -- '-N' || { echo "SKIP: this nc has no -N (netcat-openbsd needed)"; exit 77; }
test_tmp

# two_replies FILE N: FILE holds exactly "N D" twice (incr then get)
two_replies() {
	local n1 d1 n2 d2 extra
	[ "$(wc -l <"$1")" = 2 ] || return 1
	read -r n1 d1 n2 d2 extra <<<"$(tr '\n' ' ' <"$1")"
	[ "$n1 $n2" = "$2 $2" ] && [ "$d1" = "$d2" ] && [ -n "$d1" ] && [ -z "$extra" ]
}
# nc_alone FILE PORT [nc options]: nc with incr/get must end by itself
# within 30 s; its stdout goes to FILE, the milliseconds it took to $ms.
nc_alone() {
	local f=$1 port=$2 t0 rc
	shift 2
	t0=$(date +%s%N)
	printf 'incr\nget\n' | timeout 30 nc "$@" 127.0.0.1 "$port" >"$f"
	rc=$?
	[ $rc = 124 ] && fail "nc $* did not end within 30 s (got: $(head -3 "$f"))"
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
}

# 1 and 2: run
port=$(free_port)
"$BIN" run --guest counter --console tcp:127.0.0.1:$port 2>"$tmp/run.log" &
rp=$!
wait_port $port 20 || fail "run's console never opened"
nc_alone "$tmp/r1" $port -N
two_replies "$tmp/r1" 1 || fail "nc -N against run: expected two replies n=1, got: $(cat "$tmp/r1")"
grep -q "every reply written" "$tmp/run.log" || fail "run did not log closing a finished client"
ok "nc -N against run: both replies, nc ended after $ms ms"
# wait_port's probe (connect, close, nothing sent) was the first client:
# closed at once, it must not have held the console for the quiet period
probe_ms=$(awk '/finished sending/ && !f { f = $2 } /every reply written/ && !d { d = $2 }
	END { printf "%d", (d - f) * 1000 }' "$tmp/run.log")
[ "$probe_ms" -lt 500 ] || fail "a port probe held the console $probe_ms ms: $(head -6 "$tmp/run.log")"
ok "a port probe (nothing sent) is let go after $probe_ms ms"
printf 'incr\nget\n' | nc 127.0.0.1 $port >"$tmp/r2" &
np=$!
for _ in $(seq 1 400); do [ "$(wc -l <"$tmp/r2")" -ge 2 ] && break; sleep 0.05; done
kill $np 2>/dev/null; wait $np 2>/dev/null
two_replies "$tmp/r2" 2 || fail "plain nc against run: expected two replies n=2, got: $(cat "$tmp/r2")"
ok "plain nc against run: both replies (plain nc itself waits for the server: killed)"
kill $rp; wait $rp 2>/dev/null

# 3 and 4: a protected primary
sport=$(free_port); scon=$(free_port); pcon=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
	2>"$tmp/sec.log" &
sp=$!
wait_port $sport 20 || fail "secondary did not listen"
"$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon --peer 127.0.0.1:$sport \
	--insecure --timeout-ms 3000 2>"$tmp/pri.log" &
pp=$!
wait_log "$tmp/pri.log" "protected:" 60 || fail "primary never protected: $(tail -5 "$tmp/pri.log")"
nc_alone "$tmp/p1" $pcon -N
two_replies "$tmp/p1" 1 || fail "nc -N against a primary: expected two replies n=1, got: $(cat "$tmp/p1")"
ok "nc -N against a protected primary: both replies after the ACK, nc ended after $ms ms"

kill -STOP $sp
nc_alone "$tmp/p2" $pcon -N
kill -CONT $sp
two_replies "$tmp/p2" 2 || fail "secondary stopped: expected two replies n=2, got: $(cat "$tmp/p2")"
grep -q "UNPROTECTED" "$tmp/pri.log" || fail "the primary never gave up on the stopped secondary"
[ "$ms" -ge 2000 ] || fail "replies came after $ms ms: not held for the stopped secondary?"
ok "secondary stopped: replies held $ms ms (until the primary gave up on it), then delivered"
kill -9 $pp $sp; wait $pp $sp 2>/dev/null

# 5: the cap
port=$(free_port)
"$BIN" run --guest dirty:mb=1,rate_mb=1,report_ms=100 --console tcp:127.0.0.1:$port \
	2>"$tmp/dirty.log" &
dp=$!
wait_port $port 20 || fail "run's console never opened (dirty)"
nc_alone "$tmp/d1" $port -N
[ -s "$tmp/d1" ] || fail "the half-closed client got no output of the dirty guest"
cap=$(sed -n 's/#define CONSOLE_EOF_MAX_MS \([0-9]*\)/\1/p' net/console.h)
[ "$ms" -ge "$cap" ] && [ "$ms" -le $((cap + 10000)) ] ||
	fail "half-closed client of a talking guest closed after $ms ms, cap $cap ms"
grep -q "half-closed .* ms ago; closing it" "$tmp/dirty.log" || fail "the cap was not logged"
printf 'x\n' | timeout 30 nc -N 127.0.0.1 $port | head -c 1 >"$tmp/d2"
[ -s "$tmp/d2" ] || fail "the next client got nothing after the cap"
ok "a talking guest: the half-closed client closed after $ms ms (cap $cap ms), the next one served"
kill $dp; wait $dp 2>/dev/null
exit 0
