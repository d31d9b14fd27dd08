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
#     failover time = kill -> first console byte from the new primary. The
#     failed node's instance starts again as a standby and the new primary
#     protects its guest on it by itself; the next trial kills that one.
#  2. the whole primary node dies (every process killed, a power-off): the
#     survivor fences it, then promotes; same checks and figure.
#  3. the link of the standby node is cut (ip link down): the two nodes
#     race to fence each other; priority-fencing-delay favours the node of
#     the promoted instance, and exactly one node runs the guest afterwards.
#     A node that comes back is a standby and the guest is protected on it.
#  4. an operator's move of the promoted instance is a switchover: the
#     counter goes on, never two copies.
# Everything (processes, namespaces, files) is removed at the end, even on
# failure.
set -u
# the agent's daemons outlive their starter: reap them here, not as zombies of PID 1
if [ -z "${UNDERSTUDY_REAPED:-}" ]; then
	UNDERSTUDY_REAPED=1 exec python3 "$(dirname "$0")/reaper.py" bash "$0" "$@"
fi
cd "$(dirname "$0")/../.." || exit 1
NODES=2
. tests/cluster/lib.sh

both_online() { online "$1" 1 2; }
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

cluster_up
# the guest: one counter, its standbys on port 7100, console on 7101
add_vm us 7100
t=$(date +%s)
wait_for 120 "a protected pair (fresh boot on one node, standby on the other)" protected_pair
ok "fresh boot: primary on node$P protected by the standby on node$S ($(( $(date +%s) - t )) s)"

# ---- reset: stop the resource (powers the guest off), start it again ---------
# stopped: no agent answers on either node and Pacemaker says so too (a demote
# that powered the guest off leaves a moment with none before its standby)
stopped() {
	[ "$(role 1)" = none ] && [ "$(role 2)" = none ] &&
		{ alive 1 && on 1 crm_resource --resource us-clone --locate 2>&1 ||
		  on 2 crm_resource --resource us-clone --locate 2>&1; } | grep -q "NOT running" &&
		[ "$(role 1)" = none ] && [ "$(role 2)" = none ]
}
ran_marker() { on "$1" crm_attribute --type crm_config --name understudy-us-ran --query --quiet 2>/dev/null; }
# agent_says N TEXT: how many lines of node N's agent log hold TEXT
agent_says() { on "$1" grep -c "$2" /run/understudy/us.log 2>/dev/null || true; }
fresh_pair() {   # node to ask
	local v off moved
	off=$(agent_says "$P" "demote with target-role stopped") moved=$(agent_says "$P" "demoted: the guest moved")
	on "$1" crm_resource --resource us-clone --meta --set-parameter target-role --parameter-value Stopped >/dev/null
	wait_for 60 "the resource stopped on both nodes" stopped
	# a stop powers the guest off where it runs: no hand-over first (Pacemaker
	# does not tell the agent the target-role: it reads the CIB)
	[ "$(agent_says "$P" "demote with target-role stopped")" -gt "${off:-0}" ] &&
		[ "$(agent_says "$P" "demoted: the guest moved")" = "${moved:-0}" ] ||
		{ dump; fail "the stop did not power the guest off on node$P (handed over first?)"; }
	v=$(ran_marker "$1")
	[ -z "$v" ] || fail "the ran marker survived a clean stop: '$v'"
	on "$1" crm_resource --resource us-clone --meta --set-parameter target-role --parameter-value Started >/dev/null
	wait_for 120 "a protected pair again" protected_pair
	v=$(ran_marker "$1")
	[ "$v" = true ] || fail "the ran marker is not set with a protected guest: '$v'"
	ok "stop and start: the guest booted fresh once more, primary node$P, standby node$S"
}
rejoin() {   # node: it comes back as a standby, and the guest is protected on it
	local t
	t=$(date +%s)
	start_node "$1"
	wait_for 90 "node$1 back in the cluster" both_online "$1"
	wait_for 60 "node$1 back as a standby" is_standby "$1"
	wait_for 90 "the guest protected again on node$1" protected_pair
	[ "$S" = "$1" ] || { dump; fail "node$1 rejoined but the guest runs there"; }
	ok "node$1 rejoined as a standby and node$P protected the guest on it ($(role "$1"), $(( $(date +%s) - t )) s after the restart)"
}
scenario1() {
	# ---- 1. kill -9 the primary's understudy, TRIALS times (default 5) ---------
	# Pacemaker promotes the standby; the failed node's instance is started again
	# as a standby and the promoted instance protects its guest on it by itself
	# (the agent's re-protection): the next trial kills that protected primary, so
	# each trial's counter goes on from the last one's.
	figures=() refigs=()
	for trial in $(seq "${TRIALS:-5}"); do
		before=$(client get 10.213.0.$P 7101) || fail "client of node$P"
		before=${before%% *}
		out=$(client incr 10.213.0.$P 7101 5) || fail "client of node$P"
		[ "${out%% *}" = $((before + 5)) ] || fail "counter on node$P: $out, want $((before + 5))"
		sleep 1   # the standby's checkpoint after the last reply
		pid=$(on $P cat /run/understudy/us.pid) || fail "no pid file on node$P"
		t0=$(date +%s%N)
		res=$(client failover 10.213.0.$S 7101 "$pid") || { dump; fail "no failover to node$S"; }
		read -r n _ ms <<<"$res"
		[ "$n" = $((before + 5)) ] || fail "after the failover the counter reads $n, want $((before + 5))"
		out=$(client incr 10.213.0.$S 7101 1)
		[ "${out%% *}" = $((before + 6)) ] || fail "incr on the new primary: $out"
		figures+=("$ms")
		ok "trial $trial: kill -9 of the primary on node$P: Pacemaker promoted node$S, the counter went on ($((before + 5)) -> $((before + 6))), $ms ms"
		old=$P
		wait_for 90 "node$S's guest protected again on node$old's new standby" protected_pair
		[ "$P" != "$old" ] || { dump; fail "node$old runs the guest again after its failover"; }
		re=$(( ($(date +%s%N) - t0) / 1000000 ))
		refigs+=("$re")
		ok "node$P's guest is protected again by node$S ($(role $S)), $re ms after the kill, without a person"
	done
	echo "result: process kill -> first console byte from the promoted standby, ${#figures[@]} trials (ms): $(printf '%s\n' "${figures[@]}" | sort -n | tr '\n' ' ')(monitor interval $((1 * SLOW)) s)"
	echo "result: process kill -> protected again (re-protection onto the restarted node), ${#refigs[@]} trials (ms): $(printf '%s\n' "${refigs[@]}" | sort -n | tr '\n' ' ')"
}
# ---- 2. the primary's node dies -----------------------------------------------
scenario2() {
	fresh_pair "$P"
	out=$(client incr 10.213.0.$P 7101 3) || fail "client of node$P"
	[ "${out%% *}" = 3 ] || fail "counter on node$P: $out"
	sleep 1
	(sleep 0.05; power_off "$P" >/dev/null) &
	res=$(client failover 10.213.0.$S 7101) || { dump; fail "no failover to node$S after node$P died"; }
	read -r n _ ms <<<"$res"
	[ "$n" = 3 ] || fail "after node$P died the counter reads $n, want 3"
	grep -q "node$S fence .* node$P: done" "$state/fence.log" || { dump; fail "node$S did not fence node$P"; }
	echo "result: node power-off -> first console byte on node$S (corosync token ${TOKEN_MS:-$((1000 * SLOW))} ms, priority-fencing-delay $FENCE_DELAY, fencing, promote): $ms ms"
	ok "node$P died: node$S fenced it, was promoted, the counter went on at 3 ($ms ms)"
	rejoin "$P"
}

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
	sleep $((4 * SLOW))   # the delayed fencing of the other side would have come by now
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
scenario3() { link_cut standby; link_cut primary; }

