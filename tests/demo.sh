#!/usr/bin/env bash
# make demo: a protected counter guest on loopback (TLS between the hosts),
# a client, the primary killed with SIGKILL, the secondary taking over.
# Where this host has no usable /dev/kvm it runs inside the nested VM of
# tests/nested/run.sh (QEMU's emulator with SVM and KVM inside): a few
# minutes, and its times are the emulator's, not this host's.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
BIN=${UNDERSTUDY_BIN:-$PWD/${BUILD:-build}/understudy}
# bold headings on a terminal only
if [ -t 1 ]; then say() { printf '\n\033[1m%s\033[0m\n' "$*"; }; else say() { printf '\n%s\n' "$*"; }; fi
if ! { [ -r /dev/kvm ] && [ -w /dev/kvm ]; } && [ -z "${UNDERSTUDY_NESTED:-}" ]; then
	say "No usable /dev/kvm here: the demo runs inside a VM under QEMU's emulator, whose nested KVM runs the guests (a few minutes; its output at the end; its times are the emulator's)"
	BUILD=build/nested NESTED_CMD="BUILD=build/nested bash tests/demo.sh" tests/nested/run.sh
	exit $?
fi
need_kvm
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
# the secondary's failure-detection timeout: in the nested VM the emulator
# stalls an agent for a second at a time, and 300 ms would give up a live primary
FT=$(nested 300 3000)

bash tests/mkcerts.sh "$tmp/certs" >/dev/null 2>&1 || fail "cannot make test certificates"
c=$tmp/certs
sport=$(free_port); scon=$(free_port); pcon=$(free_port)

say "1. secondary: waits on 127.0.0.1:$sport (TLS 1.3, mutual certificates), console tcp:$scon bound now, served after takeover"
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --failover-timeout-ms $FT \
	--tls-cert $c/server.pem --tls-key $c/server.key --tls-ca $c/ca.pem --control "$tmp/sec.ctl" \
	2>"$tmp/sec.log" &
sp=$!
wait_port $sport $(nested 10 60) || fail "secondary did not start"

say "2. primary: counter guest, 25 ms epochs, console tcp:$pcon"
"$BIN" primary --guest counter --mem 64M --console tcp:127.0.0.1:$pcon --peer 127.0.0.1:$sport \
	--tls-cert $c/client.pem --tls-key $c/client.key --tls-ca $c/ca.pem --control "$tmp/pri.ctl" \
	--timeout-ms $FT 2>"$tmp/pri.log" &
pp=$!
wait_log "$tmp/pri.log" "protected:" $(nested 5 120) || fail "never protected: $(tail -3 "$tmp/pri.log")"
grep "protected:" "$tmp/pri.log" | sed 's/^/   /'

say "3. a client sends requests; every reply it sees was acknowledged by the secondary first"
python3 tests/counter_client.py $pcon incr incr incr incr incr get >"$tmp/before" || fail "client"
sed 's/^/   reply: /' "$tmp/before"
"$BIN" status --control "$tmp/pri.ctl" | sed 's/^/   status: /'

say "4. kill -9 the primary (mid-conversation, nothing flushed, no goodbye)"
t_kill=$(date +%s%N)
kill -9 $pp
wait $pp 2>/dev/null   # reaped here, without the shell's "Killed" line
for _ in $(seq 1 $(( FT / 10 + 500 ))); do grep -q "TOOK OVER" "$tmp/sec.log" && break; sleep 0.01; done
grep -q "TOOK OVER" "$tmp/sec.log" || fail "secondary did not take over: $(tail -5 "$tmp/sec.log")"
t_took=$(date +%s%N)
grep -E "TOOK OVER" "$tmp/sec.log" | sed 's/.*secondary: /   secondary: /'

say "5. the client reconnects to the secondary's console and goes on"
python3 tests/counter_client.py $scon get incr >"$tmp/after" || fail "client after takeover"
t_reply=$(date +%s%N)
sed 's/^/   reply: /' "$tmp/after"

last=$(tail -1 "$tmp/before" | cut -d' ' -f1)
now=$(head -1 "$tmp/after" | cut -d' ' -f1)
next=$(tail -1 "$tmp/after" | cut -d' ' -f1)
ref=$( (printf 'incr\n%.0s' $(seq $next); echo halt) | "$BIN" run --guest counter 2>/dev/null | tail -1)
epoch=$(grep -o "from epoch [0-9]*" "$tmp/sec.log" | grep -o "[0-9]*$")
say "what happened"
echo "   protected:          yes (TLS link, epoch ${epoch:-?} was the last acknowledged checkpoint)"
echo "   primary killed:     SIGKILL"
silent=$(grep -o "primary silent for [0-9]* ms" "$tmp/sec.log" | grep -o "[0-9]*" | head -1)
echo "   secondary took over: seen within $(( (t_took - t_kill) / 1000000 )) ms of the kill; it had heard nothing from the"
echo "                        primary for ${silent:-?} ms then (it takes over after $FT ms of silence, counted from the"
echo "                        primary's last word, which came before the kill)"
echo "   first replies after: $(( (t_reply - t_kill) / 1000000 )) ms after the kill (a new client connecting, two requests)"
if [ "$now" = "$last" ] && [ "$(tail -1 "$tmp/after")" = "$ref" ]; then
	echo "   requests acknowledged before the kill: all present ($last), next incr gave $next, same digest as an uninterrupted run"
else
	fail "state after takeover ($now, next $(tail -1 "$tmp/after")) does not continue $last (reference $ref)"
fi
python3 tests/counter_client.py $scon halt
wait $sp
