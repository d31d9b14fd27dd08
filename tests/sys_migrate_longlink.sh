#!/usr/bin/env bash
# understudy migrate over a link with a 40 ms round trip (a userspace delay
# proxy, tests/delay_proxy.py: no tc netem here): an idle guest (counter)
# hands over at once with the default --downtime-ms 30, never throttled.
# The round trip is a floor no throttle shortens; before, the prediction
# (pause + capture-to-ACK) missed 30 ms every epoch and auto-converge
# throttled the guest to 99 % until --max-time cancelled.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
test_tmp
count() { python3 tests/counter_client.py "$@" | tail -1 | cut -d' ' -f1; }

dport=$(free_port); dcon=$(free_port); pport=$(free_port); scon=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$dport --console tcp:127.0.0.1:$dcon --insecure \
	--failover-timeout-ms 4000 --control "$tmp/dst.ctl" 2>"$tmp/dst.log" &
wait_port $dport || fail "destination did not listen"
python3 tests/delay_proxy.py $pport $dport 40 >"$tmp/proxy.out" &
wait_port $pport || fail "the delay proxy did not listen"
"$BIN" run --guest counter --console tcp:127.0.0.1:$scon --control "$tmp/src.ctl" 2>"$tmp/src.log" &
sp=$!
wait_port $scon || fail "source did not start"
[ "$(count $scon incr incr)" = 2 ] || fail "source counter"
# --max-time 30: an idle guest needs a few epochs; a throttled one never goes.
"$BIN" migrate --timeout-ms 4000 --control "$tmp/src.ctl" --to 127.0.0.1:$pport --insecure \
	--max-time 30 --json >"$tmp/m.json" 2>"$tmp/m.out" ||
	fail "the idle guest did not migrate over 40 ms: $(tail -2 "$tmp/m.out"); $(grep -E 'auto-converge|predicted' "$tmp/src.log" | tail -3)"
wait $sp; rc=$?
[ $rc = 0 ] || fail "the source exited $rc after the migration"
grep -q "auto-converge: predicted" "$tmp/src.log" && fail "the idle guest was throttled: $(grep auto-converge "$tmp/src.log" | head -2)"
tail -1 "$tmp/m.json" | python3 -c '
import json, sys
s = json.loads(sys.stdin.read())
assert s["result"] == "migrated" and s["throttle_pct_max"] == 0, s
# the pause to the destination word crosses the proxy both ways
assert s["downtime_ms"] >= 40, s
print("   summary:", s)' || fail "summary: $(tail -1 "$tmp/m.json")"
# The decision counted the link: a round trip of at least the proxy's 40 ms.
rtt=$(grep -o 'round trip [0-9.]*' "$tmp/src.log" | tail -1 | cut -d' ' -f3)
python3 -c "import sys; sys.exit(0 if float('${rtt:-0}') >= 40 else 1)" ||
	fail "the prediction did not count the 40 ms round trip: $(grep 'predicted downtime' "$tmp/src.log" | tail -1)"
[ "$(count $dcon incr)" = 3 ] || fail "the destination does not go on from 2"
ok "idle guest over a 40 ms link migrated at once, not throttled ($(grep -o 'predicted downtime [0-9.]* ms <= [0-9.]* ms' "$tmp/src.log" | tail -1); round trip $rtt ms)"
exit 0
