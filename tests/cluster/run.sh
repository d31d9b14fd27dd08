#!/usr/bin/env bash
# make check-cluster: ocf/understudy in a real two-node Pacemaker cluster on
# this one machine. Each node is its own network namespace (10.213.0.1 and
# .2 on a bridge in a third namespace, ust-c, where the test's console
# client runs) with its own mount and UTS namespaces (tests/cluster/node.sh):
# corosync (two_node: 1) and pacemakerd started by hand. Fencing is real:
# fence_understudy_test kills every process of the fenced node.
# Scenarios:
#  1. kill -9 the primary's understudy: Pacemaker promotes the standby
#     (--takeover manual: it takes over only then) and the counter goes on;
#     failover time = kill -> first console byte from the new primary.
#  2. the whole primary node dies (every process killed, a power-off): the
#     survivor fences it, then promotes; same checks and figure.
#  3. the link of the standby node is cut (ip link down): the two nodes
#     race to fence each other; priority-fencing-delay favours the node of
#     the promoted instance, and exactly one node runs the guest afterwards.
# Everything (processes, namespaces, files) is removed at the end, even on
# failure.
set -u
# the agent's daemons outlive their starter: reap them here, not as zombies of PID 1
if [ -z "${UNDERSTUDY_REAPED:-}" ]; then
	UNDERSTUDY_REAPED=1 exec python3 "$(dirname "$0")/reaper.py" bash "$0" "$@"
fi
cd "$(dirname "$0")/../.." || exit 1
BIN=$PWD/${BUILD:-build}/understudy
fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok - $*"; }

missing=()
for c in corosync corosync-cfgtool pacemakerd cibadmin crm_mon crm_attribute crm_resource \
	stonith_admin ip unshare nsenter python3; do
	command -v "$c" >/dev/null || missing+=("$c")
