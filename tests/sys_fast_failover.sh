#!/usr/bin/env bash
# Fast failover without false alarms (bench/bench_soak.py --check, short):
# a pair with --failover-timeout-ms 50 under the dirty guest at 200 MiB/s and
# a CPU hog on every core for FAST_SECONDS (default 30): no takeover may
# happen (the primary is alive throughout; the beat side channel keeps the
# secondary hearing it while either agent's loop is busy). Then the counter
# guest, same timeouts and hog: SIGKILL of the primary, the secondary must
# take over and answer the next request with the uninterrupted run's reply.
# The latency is printed, not asserted (a test never asserts a time).
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
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
