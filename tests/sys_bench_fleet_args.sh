#!/usr/bin/env bash
# bench/bench_fleet.py before it starts any VM, so no KVM is needed:
#   1. bad values exit 2 naming the option (or FLEET_SECONDS), before the
#      check for /dev/kvm, so that a typo is told apart from a missing KVM;
#   2. where /dev/kvm cannot be used it says SKIP and why, and exits 77
#      (make bench-fleet and a CI job then see a skip, not a pass or a
#      failure); with a usable /dev/kvm this part is not run here: the
#      benchmark itself is the run (make bench-fleet).
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
fleet() { timeout 20 python3 bench/bench_fleet.py "$@" 2>&1 </dev/null; }

# expect2 PATTERN ARGS...: exit 2, the message matches PATTERN
expect2() {
	local pat=$1 out rc
	shift
	out=$(fleet "$@"); rc=$?
	[ $rc = 2 ] || fail "bench_fleet.py $*: exit $rc, expected 2: $(echo "$out" | tail -2)"
	echo "$out" | grep -q -- "$pat" || fail "bench_fleet.py $*: no '$pat' in: $out"
	echo "   $* -> $(echo "$out" | tail -1)"
}
expect2 "error: --n: 'x' is not a count" --n 1,x
expect2 "error: --n: '0' is not a count" --n 0,4
expect2 "error: --n: '' is not a count" --n 1,,16
expect2 "error: --mem: '64' is not a size" --mem 64
expect2 "error: --seconds: must be above 0" --seconds 0
expect2 "error: --epoch-ms: must be above 0" --epoch-ms -5
expect2 "argument --seconds: invalid float" --seconds soon
out=$(FLEET_SECONDS=ten fleet --n 1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "error: FLEET_SECONDS: 'ten'" ||
	fail "FLEET_SECONDS=ten: exit $rc, expected 2 naming FLEET_SECONDS: $out"
ok "bad arguments exit 2 naming the option"

if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
	echo "   (/dev/kvm usable here: the skip path is not taken; make bench-fleet runs the benchmark)"
	exit 0
fi
out=$(FLEET_SECONDS=5 fleet --n 1,4); rc=$?
[ $rc = 77 ] || fail "without /dev/kvm: exit $rc, expected 77: $out"
echo "$out" | grep -q "SKIP: /dev/kvm" || fail "without /dev/kvm: no 'SKIP: /dev/kvm' reason: $out"
echo "$out" | grep -q FIGURE && fail "without /dev/kvm it printed figures: $out"
ok "without /dev/kvm: $(echo "$out" | head -1), exit 77"