# ---- 4. move the promoted instance (an operator's move) ----------------------
# The demote hands the guest over to the standby (understudy switchover), the
# promote there finds it running: a live move, the counter goes on, and the
# node moved from waits as the guest's standby. Never two copies meanwhile.
scenario4() {
	fresh_pair "$P"
	from=$P to=$S
	out=$(client incr 10.213.0.$from 7101 7) || fail "client of node$from"
	before=${out%% *}
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
		case "$(role $to) $(role $from)" in primary/protected/*\ secondary/standby/[1-9]*) return 0 ;; esac
		return 1
}
wait_for 90 "the guest running on node$to, protected by node$from, after the move" moved
ms=$(( ($(date +%s%N) - t) / 1000000 ))
[ $both = 0 ] || fail "both nodes ran the guest during the move"
out=$(client get 10.213.0.$to 7101) || fail "console of node$to after the move"
[ "${out%% *}" = "$before" ] || fail "after the move the counter reads '$out', want $before (a switchover keeps it)"
sleep 3
if on $from crm_mon -1 2>/dev/null | grep -q "Failed Resource Actions"; then
	on $from crm_mon -1 | sed -n '/Failed Resource Actions/,$p'
	fail "the move left failed actions"
fi
ok "move to node$to: a switchover, the counter went on ($before), protected by node$from ($(role $from)) after $ms ms; never two copies, no failed action"
on $from crm_resource --resource us-clone --clear >/dev/null 2>&1
}

# SCENARIOS: which of them, in order (default all)
for sc in ${SCENARIOS:-1 2 3 4}; do "scenario$sc"; done
sed 's/^/    fence log: /' "$state/fence.log"
echo "PASS: check-cluster"
