#!/usr/bin/env bash
# understudy run: the counter guest over stdio and over TCP, help and bad options.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
tmp=$(mktemp -d); trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null' EXIT

# stdio: three replies, exit 0
printf 'incr\nincr\nget\nhalt\n' | "$BIN" run --guest counter --console stdio >"$tmp/stdio" 2>"$tmp/stdio.err"
rc=$?
[ $rc = 0 ] || fail "stdio run exited $rc: $(cat "$tmp/stdio.err")"
[ "$(wc -l <"$tmp/stdio")" = 3 ] || fail "expected 3 reply lines, got: $(cat "$tmp/stdio")"
read -r n1 d1 n2 d2 n3 d3 <<<"$(tr '\n' ' ' <"$tmp/stdio")"
[ "$n1 $n2 $n3" = "1 2 2" ] || fail "counter values $n1 $n2 $n3"
[ "$d2" = "$d3" ] || fail "get changed the digest ($d2 vs $d3)"
[ "$d1" != "$d2" ] || fail "incr did not change the digest"
ok "stdio conversation: $(tr '\n' ' ' <"$tmp/stdio")"

# tcp: the same conversation gives the same replies (the guest is deterministic)
port=$(free_port)
"$BIN" run --guest counter --console tcp:127.0.0.1:$port 2>"$tmp/tcp.err" &
pid=$!
wait_port $port || fail "console port $port never opened"
python3 tests/counter_client.py $port incr incr get halt >"$tmp/tcp" || fail "tcp client failed"
wait $pid; rc=$?
[ $rc = 0 ] || fail "tcp run exited $rc"
cmp -s "$tmp/stdio" "$tmp/tcp" || fail "tcp replies differ: $(cat "$tmp/tcp")"
ok "tcp conversation matches stdio"

# help and bad input: exit 0 for help, 2 with a message for bad options, 1 for no KVM
"$BIN" run --help | grep -q -- "--guest" || fail "run --help"
"$BIN" --help | grep -q "run" || fail "--help"
expect2() {
	local out
	out=$("$BIN" "$@" 2>&1 </dev/null); local rc=$?
	[ $rc = 2 ] || fail "'$*' exited $rc, expected 2"
	[ -n "$out" ] || fail "'$*' said nothing"
	echo "   '$*' -> $(echo "$out" | head -1)"
}
expect2 run --guest counter --mem 0
expect2 run --guest nosuch
expect2 run --guest counter --cpus 0
expect2 run --guest counter --console bogus
expect2 run --guest counter --bogus-option
expect2 run
expect2 frobnicate
out=$(UNDERSTUDY_KVM=/nonexistent "$BIN" run --guest counter 2>&1 </dev/null); rc=$?
[ $rc = 1 ] || fail "missing KVM exited $rc"
echo "$out" | grep -q "/nonexistent" || fail "missing KVM message does not name the device: $out"
ok "bad options rejected with status 2, missing /dev/kvm with a clear error"

# SIGTERM stops a running guest cleanly: sent once the control socket
# answers (its handler is set up with the socket; a signal before that, while
# the VM is still being built, ends the process as any signal would)
"$BIN" run --guest dirty:mb=8 --console stdio --control "$tmp/term.sock" >/dev/null 2>"$tmp/term.err" </dev/null &
pid=$!
for _ in $(seq 200); do ctl "$tmp/term.sock" status 2>/dev/null | grep -q . && break; sleep 0.05; done
ctl "$tmp/term.sock" status 2>/dev/null | grep -q . || fail "no status at $tmp/term.sock: $(cat "$tmp/term.err")"
sleep 0.2   # the guest runs
kill -TERM $pid; wait $pid; rc=$?
[ $rc = 0 ] || fail "SIGTERM exit $rc"
ok "SIGTERM stops the VM"
