#!/usr/bin/env bash
# `understudy protect` and `understudy migrate` wait for the outcome by
# asking the agent's status, each request bounded by 5 s. An agent's loop
# can be busy longer than that (a Linux guest's agent in the nested VM spent
# 8 s sending its 256 MiB initial sync), while protection or the migration
# goes on: one status request that times out must be asked again, not end
# the command with "Connection timed out" (exit 1, as if it had failed).
# The agent here is tests/slow_agent.py, a control socket whose first
# status answer after the request comes after 7 s (no KVM needed). And a
# status request the agent resets unanswered during the hand-over (its
# loop stalled past the request's deadline) is asked again: migrate must
# not say the source ended while it is there.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
[ -x "$BIN" ] || { echo "SKIP: $BIN not built"; exit 77; }
tmp=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
agent() {   # MODE: a slow agent at $tmp/MODE.ctl
	python3 tests/slow_agent.py "$tmp/$1.ctl" "$1" 7 &
	for _ in $(seq 100); do [ -S "$tmp/$1.ctl" ] && return; sleep 0.05; done
	fail "the stand-in agent did not start"
}

agent protect
out=$("$BIN" protect --control "$tmp/protect.ctl" --peer 127.0.0.1:1 --insecure 2>&1)
rc=$?
[ $rc = 0 ] || fail "protect against an agent busy for 7 s: exit $rc: $out"
echo "$out" | grep -q "^ok protected" || fail "protect: no 'ok protected': $out"
ok "protect: a status request that timed out (the agent busy for 7 s) was asked again; exit 0, ok protected"

agent migrate
out=$("$BIN" migrate --control "$tmp/migrate.ctl" --to 127.0.0.1:1 --insecure \
	--handshake-timeout-ms 60000 2>&1)
rc=$?
[ $rc = 0 ] || fail "migrate against an agent busy for 7 s: exit $rc: $out"
echo "$out" | grep -q "^migrated in" || fail "migrate: no 'migrated in': $out"
ok "migrate: a status request that timed out (the agent busy for 7 s) was asked again; exit 0, migrated"
grep -q "^migrate .* handshake-timeout-ms=60000 " "$tmp/migrate.ctl.requests" ||
	fail "migrate --handshake-timeout-ms 60000: not in the request: $(cat "$tmp/migrate.ctl.requests")"
ok "migrate --handshake-timeout-ms 60000 asks the agent for it, as protect does"

agent migrate-reset
out=$("$BIN" migrate --control "$tmp/migrate-reset.ctl" --to 127.0.0.1:1 --insecure 2>&1)
rc=$?
[ $rc = 0 ] || fail "migrate, a status reset unanswered during the hand-over: exit $rc: $out"
echo "$out" | grep -q "^migrated in" || fail "migrate after a reset: no 'migrated in': $out"
ok "migrate: a status request the source reset during the hand-over was asked again; exit 0, migrated"
