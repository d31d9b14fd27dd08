#!/usr/bin/env bash
# A link slower than the guest dirties memory: the secondary lives in a
# network namespace this test creates, behind a veth pair shaped to 2 Mbit/s
# with tbf. Epochs must stretch (status: stretched epochs) while the VM stays
# protected, acknowledged epochs keep coming, and the primary's memory stays
# bounded; then the primary is killed and the standby still takes over.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
command -v ip >/dev/null && command -v tc >/dev/null || { echo "SKIP: ip/tc (iproute2) missing"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: network namespaces need root"; exit 77; }
ns=us-slow-$$; hv=usp$$; nv=uss$$
tmp=$(mktemp -d)
cleanup() {
	kill -9 $(jobs -p) 2>/dev/null; wait 2>/dev/null
	ip link del $hv 2>/dev/null; ip netns del $ns 2>/dev/null; rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add $ns || { echo "SKIP: cannot create a network namespace"; exit 77; }
ip link add $hv type veth peer name $nv || fail "veth"
ip link set $nv netns $ns
ip addr add 10.231.0.1/30 dev $hv && ip link set $hv up
ip netns exec $ns ip addr add 10.231.0.2/30 dev $nv
ip netns exec $ns ip link set $nv up
ip netns exec $ns ip link set lo up
tc qdisc add dev $hv root tbf rate 2mbit burst 16kb latency 2s || { echo "SKIP: tbf unavailable"; exit 77; }
sleep 0.5   # let the veth pair come up

ip netns exec $ns "$BIN" secondary --listen 10.231.0.2:7700 --console tcp:10.231.0.2:7701 --insecure \
	--failover-timeout-ms 3000 --control "$tmp/sec.ctl" 2>"$tmp/sec.log" &
sleep 0.3
# 64 MiB guest so the initial sync fits the slow link in a few seconds;
# 8 MiB/s of dirtied pages is far more than 2 Mbit/s even compressed.
pcon=$(free_port)
"$BIN" primary --guest dirty:mb=16,rate_mb=8,report_ms=200 --mem 64M --console tcp:127.0.0.1:$pcon \
	--peer 10.231.0.2:7700 --insecure --timeout-ms 5000 --control "$tmp/pri.ctl" 2>"$tmp/pri.log" &
pp=$!
for _ in $(seq 600); do grep -q "protected:" "$tmp/pri.log" && break; sleep 0.1; done
grep -q "protected:" "$tmp/pri.log" || fail "never protected over the slow link: $(tail -3 "$tmp/pri.log")"
st() { "$BIN" status --control "$tmp/pri.ctl" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
a0=$(st acked); sleep 6; a1=$(st acked)
stretched=$(st stretched); state=$(st state); lag=$(st lag_ms)
rss_kb=$(ps -o rss= -p $pp)
echo "   over 6 s: acked $a0 -> $a1, stretched epochs $stretched, state $state, lag $lag ms, primary RSS $((rss_kb / 1024)) MiB"
[ "$state" = protected ] || fail "not protected: $state"
[ "$a1" -gt "$a0" ] || fail "no epoch acknowledged over the slow link"
[ "$stretched" -gt 0 ] || fail "epochs did not stretch although the link is slower than the guest"
[ "$rss_kb" -lt $((600 * 1024)) ] || fail "primary memory grew to $((rss_kb / 1024)) MiB"
ok "slow link: epochs stretch ($stretched), protection holds, memory bounded"

epoch=$(ip netns exec $ns "$BIN" status --control "$tmp/sec.ctl" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['epoch'])")
kill -9 $pp
for _ in $(seq 100); do grep -q "TOOK OVER" "$tmp/sec.log" && break; sleep 0.1; done
grep -q "TOOK OVER" "$tmp/sec.log" || fail "no takeover after the kill"
ok "takeover after the kill: $(grep -o 'guest resumed from epoch [0-9]*' "$tmp/sec.log") (it held $epoch shortly before)"
