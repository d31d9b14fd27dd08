# The test cluster of make check-cluster, sourced by run.sh (two nodes, one
# guest) and fleet.sh (three nodes, several guests). NODES nodes, each its
# own network namespace ust-nI (10.213.0.I on a bridge in ust-c, where the
# tests' console clients run) with its own mount and UTS namespaces
# (node.sh): corosync and pacemakerd started by hand. Fencing is real:
# fence_understudy_test kills every process of the fenced node. Everything
# (processes, namespaces, files) is removed at the end, even on failure.
# The caller sets NODES and runs from the top of the tree.
BIN=$PWD/${BUILD:-build}/understudy
# the waits stretch SLOW times in the nested VM of make check-nested (QEMU's
# emulator: no time from there is a performance figure)
if [ "${UNDERSTUDY_NESTED:-}" = 1 ]; then SLOW=${SLOW:-5}; else SLOW=1; fi
# how long the node of the promoted instance waits before it fences the other
# after a split (the other fences at once): longer than one fencing takes, or
# both nodes power each other off (seen in the nested VM with 2 s)
FENCE_DELAY=${FENCE_DELAY:-$((2 * SLOW))s}
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
ALL=$(seq "$NODES")
cleanup() {
	local i rc=$? keep
	if [ "$rc" != 0 ]; then
		# what each node and its agents said (node.sh), for the report
		keep=${BUILD:-build}/test-logs/cluster-$(basename "$0" .sh)
		rm -rf "$keep" && mkdir -p "$keep" && cp -r "$state"/node* "$state/fence.log" "$keep"/ 2>/dev/null &&
			echo "the nodes' and agents' logs: $keep"
	fi
	for i in $ALL; do
		[ -f "$state/ns.node$i" ] && power_off "$i" >/dev/null 2>&1
	done
	for i in $ALL; do ip netns del "ust-n$i" 2>/dev/null; done
	ip netns del ust-c 2>/dev/null
	if [ -n "${KEEP:-}" ]; then echo "kept $state"; else rm -rf "$state"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM
for i in $ALL; do ip netns del "ust-n$i" 2>/dev/null; done
ip netns del ust-c 2>/dev/null

# ---- network: NODES nodes and a switch ---------------------------------------
ip netns add ust-c || fail "ip netns add"
ip -n ust-c link set lo up
ip -n ust-c link add br0 type bridge
ip -n ust-c addr add 10.213.0.254/24 dev br0
ip -n ust-c link set br0 up
for i in $ALL; do
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
ip netns exec ust-c ping -c1 -W2 10.213.0.$NODES >/dev/null 2>&1 || fail "no path from the switch to node$NODES"

# ---- the nodes' files -----------------------------------------------------
mkdir -p "$state/sbin" "$state/ocf/understudy"
sed "s|@STATE@|$state|" tests/cluster/fence_understudy_test > "$state/sbin/fence_understudy_test"
chmod 755 "$state/sbin/fence_understudy_test"
install -m 755 ocf/understudy "$state/ocf/understudy/understudy"
{
	cat <<CONF
totem {
	version: 2
	cluster_name: understudy-test
	transport: knet
	crypto_cipher: none
	crypto_hash: none
	token: ${TOKEN_MS:-$((1000 * SLOW))}
}
nodelist {
CONF
	for i in $ALL; do
		printf '\tnode {\n\t\tring0_addr: 10.213.0.%s\n\t\tname: node%s\n\t\tnodeid: %s\n\t}\n' "$i" "$i" "$i"
	done
	echo "}"
	printf 'quorum {\n\tprovider: corosync_votequorum\n'
	[ "$NODES" = 2 ] && printf '\ttwo_node: 1\n'
	printf '}\nlogging {\n\tto_stderr: yes\n\tto_syslog: no\n\tto_logfile: no\n\ttimestamp: on\n}\n'
} > "$state/corosync.conf"

start_node() {
	rm -f "$state/node$1/started"
	setsid ip netns exec ust-n$1 unshare --mount --uts sh tests/cluster/node.sh "$1" "$state" \
		>"$state/node$1/node.out" 2>&1 </dev/null &
	for _ in $(seq 100); do [ -f "$state/node$1/started" ] && return 0; sleep 0.1; done
	fail "node$1 did not start: $(tail -5 "$state/node$1/node.out" "$state/node$1/corosync.out")"
}
# on N CMD...: run CMD inside node N (its network, mount and UTS namespaces)
on() { local n=$1; shift; nsenter -t "$(cat "$state/node$n/holder.pid")" -n -m -u -- "$@"; }
client() { FAILOVER_LIMIT_S=$((60 * SLOW)) ip netns exec ust-c python3 tests/cluster/console.py "$@"; }
# role N [VM]: "primary/protected/EPOCH", "secondary/standby/12", ... or "none"
role() {
	local js
	js=$(on "$1" "$BIN" status --control "/run/understudy/${2:-us}.sock" --json 2>/dev/null) ||
		{ echo none; return; }
	echo "$js" | python3 -c 'import json,sys; j=json.load(sys.stdin); print("%s/%s/%s" % (j["role"], j["state"], j["epoch"]))'
}
alive() { [ -f "$state/node$1/holder.pid" ] && kill -0 "$(cat "$state/node$1/holder.pid")" 2>/dev/null &&
	! grep -q '^State:[[:space:]]*Z' "/proc/$(cat "$state/node$1/holder.pid")/status" 2>/dev/null; }
wait_for() {   # seconds description command...: until command succeeds (SLOW times longer)
	local secs=$(($1 * SLOW)) what=$2 end; shift 2
	end=$(( $(date +%s) + secs ))
	while [ "$(date +%s)" -lt "$end" ]; do "$@" && return 0; sleep 0.2; done
	dump
	fail "timeout ($secs s): $what"
}
# online N NODE...: node N's view lists exactly these nodes online
online() {
	local n=$1 want
	shift
	want="Online: \[ $(printf 'node%s ' "$@")\]"
	on "$n" crm_mon -1 2>/dev/null | grep -q "$want"
}
# power_off N: the fence device's "off" of node N (one option a line, no indent)
power_off() { printf 'action=off\nport=node%s\n' "$1" | "$state/sbin/fence_understudy_test"; }

# cluster_up: every node started and online, the cluster's properties and the
# fence device configured
cluster_up() {
	local t i p
	t=$(date +%s)
	for i in $ALL; do start_node "$i"; done
	# shellcheck disable=SC2086
	wait_for $((60 + 30 * NODES)) "all nodes online" online 1 $ALL
	ok "$NODES corosync/pacemaker nodes up in their namespaces ($(( $(date +%s) - t )) s)"
	for p in stonith-enabled=true no-quorum-policy=stop priority-fencing-delay=$FENCE_DELAY \
		stonith-timeout=30s cluster-recheck-interval=30s; do
		on 1 crm_attribute --type crm_config --name "${p%%=*}" --update "${p#*=}" >/dev/null ||
			fail "property $p"
	done
	on 1 cibadmin --create -o resources --xml-text "
<primitive id='fence-test' class='stonith' type='fence_understudy_test'>
  <instance_attributes id='fence-test-ia'>
    <nvpair id='fence-test-hl' name='pcmk_host_list' value='$(printf 'node%s ' $ALL)'/>
    <nvpair id='fence-test-hc' name='pcmk_host_check' value='static-list'/>
  </instance_attributes>
  <operations><op id='fence-test-mon' name='monitor' interval='60s'/></operations>
</primitive>" || fail "fence device"
}

# add_vm NAME PORT: the guest NAME (a counter) as a promotable clone NAME-clone:
# each node's standby listens on PORT, the console on PORT+1. The monitors'
# intervals stretch SLOW times too: every monitor forks the agent, understudy
# status and crm_attribute, and with an instance per VM per node at 1 s and
# 2 s they alone outran the emulator's one TCG thread, so monitors queued
# past their timeouts (three nodes, six guests).
add_vm() {
	local v=$1 port=$2 nodes i
	nodes=$(for i in $ALL; do printf 'node%s=10.213.0.%s:%s ' "$i" "$i" "$port"; done)
	on 1 cibadmin --create -o resources --xml-text "
<clone id='$v-clone'>
  <meta_attributes id='$v-clone-meta'>
    <nvpair id='$v-clone-promotable' name='promotable' value='true'/>
    <nvpair id='$v-clone-pmax' name='promoted-max' value='1'/>
    <nvpair id='$v-clone-cmax' name='clone-max' value='2'/>
    <nvpair id='$v-clone-cnmax' name='clone-node-max' value='1'/>
    <nvpair id='$v-clone-prio' name='priority' value='10'/>
  </meta_attributes>
  <primitive id='$v' class='ocf' provider='understudy' type='understudy'>
    <instance_attributes id='$v-ia'>
      <nvpair id='$v-bin' name='binary' value='$BIN'/>
      <nvpair id='$v-guest' name='guest' value='counter'/>
      <nvpair id='$v-nodes' name='nodes' value='${nodes% }'/>
      <nvpair id='$v-console' name='console' value='tcp:0.0.0.0:$((port + 1))'/>
      <nvpair id='$v-insecure' name='insecure' value='true'/>
      <nvpair id='$v-fresh' name='allow_fresh_boot' value='true'/>
      <nvpair id='$v-reprotect' name='reprotect_interval' value='${REPROTECT_S:-3}'/>$(
	[ "$SLOW" -gt 1 ] && printf "
      <nvpair id='%s-pargs' name='primary_args' value='--timeout-ms 3000'/>
      <nvpair id='%s-rargs' name='protect_args' value='--timeout-ms 3000'/>" "$v" "$v")
    </instance_attributes>
    <meta_attributes id='$v-meta'>
      <nvpair id='$v-stick' name='resource-stickiness' value='100'/>
    </meta_attributes>
    <operations>
      <op id='$v-start' name='start' interval='0' timeout='$((20 * SLOW))s'/>
      <op id='$v-stop' name='stop' interval='0' timeout='$((20 * SLOW))s'/>
      <op id='$v-promote' name='promote' interval='0' timeout='$((40 * SLOW))s'/>
      <op id='$v-demote' name='demote' interval='0' timeout='$((30 * SLOW))s' on-fail='block'/>
      <op id='$v-mon-p' name='monitor' interval='$((1 * SLOW))s' role='Master' timeout='$((10 * SLOW))s'/>
      <op id='$v-mon-s' name='monitor' interval='$((2 * SLOW))s' role='Slave' timeout='$((10 * SLOW))s'/>
    </operations>
  </primitive>
</clone>" || fail "resource $v"
}
