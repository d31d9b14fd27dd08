#!/usr/bin/env bash
# The Pacemaker resource agent (ocf/understudy) outside a cluster: ocf-tester
# (Debian resource-agents) runs every action of it against a real standby on
# loopback (start, monitor, promote = a fresh boot protected by a second
# standby that stands for the other node, demote = a switchover to it,
# stop, twice and idempotent), then the agent's own rules are checked by
# hand: a promote from a standby that holds a checkpoint is a takeover and
# the counter goes on; the promoted instance protects its guest again on a
# standby that comes back, by itself; a demote hands the guest over with
# the counter going on, and refuses (the guest runs on) when no standby can
# hold it; a node with no checkpoint is never promoted unless a fresh boot
# is allowed and the guest never ran.
set -u
# the agent's daemons outlive their starter: reap them here, not as zombies of PID 1
if [ -z "${UNDERSTUDY_REAPED:-}" ]; then
	UNDERSTUDY_REAPED=1 exec python3 "$(dirname "$0")/cluster/reaper.py" bash "$0" "$@"
fi
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
command -v ocf-tester >/dev/null || { echo "SKIP: ocf-tester not installed (Debian resource-agents)"; exit 77; }
[ -f /usr/lib/ocf/lib/heartbeat/ocf-shellfuncs ] || { echo "SKIP: no ocf-shellfuncs (resource-agents)"; exit 77; }
AGENT=${UNDERSTUDY_OCF_AGENT:-$PWD/ocf/understudy}   # another: a mutant of it
tmp=$(mktemp -d)
chmod 755 "$tmp"
peer_loop=
cleanup() {
	[ -n "$peer_loop" ] && kill "$peer_loop" 2>/dev/null
	for f in "$tmp"/*/*.pid "$tmp"/peer.pid "$tmp"/pri.pid; do
		[ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
	done
	wait 2>/dev/null
	[ -n "${KEEP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
FAIL_LOGS="$tmp/*.log $tmp/state/*.log"
# The primaries' silence bounds: 1 s for the agent's fresh primaries and the
# default 500 ms for the others on a host's KVM; 3 s in the nested VM (tests/lib.sh
# nested), where QEMU's emulator stalls an agent for a second or more and a
# short bound gives up the live standby (the counter then never reaches
# it); waits X times longer there.
T=$(nested 500 3000)
X=$(nested 1 4)

lport=$(free_port); lcon=$(free_port); pport=$(free_port); pcon=$(free_port)
params=(binary="$BIN" insecure=true "listen=127.0.0.1:$lport" "peer=127.0.0.1:$pport"
	"console=tcp:127.0.0.1:$lcon" statedir="$tmp/state" allow_fresh_boot=true protect_timeout=15
	primary_args="--timeout-ms $(nested 1000 3000)")

# The other node's standby: started again whenever it ends (a standby whose
# primary stopped the guest ends, and so does a primary that ocf-tester's
# promote, a takeover, fenced).
(
	while :; do
		"$BIN" secondary --listen 127.0.0.1:$pport --console tcp:127.0.0.1:$pcon --insecure \
			--takeover manual --control "$tmp/peer.ctl" >>"$tmp/peer.log" 2>&1 &
		echo $! > "$tmp/peer.pid"
		wait $!
		sleep 0.2
	done
) &
peer_loop=$!
wait_port $pport $((10 * X)) || fail "the peer standby did not listen"

o=()
for p in "${params[@]}"; do o+=(-o "$p"); done
if ! ocf-tester -v -n understudy_t "${o[@]}" "$AGENT" >"$tmp/tester.log" 2>&1; then
	cat "$tmp/tester.log"
	fail "ocf-tester"
fi
grep -q "passed all tests" "$tmp/tester.log" || { cat "$tmp/tester.log"; fail "ocf-tester did not pass"; }
grep -q "Testing: promotion of promoted resource" "$tmp/tester.log" || fail "ocf-tester did not run promote"
n=$(grep -c "protected: secondary holds" "$tmp/state/understudy_t.log")
[ "$n" -ge 2 ] || fail "expected at least 2 protections by the peer standby, saw $n"
d=$(grep -c "demoted: the guest moved to its standby" "$tmp/state/understudy_t.log")
[ "$d" -ge 2 ] || fail "expected 2 demotes that hand the guest over, saw $d"
ok "ocf-tester: $(grep -m1 "passed all tests" "$tmp/tester.log") ($n protections, $d demotes handed over)"
# the peer ran the guest last (the final demote handed it over): a standby again
kill -9 "$(cat "$tmp/peer.pid")" 2>/dev/null
sleep 0.5
wait_port $pport $((10 * X)) || fail "the peer standby did not listen again"

# ---- the agent's own rules, action by action -----------------------------
export OCF_ROOT=/usr/lib/ocf OCF_RESOURCE_INSTANCE=understudy_u OCF_RESKEY_CRM_meta_timeout=20000
for p in "${params[@]}"; do export "OCF_RESKEY_${p%%=*}=${p#*=}"; done
ra() { "$AGENT" "$1" >>"$tmp/ra.log" 2>&1; }
# From here this node's standby address is derived: listen names the host
# alone and index + port_base make its port (the same lport), as a
# cluster's nodes="node1=10.0.0.1 ..." would; the agent passes them to
# secondary, switchover (the demote) and protect.
export OCF_RESKEY_listen=127.0.0.1 OCF_RESKEY_index=3 OCF_RESKEY_port_base=$((lport - 3))
OCF_RESKEY_index=x ra validate-all; rc=$?
[ $rc = 6 ] || fail "validate-all with index=x: $rc, want 6 (OCF_ERR_CONFIGURED)"
OCF_RESKEY_index= ra validate-all; rc=$?
[ $rc = 6 ] || fail "validate-all with port_base and no index: $rc, want 6"
# The other node powers the guest off (its demote): our standby ends with
# it, and a promote that follows (a move) starts over from a fresh boot.
ra start || fail "start: $(tail -5 "$tmp/ra.log")"
grep -qF -- "--listen 127.0.0.1:$lport: port $lport (--port-base $((lport - 3)) + --index 3)" \
	"$tmp/state/understudy_u.log" || fail "the standby's port is not derived from index: $(tail -5 "$tmp/state/understudy_u.log")"
# every process of the agent is named after the resource (--name): its
# standby refuses the primary of another VM, and serves one of its name
ustatus() { "$BIN" status --control "$tmp/state/understudy_u.sock" --json 2>/dev/null |
	python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
[ "$(ustatus name)" = understudy_u ] || fail "the agent's standby is named '$(ustatus name)', want understudy_u"
xcon=$(free_port)
timeout $((30 * X)) "$BIN" primary --guest counter --name other --console tcp:127.0.0.1:$xcon \
	--peer 127.0.0.1:$lport --insecure --timeout-ms $T 2>"$tmp/xpri.log"; rc=$?
[ $rc = 1 ] || fail "a primary named other against the agent's standby: exit $rc, want 1"
grep -qF "refusing primary: the primary's VM is named 'other', this secondary's 'understudy_u'" \
	"$tmp/state/understudy_u.log" || fail "the agent's standby did not refuse 'other': $(tail -3 "$tmp/state/understudy_u.log")"
ok "the agent's standby is named understudy_u (--name) and refused a primary named other"
"$BIN" primary --guest counter --name understudy_u --console tcp:127.0.0.1:$xcon --peer 127.0.0.1:$lport --insecure \
	--timeout-ms $T 2>"$tmp/xpri.log" &
xp=$!
wait_log "$tmp/xpri.log" "protected: secondary holds" $((10 * X)) || fail "never protected"
kill -TERM $xp; wait $xp 2>/dev/null
wait_log "$tmp/state/understudy_u.log" "primary stops (.*no takeover" $((10 * X)) || fail "the standby did not hear the goodbye"
sleep $(nested 0.5 2)   # it has ended with the guest
ra monitor; rc=$?
[ $rc = 1 ] || fail "probe of a standby that ended with its guest: $rc, want 1 (a probe only looks)"
OCF_RESKEY_CRM_meta_interval=2000 ra monitor; rc=$?
[ $rc = 0 ] || fail "recurring monitor of a standby that ended with its guest: $rc, want 0 (a new standby, no failure)"
[ "$(ustatus role)/$(ustatus state)" = secondary/waiting ] ||
	fail "no standby waiting for a primary after that monitor: $(ustatus role)/$(ustatus state)"
ra promote || fail "promote after the other node powered the guest off: $(tail -5 "$tmp/ra.log")"
ra monitor; rc=$?
[ $rc = 8 ] || fail "monitor after that promote: $rc, want 8"
out=$(python3 tests/counter_client.py $lcon incr) || fail "console of the fresh primary"
[ "${out%% *}" = 1 ] || fail "fresh primary's counter: $out, want 1"
ok "the standby ended with the guest (other node's stop): a recurring monitor started a new standby, promote booted fresh (counter $out); its standby listened on the port index 3 + port_base made"
# a demote while the resource is stopped on purpose (target-role Stopped)
# powers the guest off: no hand-over for the stop to undo; the peer's
# standby ends with the guest, the ran marker goes: a promote boots fresh.
# Pacemaker 2.1 does not pass target-role to the agent (the demote's
# environment has no CRM_meta_target_role), so the agent reads the CIB: here
# a file (CIB_file) with the clone stopped as `crm resource stop` leaves it.
cat >"$tmp/cib.xml" <<XML
<cib validate-with="pacemaker-3.9" epoch="1" num_updates="0" admin_epoch="0"><configuration>
<crm_config/><nodes/><resources><clone id="u-clone">
<meta_attributes id="u-clone-meta"><nvpair id="u-p" name="promotable" value="true"/></meta_attributes>
<meta_attributes id="u-clone-meta_attributes"><nvpair id="u-t" name="target-role" value="STOPPED"/></meta_attributes>
<primitive id="${OCF_RESOURCE_INSTANCE}" class="ocf" provider="understudy" type="understudy"/>
</clone></resources><constraints/></configuration><status/></cib>
XML
command -v cibadmin >/dev/null || fail "no cibadmin (make deps installs pacemaker-cli-utils)"
g=$(grep -c "primary stops" "$tmp/peer.log")
CIB_file=$tmp/cib.xml ra demote || fail "demote with target-role Stopped: $(tail -5 "$tmp/ra.log")"
grep -q "demote with target-role stopped: the guest powers off" "$tmp/state/understudy_u.log" ||
	fail "the demote with target-role Stopped does not say so: $(tail -3 "$tmp/state/understudy_u.log")"
! grep -q "demoted: the guest moved to its standby" "$tmp/state/understudy_u.log" ||
	fail "the demote with target-role Stopped handed the guest over"
for _ in $(seq $((50 * X))); do [ "$(grep -c "primary stops" "$tmp/peer.log")" -gt "$g" ] && break; sleep 0.2; done
[ "$(grep -c "primary stops" "$tmp/peer.log")" -gt "$g" ] || fail "the peer's standby was not told the guest stopped"
ra monitor; rc=$?
[ $rc = 0 ] || fail "monitor after the demote with target-role Stopped: $rc, want 0 (a standby)"
wait_port $pport $((10 * X)) || fail "the peer standby did not listen again"
ra promote || fail "promote after the guest was stopped on purpose: $(tail -5 "$tmp/ra.log")"
out=$(python3 tests/counter_client.py $lcon incr) || fail "console of the fresh primary"
[ "${out%% *}" = 1 ] || fail "after a stop on purpose the fresh primary's counter reads '$out', want 1"
ok "demote with target-role Stopped: the guest powered off (the peer's standby told), no hand-over; promote booted it fresh"
# demote = switchover: the guest moves to the peer's standby, the counter goes
# on there, and this node's process waits as the guest's standby. The CIB
# has a target-role Stopped in a set whose rule does not hold now (a past
# maintenance window): Pacemaker leaves that set out, and so must the agent.
sed -e 's/value="STOPPED"/value="Started"/' -e 's|<primitive id="\([^"]*\)"\(.*\)/>|<primitive id="\1"\2><meta_attributes id="u-w"><rule id="u-w-r" score="INFINITY"><date_expression id="u-w-d" operation="lt" end="2001-01-01"/></rule><nvpair id="u-w-t" name="target-role" value="Stopped"/></meta_attributes></primitive>|' \
	"$tmp/cib.xml" >"$tmp/cib-window.xml"
grep -q 'u-w-t' "$tmp/cib-window.xml" || fail "the test's CIB with a rule: $(cat "$tmp/cib-window.xml")"
python3 tests/counter_client.py $lcon incr incr >/dev/null || fail "console of the fresh primary"
CIB_file=$tmp/cib-window.xml ra demote || fail "demote of the protected primary: $(tail -5 "$tmp/ra.log")"
grep -q "demoted: the guest moved to its standby" "$tmp/state/understudy_u.log" ||
	fail "the demote did not hand the guest over: $(tail -5 "$tmp/ra.log")"
out=$(python3 tests/counter_client.py $pcon incr) || fail "console of the peer after the demote"
[ "${out%% *}" = 4 ] || fail "the counter after the demote (switchover) reads '$out' on the peer, want 4"
ra monitor; rc=$?
[ $rc = 0 ] || fail "monitor after the demote: $rc, want 0 (a standby of the guest)"
ok "demote = switchover: the guest moved to the peer's standby, the counter went on (3 -> $out); this node is its standby"
ra stop || fail "stop"
kill -9 "$(cat "$tmp/peer.pid")" 2>/dev/null   # the guest ends; the peer is a fresh standby again

kill "$peer_loop"; peer_loop=
kill -9 "$(cat "$tmp/peer.pid")" 2>/dev/null
wait 2>/dev/null
ra start || fail "start: $(tail -5 "$tmp/ra.log")"
ra monitor; rc=$?
[ $rc = 0 ] || fail "monitor of a fresh standby: $rc, want 0"

# no fresh boot when not allowed
OCF_RESKEY_allow_fresh_boot=false ra promote && fail "promoted a node without a checkpoint (allow_fresh_boot=false)"
grep -q "holds no complete checkpoint and a fresh boot is not allowed" "$tmp/ra.log" || fail "refusal does not say why"
ra monitor; rc=$?
[ $rc = 0 ] || fail "after a refused promote: monitor $rc, want 0 (still a standby)"
ok "promote refused on a node without a checkpoint (allow_fresh_boot=false)"

# a primary outside the agent's control protects itself on the agent's standby
"$BIN" primary --guest counter --name understudy_u --console tcp:127.0.0.1:$pcon --peer 127.0.0.1:$lport --insecure \
	--timeout-ms $T --control "$tmp/pri.ctl" 2>"$tmp/pri.log" &
echo $! > "$tmp/pri.pid"
for _ in $(seq $((100 * X))); do grep -q "protected: secondary holds" "$tmp/pri.log" && break; sleep 0.1; done
out=$(python3 tests/counter_client.py $pcon incr incr incr incr) || fail "client of the primary"
[ "$(echo "$out" | tail -1 | cut -d' ' -f1)" = 4 ] || fail "primary replies: $out"
kill -9 "$(cat "$tmp/pri.pid")"
sleep 1.5
ra monitor; rc=$?
[ $rc = 0 ] || fail "monitor of a standby whose primary died: $rc, want 0 (no takeover of its own)"
t0=$(date +%s%N)
ra promote || fail "promote of a standby with a checkpoint: $(tail -5 "$tmp/ra.log")"
ra monitor; rc=$?
[ $rc = 8 ] || fail "monitor after the takeover: $rc, want 8 (running promoted)"
out=$(python3 tests/counter_client.py $lcon get) || fail "console after the takeover"
t1=$(date +%s%N)
[ "$(echo "$out" | cut -d' ' -f1)" = 4 ] || fail "after the takeover the counter is '$out', want 4"
ok "promote = takeover from the checkpoint: counter 4 went on ($(( (t1 - t0) / 1000000 )) ms promote to reply)"
ra promote || fail "promote of a promoted resource"

# the only copy is never powered off: with no standby anywhere the demote
# fails (after trying to protect the guest) and the guest runs on
OCF_RESKEY_CRM_meta_timeout=$(nested 8000 16000) ra demote && fail "demoted the only copy of the guest"
grep -q "demote refused: the guest runs here and no standby holds a copy" "$tmp/ra.log" ||
	fail "the refused demote does not say why: $(tail -3 "$tmp/ra.log")"
ra monitor; rc=$?
[ $rc = 8 ] || fail "monitor after the refused demote: $rc, want 8 (the guest runs here)"
out=$(python3 tests/counter_client.py $lcon get) || fail "console after the refused demote"
[ "${out%% *}" = 4 ] || fail "after the refused demote the counter reads '$out', want 4"
ok "demote of the only copy refused: the guest runs on (counter 4)"

# re-protection: the guest runs here unprotected (its primary died, nothing
# protects it). A standby comes up where peer points: a probe leaves it
# alone, the next recurring monitor protects the guest on it by itself.
"$BIN" secondary --listen 127.0.0.1:$pport --console tcp:127.0.0.1:$pcon --insecure \
	--takeover manual --control "$tmp/peer2.ctl" >"$tmp/peer2.log" 2>&1 &
echo $! > "$tmp/peer.pid"
wait_port $pport $((10 * X)) || fail "the second peer standby did not listen"
ustate() { ustatus state; }
ra monitor; rc=$?
[ $rc = 8 ] || fail "probe of the unprotected promoted instance: $rc, want 8"
st=$(ustate)
[ "$st" = unprotected ] || fail "a probe changed the guest: state '$st', want unprotected"
for _ in $(seq $((40 * X))); do
	OCF_RESKEY_CRM_meta_interval=1000 ra monitor; rc=$?
	[ $rc = 8 ] || fail "monitor of the promoted instance while it protects its guest: $rc, want 8"
	st=$(ustate)
	[ "$st" = protected ] && break
	sleep 0.5
done
[ "$st" = protected ] || fail "the promoted instance did not protect its guest again: state '$st': $(tail -3 "$tmp/ra.log")"
grep -q "protecting it on the standby at 127.0.0.1:$pport" "$tmp/ra.log" || fail "the monitor did not say where it protects the guest"
ok "re-protection: the promoted instance protected its guest on the standby that came up (a probe left it alone)"

# the promoted instance stops answering (its control socket is gone; the
# process lives on, and a SIGTERM would stop it cleanly, telling its
# standby to drop the guest): the demote of the failed instance kills it
# as a crash would, its standby keeps the guest, the ran marker stays
g=$(grep -c "primary stops" "$tmp/peer2.log")
upid=$(cat "$tmp/state/understudy_u.pid")
rm -f "$tmp/state/understudy_u.sock"
ra monitor; rc=$?
[ $rc = 9 ] || fail "monitor of a promoted instance that does not answer: $rc, want 9 (failed promoted)"
# in a cluster where no other node reports a checkpoint (promotion score),
# it may be the only copy: the demote leaves it running and fails
OCF_RESKEY_CRM_meta_promotable=true CIB_file=$tmp/cib-window.xml ra demote &&
	fail "demoted (killed) a promoted instance that may hold the only copy"
grep -q "demote refused: the promoted instance does not answer but runs" "$tmp/ra.log" ||
	fail "the refused demote does not say why: $(tail -3 "$tmp/ra.log")"
kill -0 "$upid" 2>/dev/null || fail "the refused demote killed the instance (pid $upid)"
ok "a promoted instance that stopped answering, no checkpoint reported elsewhere: the demote refused, it runs on"
# outside a cluster (nothing to ask) and where another node reports one: killed
ra demote || fail "demote of the failed instance: $(tail -5 "$tmp/ra.log")"
! kill -0 "$upid" 2>/dev/null || fail "the failed instance (pid $upid) still runs after its demote"
[ "$(grep -c "primary stops" "$tmp/peer2.log")" = "$g" ] ||
	fail "the demote of the failed instance stopped it cleanly: its standby was told to drop the guest: $(grep "primary stops" "$tmp/peer2.log" | tail -1)"
ra monitor; rc=$?
[ $rc = 0 ] || fail "monitor after the demote: $rc, want 0"
ra promote && fail "fresh boot after the guest had run (and its instance failed)"
grep -q "the guest ran before" "$tmp/ra.log" || fail "refusal does not name the ran marker: $(tail -3 "$tmp/ra.log")"
ok "a promoted instance that stopped answering: monitor 9, the demote killed it (no goodbye to its standby), fresh boot refused (ran before)"
# the standby it was protected on holds every acknowledged reply
out=$("$BIN" takeover --control "$tmp/peer2.ctl" 2>&1) || fail "takeover on the re-protecting standby: $out"
out=$(python3 tests/counter_client.py $pcon get) || fail "console of the standby that took over"
[ "${out%% *}" = 4 ] || fail "after the re-protected guest died, its standby's counter reads '$out', want 4"
ok "the standby of the re-protected guest took over with the counter at 4"
kill -9 "$(cat "$tmp/peer.pid")" 2>/dev/null
ra stop || fail "stop"
ra monitor; rc=$?
[ $rc = 7 ] || fail "monitor after stop: $rc, want 7"
ok "stop: monitor says not running"

# ---- TLS: one certificate per node serves both roles (serverAuth and clientAuth)
if command -v openssl >/dev/null; then
	c=$tmp/certs
	mkdir -p "$c"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
		-subj "/CN=ocf test CA" -keyout "$c/ca.key" -out "$c/ca.pem" 2>/dev/null
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
		-keyout "$c/node.key" -out "$c/node.csr" 2>/dev/null
	openssl x509 -req -in "$c/node.csr" -CA "$c/ca.pem" -CAkey "$c/ca.key" -CAcreateserial -days 30 \
		-extfile <(printf 'extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n') \
		-out "$c/node.pem" 2>/dev/null || fail "openssl could not make the node certificate"
	"$BIN" secondary --listen 127.0.0.1:$pport --console tcp:127.0.0.1:$pcon --takeover manual \
		--tls-cert "$c/node.pem" --tls-key "$c/node.key" --tls-ca "$c/ca.pem" \
		--control "$tmp/peer.ctl" >"$tmp/peer-tls.log" 2>&1 &
	echo $! > "$tmp/peer.pid"
	wait_port $pport $((10 * X)) || fail "the TLS peer standby did not listen"
	export OCF_RESOURCE_INSTANCE=understudy_tls OCF_RESKEY_name=understudy_tls OCF_RESKEY_insecure=false \
		OCF_RESKEY_tls_cert=$c/node.pem OCF_RESKEY_tls_key=$c/node.key OCF_RESKEY_tls_ca=$c/ca.pem \
		OCF_RESKEY_control=$tmp/state/understudy_tls.sock
	OCF_RESKEY_tls_ca=$c/missing.pem ra validate-all; rc=$?
	[ $rc = 5 ] || fail "validate-all with an unreadable CA: $rc, want 5 (not installed)"
	ra start || fail "TLS start: $(tail -5 "$tmp/ra.log")"
	ra promote || fail "TLS promote (fresh boot): $(tail -5 "$tmp/ra.log")"
	ra monitor; rc=$?
	[ $rc = 8 ] || fail "TLS monitor after the promote: $rc, want 8"
	grep -q "protected: secondary holds" "$tmp/state/understudy_tls.log" || fail "TLS primary never protected"
	grep -q "INSECURE" "$tmp/state/understudy_tls.log" && fail "the TLS agent ran a plaintext link"
	out=$(python3 tests/counter_client.py $lcon incr incr) || fail "console of the TLS primary"
	[ "$(echo "$out" | tail -1 | cut -d' ' -f1)" = 2 ] || fail "TLS counter: $out"
	ra demote || fail "TLS demote"
	ra stop || fail "TLS stop"
	ok "TLS: one node certificate (serverAuth + clientAuth) as standby and as fresh primary, protected; validate-all 5 for an unreadable CA"
else
	echo "SKIP: openssl missing: the TLS part of the agent is not checked"
fi
