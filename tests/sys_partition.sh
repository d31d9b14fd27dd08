#!/usr/bin/env bash
# The partition matrix (issue 10), with real processes, a real etcd and
# network namespaces made here: us-p-$$ (primary), us-s-$$ (secondary),
# us-w-$$ (etcd), each joined by a veth to a bridge in us-b-$$, addresses in
# 10.214.0.0/24 (traffic only between these namespaces). A cut is an
# nftables table inside the two parties' namespaces that drops both
# directions. Cells and assertions: tests/partition.py.
# PARTITION_CELLS="link-cut/witness kill/heartbeat" runs some cells;
# PARTITION_KEEP=DIR keeps the logs there.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_host_kvm "the partition cells' leases and failover timeouts of about a second"
[ "$(id -u)" = 0 ] || { echo "SKIP: network namespaces need root"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: ip (iproute2) not installed"; exit 77; }
command -v nft >/dev/null || { echo "SKIP: nft (nftables) not installed"; exit 77; }
command -v etcd >/dev/null || { echo "SKIP: etcd-server not installed (make deps)"; exit 77; }
[ -x "$BIN" ] || fail "$BIN not built"

sfx=$$
P=us-p-$sfx S=us-s-$sfx W=us-w-$sfx B=us-b-$sfx
cleanup() {
	local ns pid
	for ns in $P $S $W $B; do
		# Only processes inside our own namespaces, by id.
		for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -CONT "$pid" 2>/dev/null; kill -9 "$pid" 2>/dev/null; done
	done
	for ns in $P $S $W $B; do ip netns del "$ns" 2>/dev/null; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for ns in $P $S $W $B; do
	ip netns add "$ns" 2>/dev/null || { echo "SKIP: cannot create network namespaces"; exit 77; }
	ip -n "$ns" link set lo up
done
ip -n $B link add br0 type bridge && ip -n $B link set br0 up || fail "bridge in $B"
i=0
for ns in $P $S $W; do
	i=$((i + 1))
	ip -n "$ns" link add eth0 type veth peer name v$i netns $B || fail "veth for $ns"
	ip -n $B link set v$i master br0 && ip -n $B link set v$i up || fail "bridge port v$i"
	ip -n "$ns" addr add 10.214.0.$i/24 dev eth0 && ip -n "$ns" link set eth0 up || fail "address in $ns"
done
# nftables must work inside a namespace for the cuts.
ip netns exec $P nft add table inet usprobe 2>/dev/null && ip netns exec $P nft delete table inet usprobe ||
	{ echo "SKIP: nftables cannot be used in a network namespace here"; exit 77; }
for _ in $(seq 1 50); do ip netns exec $P ping -c1 -W1 10.214.0.3 >/dev/null 2>&1 && break; sleep 0.1; done
ip netns exec $P ping -c1 -W1 10.214.0.2 >/dev/null 2>&1 || fail "the namespaces do not reach each other"

PARTITION_NS_P=$P PARTITION_NS_S=$S PARTITION_NS_W=$W UNDERSTUDY_BIN=$BIN \
	python3 tests/partition.py ${PARTITION_CELLS:-}
