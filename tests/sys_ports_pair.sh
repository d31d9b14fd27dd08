#!/usr/bin/env bash
# Two VMs protected on one pair of hosts (loopback) with no replication port
# written anywhere: each has a config file with its index, the secondaries
# listen on 127.0.0.1 and the primaries peer with 127.0.0.1, and the port
# base is given once on each side.
#   1. vm0 (index 0) and vm1 (index 1) are both protected; the secondaries
#      listen on BASE and BASE+1, and each primary's log names the port it
#      derived; the counters answer through the primaries.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
test_tmp
T=$(nested 500 3000)
W=$(nested 20 90)

# a base with two free ports
base=
for _ in $(seq 50); do
	b=$(( (RANDOM % 20000) + 20000 ))
	python3 -c 'import socket, sys
for p in (int(sys.argv[1]), int(sys.argv[1]) + 1):
    s = socket.socket(); s.bind(("127.0.0.1", p)); s.close()' "$b" 2>/dev/null && { base=$b; break; }
done
[ -n "$base" ] || fail "no two free ports in a row"

for i in 0 1; do
	printf 'guest = counter\ninsecure = true\nindex = %s\n' $i >"$tmp/vm$i.conf"
	scon=$(free_port)
	"$BIN" secondary --config "$tmp/vm$i.conf" --listen 127.0.0.1 --port-base $base \
		--console tcp:127.0.0.1:$scon --failover-timeout-ms $T --control "$tmp/s$i.ctl" \
		2>"$tmp/s$i.log" &
	wait_port $((base + i)) $W || fail "secondary vm$i is not on $((base + i)): $(tail -3 "$tmp/s$i.log")"
done
for i in 0 1; do
	pcon=$(free_port)
	"$BIN" primary --config "$tmp/vm$i.conf" --peer 127.0.0.1 --port-base $base \
		--console tcp:127.0.0.1:$pcon --timeout-ms $T --control "$tmp/p$i.ctl" 2>"$tmp/p$i.log" &
	eval pcon$i=$pcon
done
for i in 0 1; do
	wait_log "$tmp/p$i.log" "protected: secondary holds" $W || fail "vm$i never protected: $(tail -5 "$tmp/p$i.log")"
	grep -qF -- "--peer 127.0.0.1:$((base + i)): port $((base + i)) (--port-base $base + --index $i)" "$tmp/p$i.log" ||
		fail "vm$i's primary did not log its port: $(head -5 "$tmp/p$i.log")"
	grep -q "vm=vm$i .*waiting for a primary on 127.0.0.1:$((base + i))" "$tmp/s$i.log" ||
		fail "vm$i's secondary: $(head -5 "$tmp/s$i.log")"
	eval pc=\$pcon$i
	[ "$(python3 tests/counter_client.py $pc incr incr | tail -1 | cut -d' ' -f1)" = 2 ] || fail "vm$i's counter"
done
ok "1. vm0 and vm1 protected over 127.0.0.1:$base and :$((base + 1)), derived from index = 0 and 1 (--port-base $base), no port written"
echo PASS