done
[ -f /usr/lib/ocf/lib/heartbeat/ocf-shellfuncs ] || missing+=("ocf-shellfuncs (resource-agents)")
if [ ${#missing[@]} -gt 0 ]; then
	echo "SKIP: missing ${missing[*]}: apt-get install corosync pacemaker pacemaker-cli-utils resource-agents iproute2 util-linux"
	exit 77
fi
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (network and mount namespaces)"; exit 77; }
[ -r /dev/kvm ] && [ -w /dev/kvm ] || { echo "SKIP: /dev/kvm not usable here"; exit 77; }
[ -x "$BIN" ] || fail "no $BIN (make)"

state=$(mktemp -d /tmp/understudy-cluster.XXXXXX)
chmod 755 "$state"
NS=(ust-n1 ust-n2)
cleanup() {
	for i in 1 2; do
		[ -f "$state/ns.node$i" ] && echo "action=off
port=node$i" | "$state/sbin/fence_understudy_test" >/dev/null 2>&1
	done
	for n in "${NS[@]}" ust-c; do ip netns del "$n" 2>/dev/null; done
	if [ -n "${KEEP:-}" ]; then echo "kept $state"; else rm -rf "$state"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM
for n in "${NS[@]}" ust-c; do ip netns del "$n" 2>/dev/null; done

# ---- network: two nodes and a switch --------------------------------------
ip netns add ust-c || fail "ip netns add"
ip -n ust-c link set lo up
ip -n ust-c link add br0 type bridge
ip -n ust-c addr add 10.213.0.254/24 dev br0
ip -n ust-c link set br0 up
for i in 1 2; do
	ip netns add ust-n$i
	ip -n ust-n$i link set lo up
	ip -n ust-n$i link add eth0 type veth peer name port$i netns ust-c || fail "veth"
	ip -n ust-n$i addr add 10.213.0.$i/24 dev eth0
	ip -n ust-n$i link set eth0 up
	ip -n ust-c link set port$i master br0
	ip -n ust-c link set port$i up
	mkdir -p "$state/node$i"
	chmod 777 "$state/node$i"
done
ip netns exec ust-c ping -c1 -W2 10.213.0.2 >/dev/null 2>&1 || fail "no path from the switch to node2"

# ---- the nodes' files -----------------------------------------------------
mkdir -p "$state/sbin" "$state/ocf/understudy"
sed "s|@STATE@|$state|" tests/cluster/fence_understudy_test > "$state/sbin/fence_understudy_test"
chmod 755 "$state/sbin/fence_understudy_test"
install -m 755 ocf/understudy "$state/ocf/understudy/understudy"
cat > "$state/corosync.conf" <<CONF
totem {
	version: 2
	cluster_name: understudy-test
	transport: knet
	crypto_cipher: none
	crypto_hash: none
	token: ${TOKEN_MS:-1000}
}
nodelist {
	node {
		ring0_addr: 10.213.0.1
		name: node1
		nodeid: 1
	}
	node {
		ring0_addr: 10.213.0.2
		name: node2
		nodeid: 2
	}
}
quorum {
	provider: corosync_votequorum
	two_node: 1
}
logging {
	to_stderr: yes
	to_syslog: no
	to_logfile: no
	timestamp: on
}
CONF

start_node() {
	rm -f "$state/node$1/started"
	setsid ip netns exec ust-n$1 unshare --mount --uts sh tests/cluster/node.sh "$1" "$state" \
		>"$state/node$1/node.out" 2>&1 </dev/null &
	for _ in $(seq 100); do [ -f "$state/node$1/started" ] && return 0; sleep 0.1; done
	fail "node$1 did not start: $(tail -5 "$state/node$1/node.out" "$state/node$1/corosync.out")"
}
# on N CMD...: run CMD inside node N (its network, mount and UTS namespaces)
on() { local n=$1; shift; nsenter -t "$(cat "$state/node$n/holder.pid")" -n -m -u -- "$@"; }
client() { ip netns exec ust-c python3 tests/cluster/console.py "$@"; }
# role N: "primary/protected", "secondary/standby/12", ... or "none"
role() {
	local js
	js=$(on "$1" "$BIN" status --control /run/understudy/us.sock --json 2>/dev/null) || { echo none; return; }
	echo "$js" | python3 -c 'import json,sys; j=json.load(sys.stdin); print("%s/%s/%s" % (j["role"], j["state"], j["epoch"]))'
}
alive() { [ -f "$state/node$1/holder.pid" ] && kill -0 "$(cat "$state/node$1/holder.pid")" 2>/dev/null &&
	! grep -q '^State:[[:space:]]*Z' "/proc/$(cat "$state/node$1/holder.pid")/status" 2>/dev/null; }
wait_for() {   # seconds description command...: until command succeeds
	local secs=$1 what=$2 i; shift 2
	for i in $(seq $((secs * 5))); do "$@" && return 0; sleep 0.2; done
	dump
	fail "timeout ($secs s): $what"
}
both_online() { on "$1" crm_mon -1 2>/dev/null | grep -q "Online: \[ node1 node2 \]"; }
# protected_pair: sets P (node of the protected primary) and S (standby holding a checkpoint)
protected_pair() {
	local r1 r2
	r1=$(role 1) r2=$(role 2)
	case "$r1 $r2" in
	primary/protected/*\ secondary/standby/[1-9]*) P=1 S=2 ;;
	secondary/standby/[1-9]*\ primary/protected/*) P=2 S=1 ;;
	*) return 1 ;;
	esac
}
is_standby() { case "$(role "$1")" in secondary/*) return 0 ;; esac; return 1; }
dump() {
	echo "--- roles: node1 $(role 1), node2 $(role 2)"
	for i in 1 2; do alive $i && on $i crm_mon -1 2>&1 | sed "s/^/node$i| /" | head -30; done
	cat "$state/fence.log" 2>/dev/null
}

t=$(date +%s)
start_node 1
start_node 2
wait_for 90 "both nodes online" both_online 1
ok "two corosync/pacemaker nodes up in their namespaces ($(( $(date +%s) - t )) s)"

# ---- configuration ----------------------------------------------------------
for p in stonith-enabled=true no-quorum-policy=stop priority-fencing-delay=${FENCE_DELAY:-2s} stonith-timeout=30s \
	cluster-recheck-interval=30s; do
	on 1 crm_attribute --type crm_config --name "${p%%=*}" --update "${p#*=}" >/dev/null ||
		fail "property $p"
done
on 1 cibadmin --create -o resources --xml-text "
<primitive id='fence-test' class='stonith' type='fence_understudy_test'>
  <instance_attributes id='fence-test-ia'>
    <nvpair id='fence-test-hl' name='pcmk_host_list' value='node1 node2'/>
    <nvpair id='fence-test-hc' name='pcmk_host_check' value='static-list'/>
  </instance_attributes>
  <operations><op id='fence-test-mon' name='monitor' interval='60s'/></operations>
</primitive>" || fail "fence device"
on 1 cibadmin --create -o resources --xml-text "
<clone id='us-clone'>
  <meta_attributes id='us-clone-meta'>
    <nvpair id='us-clone-promotable' name='promotable' value='true'/>
    <nvpair id='us-clone-pmax' name='promoted-max' value='1'/>
    <nvpair id='us-clone-cmax' name='clone-max' value='2'/>
    <nvpair id='us-clone-cnmax' name='clone-node-max' value='1'/>
    <nvpair id='us-clone-prio' name='priority' value='10'/>
  </meta_attributes>
  <primitive id='us' class='ocf' provider='understudy' type='understudy'>
    <instance_attributes id='us-ia'>
      <nvpair id='us-bin' name='binary' value='$BIN'/>
      <nvpair id='us-guest' name='guest' value='counter'/>
      <nvpair id='us-nodes' name='nodes' value='node1=10.213.0.1:7100 node2=10.213.0.2:7100'/>
      <nvpair id='us-console' name='console' value='tcp:0.0.0.0:7101'/>
      <nvpair id='us-insecure' name='insecure' value='true'/>
      <nvpair id='us-fresh' name='allow_fresh_boot' value='true'/>
    </instance_attributes>
    <meta_attributes id='us-meta'>
      <nvpair id='us-stick' name='resource-stickiness' value='100'/>
    </meta_attributes>
    <operations>
      <op id='us-start' name='start' interval='0' timeout='20s'/>
      <op id='us-stop' name='stop' interval='0' timeout='20s'/>
      <op id='us-promote' name='promote' interval='0' timeout='40s'/>
      <op id='us-demote' name='demote' interval='0' timeout='30s'/>
      <op id='us-mon-p' name='monitor' interval='1s' role='Master' timeout='10s'/>
      <op id='us-mon-s' name='monitor' interval='2s' role='Slave' timeout='10s'/>
    </operations>
  </primitive>
</clone>" || fail "resource"
t=$(date +%s)
wait_for 120 "a protected pair (fresh boot on one node, standby on the other)" protected_pair
ok "fresh boot: primary on node$P protected by the standby on node$S ($(( $(date +%s) - t )) s)"

# ---- reset: stop the resource (powers the guest off), start it again ---------
stopped() { [ "$(role 1)" = none ] && [ "$(role 2)" = none ]; }
ran_marker() { on "$1" crm_attribute --type crm_config --name understudy-us-ran --query --quiet 2>/dev/null; }
fresh_pair() {   # node to ask
	local v
	on "$1" crm_resource --resource us-clone --meta --set-parameter target-role --parameter-value Stopped >/dev/null
	wait_for 60 "the resource stopped on both nodes" stopped
	v=$(ran_marker "$1")
	[ -z "$v" ] || fail "the ran marker survived a clean stop: '$v'"
	on "$1" crm_resource --resource us-clone --meta --set-parameter target-role --parameter-value Started >/dev/null
	wait_for 120 "a protected pair again" protected_pair
	v=$(ran_marker "$1")
	[ "$v" = true ] || fail "the ran marker is not set with a protected guest: '$v'"
	ok "stop and start: the guest booted fresh once more, primary node$P, standby node$S"
}
rejoin() {   # node
	start_node "$1"
	wait_for 90 "node$1 back in the cluster" both_online "$1"
	wait_for 60 "node$1 back as a standby" is_standby "$1"
	ok "node$1 rejoined as a standby ($(role "$1"))"
}
# ---- 1. kill -9 the primary's understudy, TRIALS times (default 5) ---------
figures=()
for trial in $(seq "${TRIALS:-5}"); do
	[ "$trial" -gt 1 ] && fresh_pair "$P"
	out=$(client incr 10.213.0.$P 7101 5) || fail "client of node$P"
	[ "${out%% *}" = 5 ] || fail "counter on node$P: $out"
	sleep 1   # the standby's checkpoint after the last reply
	pid=$(on $P cat /run/understudy/us.pid) || fail "no pid file on node$P"
	res=$(client failover 10.213.0.$S 7101 "$pid") || { dump; fail "no failover to node$S"; }
	read -r n _ ms <<<"$res"
	[ "$n" = 5 ] || fail "after the failover the counter reads $n, want 5"
	out=$(client incr 10.213.0.$S 7101 1)
	[ "${out%% *}" = 6 ] || fail "incr on the new primary: $out"
	figures+=("$ms")
	ok "trial $trial: kill -9 of the primary on node$P: Pacemaker promoted node$S, the counter went on (5 -> 6), $ms ms"
	wait_for 30 "node$P back as a standby" is_standby $P
	ok "node$P is a standby again ($(role $P)); node$S runs the guest ($(role $S))"
done
echo "result: process kill -> first console byte from the promoted standby, ${#figures[@]} trials (ms): $(printf '%s\n' "${figures[@]}" | sort -n | tr '\n' ' ')(monitor interval 1 s)"


fresh_pair "$P"

# ---- 2. the primary's node dies -----------------------------------------------
out=$(client incr 10.213.0.$P 7101 3) || fail "client of node$P"
[ "${out%% *}" = 3 ] || fail "counter on node$P: $out"
sleep 1
(sleep 0.05; echo "action=off
port=node$P" | "$state/sbin/fence_understudy_test") &
res=$(client failover 10.213.0.$S 7101) || { dump; fail "no failover to node$S after node$P died"; }
read -r n _ ms <<<"$res"
[ "$n" = 3 ] || fail "after node$P died the counter reads $n, want 3"
grep -q "node$S fence .* node$P: done" "$state/fence.log" || { dump; fail "node$S did not fence node$P"; }
echo "result: node power-off -> first console byte on node$S (corosync token ${TOKEN_MS:-1000} ms, priority-fencing-delay ${FENCE_DELAY:-2s}, fencing, promote): $ms ms"
ok "node$P died: node$S fenced it, was promoted, the counter went on at 3 ($ms ms)"
rejoin "$P"

# ---- 3. cut a link ----------------------------------------------------------------
# link_cut WHO: WHO is "standby" or "primary", whose link goes down. Both
# nodes then race to fence each other; the fencing of the node of the promoted
# instance waits priority-fencing-delay, so the primary's node wins in both
# cases and goes on running the guest, unprotected; the other is fenced.
link_cut() {
	local cut runs who i out before
	fresh_pair "$P"
	out=$(client incr 10.213.0.$P 7101 2) || fail "client of node$P"
	before=${out%% *}
	if [ "$1" = standby ]; then cut=$S; else cut=$P; fi
	echo "$(date +%s.%N) test: cut node$cut's link (the $1)" >> "$state/fence.log"
	ip -n ust-n$cut link set eth0 down
	fenced_one() { ! alive 1 || ! alive 2; }
	wait_for 60 "one node fenced after the link cut" fenced_one
	sleep 4   # the delayed fencing of the other side would have come by now
	ip -n ust-n$cut link set eth0 up 2>/dev/null   # (the fenced node's namespace is gone)
	runs=0 who=
	for i in 1 2; do
		alive $i || continue
		case "$(role $i)" in primary/*|secondary/active/*) runs=$((runs + 1)); who=$i ;; esac
	done
	alive 1 && alive 2 && { dump; fail "both nodes alive after the link cut"; }
	[ $runs = 1 ] || { dump; fail "$runs nodes run the guest after the link cut of the $1"; }
	[ "$who" = "$P" ] || { dump; fail "node$who runs the guest, not the primary's node$P"; }
	out=$(client incr 10.213.0.$who 7101 1) || fail "console of node$who after the cut"
	[ "${out%% *}" = $((before + 1)) ] || fail "counter on node$who after the cut: $out, want $((before + 1))"
	ok "link of the $1 (node$cut) cut: node$S fenced, node$P runs on alone ($(role $P)), counter $before -> $((before + 1)); one copy"
	rejoin "$S"
}
link_cut standby
link_cut primary
# ---- 4. move the promoted instance (an operator's move) ----------------------
# A demote powers the guest off (no live move yet) and its standby ends with
# it; the guest boots fresh on the other node. Never two copies meanwhile.
fresh_pair "$P"
from=$P to=$S
on $from crm_resource --cleanup >/dev/null 2>&1
sleep 2
on $from crm_resource --resource us-clone --move --promoted --node node$to >/dev/null 2>&1 ||
	on $from crm_resource --resource us-clone --move --master --node node$to >/dev/null ||
	fail "crm_resource --move"
t=$(date +%s%N) both=0
moved() {
	local r1 r2
	r1=$(role 1) r2=$(role 2)
	case "$r1" in primary/*|secondary/active/*) case "$r2" in primary/*|secondary/active/*) both=1 ;; esac ;; esac
	case "$(role $to)" in primary/protected/*) return 0 ;; esac
	return 1
}
wait_for 90 "the guest running protected on node$to after the move" moved
ms=$(( ($(date +%s%N) - t) / 1000000 ))
[ $both = 0 ] || fail "both nodes ran the guest during the move"
out=$(client get 10.213.0.$to 7101) || fail "console of node$to after the move"
sleep 3
if on $from crm_mon -1 2>/dev/null | grep -q "Failed Resource Actions"; then
	on $from crm_mon -1 | sed -n '/Failed Resource Actions/,$p'
	fail "the move left failed actions"
fi
ok "move to node$to: the guest booted fresh there ($out), protected by node$from ($(role $from)) after $ms ms; never two copies, no failed action"
on $from crm_resource --resource us-clone --clear >/dev/null 2>&1
sed 's/^/    fence log: /' "$state/fence.log"
echo "PASS: check-cluster"
