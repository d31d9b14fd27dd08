#!/usr/bin/env bash
# Fast failover without false alarms (bench/bench_soak.py --check, short):
# a pair with --failover-timeout-ms 50 under the dirty guest at 200 MiB/s and
# a CPU hog on every core for FAST_SECONDS (default 30): no takeover may
# happen (the primary is alive throughout; the beat side channel keeps the
# secondary hearing it while either agent's loop is busy). Then the counter
# guest, same timeouts and hog: SIGKILL of the primary, the secondary must
# take over and answer the next request with the uninterrupted run's reply.
# The latency is printed, not asserted (a test never asserts a time).
# Forged beats give no cover to a stopped primary (below). And a primary
# whose loop hangs while its threads run (test hook "test wedge MS") is not
# masked by its beat thread: the beats stop after REPL_BEAT_PROGRESS_MS, the
# secondary takes over while the loop still hangs, and the woken primary
# releases nothing more and exits 3 (replaced); the counter goes on from its
# acknowledged value.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_host_kvm "takeover with a 50 ms failover timeout under a CPU hog"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
UNDERSTUDY_BIN="$BIN" timeout 600 python3 bench/bench_soak.py --check --seconds "${FAST_SECONDS:-30}" \
	--kills 2 >"$out" 2>&1
rc=$?
cat "$out"
[ $rc -eq 0 ] || fail "soak check failed (exit $rc)"
grep -q "^spurious takeovers: 0 in" "$out" || fail "a takeover from a live primary"
[ "$(grep -c "first reply .* ms after the kill" "$out")" -eq 2 ] || fail "a kill without a consistent reply"
grep -q "beat interval [0-9]" "$out" || fail "no beat side channel was used"
ok "no takeover in ${FAST_SECONDS:-30} s under load at a 50 ms failover timeout; SIGKILL -> consistent takeover"

# Beats are authenticated: datagrams that are not the primary's (garbage,
# a beat-sized forgery, from another source port) are dropped and never
# keep a stopped primary's standby from taking over.
tmp=$(mktemp -d)
trap 'kill -CONT $(jobs -p) 2>/dev/null; kill -9 $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp" "$out"' EXIT
sport=$(free_port); scon=$(free_port); pcon=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
	--failover-timeout-ms 50 2>"$tmp/sec.log" &
wait_port $sport || fail "secondary did not listen"
"$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon --peer 127.0.0.1:$sport --insecure \
	--timeout-ms 100 2>"$tmp/pri.log" >/dev/null &
pp=$!
wait_log "$tmp/pri.log" "protected: secondary holds" 30 || fail "never protected: $(tail -3 "$tmp/pri.log")"
grep -q "beat side channel: UDP" "$tmp/sec.log" || fail "the secondary opened no beat channel: $(tail -3 "$tmp/sec.log")"
python3 - $sport <<'PY' &
import socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
end = time.time() + 4
seq = 1 << 40
while time.time() < end:
    seq += 1   # the layout of a primary's beat, with a MAC made up
    beat = struct.pack("<IBBHQ", 0x54425355, 1, 1, 0, seq) + bytes(16)
    for d in (beat, b"x" * 32, b"garbage"):
        s.sendto(d, ("127.0.0.1", int(sys.argv[1])))
    time.sleep(0.002)
PY
sleep 0.5
kill -STOP $pp
wait_log "$tmp/sec.log" "TOOK OVER" 2 || fail "forged beats kept the standby of a stopped primary from taking over"
kill -CONT $pp
wait_log "$tmp/sec.log" "beats stopped" 3 || fail "no beat counters logged"
dropped=$(grep -o "beats stopped: .*" "$tmp/sec.log" | head -1 | sed 's/.* \([0-9]*\) dropped.*/\1/')
[ "${dropped:-0}" -gt 0 ] || fail "no forged datagram counted as dropped: $(grep 'beats stopped' "$tmp/sec.log")"
ok "forged beats dropped ($dropped) and no cover for a stopped primary: $(grep -o 'TOOK OVER: [^;]*' "$tmp/sec.log")"

# A hung loop: its beat thread stops vouching for it; the takeover comes
# while the loop still hangs.
count() { python3 tests/counter_client.py "$@" | tail -1 | cut -d' ' -f1; }
sport=$(free_port); scon=$(free_port); pcon=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
	--failover-timeout-ms 100 2>"$tmp/w.sec.log" &
wait_port $sport || fail "secondary did not listen"
UNDERSTUDY_TEST_HOOKS=1 "$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon \
	--peer 127.0.0.1:$sport --insecure --timeout-ms 200 --control "$tmp/w.ctl" 2>"$tmp/w.pri.log" >/dev/null &
pp=$!
wait_log "$tmp/w.pri.log" "protected: secondary holds" 30 || fail "never protected: $(tail -3 "$tmp/w.pri.log")"
[ "$(count $pcon incr incr incr)" = 3 ] || fail "counter before the hang"
ctl "$tmp/w.ctl" "test wedge 8000" >"$tmp/w.reply" &
wait_log "$tmp/w.pri.log" "loop hangs for 8000 ms" 5 || fail "the hook did not hang the loop"
wait_log "$tmp/w.sec.log" "TOOK OVER" 12 || fail "no takeover from a primary whose loop hangs"
grep -q "the loop runs again" "$tmp/w.pri.log" &&
	fail "the takeover came only after the loop woke: its beats masked the hang"
wait $pp; rc=$?
[ $rc = 3 ] || fail "the woken primary exited $rc, want 3 (replaced): $(tail -3 "$tmp/w.pri.log")"
grep -q "^ok wedged 8000 ms" "$tmp/w.reply" || fail "hook reply: $(cat "$tmp/w.reply")"
[ "$(count $scon incr)" = 4 ] || fail "the standby does not go on from 3"
ok "a primary whose loop hangs: taken over while it hangs ($(grep -o 'TOOK OVER: [^;]*' "$tmp/w.sec.log")), it exits 3 (replaced) on waking, the counter goes on at 4"
