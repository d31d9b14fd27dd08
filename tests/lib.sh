# Shared helpers for the system tests (sourced).
BIN=${UNDERSTUDY_BIN:-$PWD/build/understudy}
# show_logs: the last lines of each agent log in $FAIL_LOGS (file names or
# globs a test sets, e.g. FAIL_LOGS="$tmp/*.log"), so that a failure in CI
# says what the agents saw.
show_logs() {
	local f
	for f in ${FAIL_LOGS:-}; do
		[ -f "$f" ] && { echo "  -- last lines of $(basename "$f"):"; tail -8 "$f" | sed 's/^/  | /'; }
	done
	return 0
}
# test_tmp: the test's temporary directory $tmp, removed when the test
# exits after its background jobs are killed (stopped ones too); FAIL_LOGS
# defaults to the agents' logs there ($tmp/*.log).
test_tmp() {
	tmp=$(mktemp -d)
	FAIL_LOGS=${FAIL_LOGS:-"$tmp/*.log"}
	trap test_tmp_cleanup EXIT
}
test_tmp_cleanup() {
	kill -CONT $(jobs -p) 2>/dev/null
	kill -9 $(jobs -p) 2>/dev/null
	wait 2>/dev/null
	rm -rf "$tmp"
}
# fail WHY: says why, then show_logs; exits 1.
fail() { echo "FAIL: $*"; show_logs; exit 1; }
ok() { echo "ok - $*"; }
need_kvm() { [ -r /dev/kvm ] && [ -w /dev/kvm ] || { echo "SKIP: /dev/kvm not usable here"; exit 77; }; }
# need_host_kvm WHY: the test also needs the speed of a host's own KVM
# (WHY: the real-time bound it holds the agents to). Inside the nested VM of
# tests/nested/run.sh (UNDERSTUDY_NESTED=1), where the guest and the agents
# run tens of times slower under QEMU's emulator, it skips and says so;
# NESTED_TIMED=1 runs it there anyway.
need_host_kvm() {
	need_kvm
	[ "${UNDERSTUDY_NESTED:-}" = 1 ] && [ "${NESTED_TIMED:-}" != 1 ] &&
		{ echo "SKIP: needs a host's own KVM, not the nested one under QEMU's emulator: $*"; exit 77; }
	return 0
}
# need_linux_kvm: need_kvm, and a KVM that can boot Linux: one with
# hardware virtualisation (vmx/svm). The PVM of these hosts emulates CPL0
# code and lacks instructions Linux needs (../shared/PLATFORM.md); there
# tests/run.sh sends the tests that call this to the nested VM.
need_linux_kvm() {
	need_kvm
	grep -qwE 'vmx|svm' /proc/cpuinfo ||
		{ echo "SKIP: this host's KVM cannot boot Linux (no vmx/svm: PVM); make check runs it in the nested VM"; exit 77; }
}
# nested HOST NESTED: HOST on a host's own KVM, NESTED inside the nested VM
# of tests/nested/run.sh (UNDERSTUDY_NESTED=1), where QEMU's emulator stalls
# an agent for a second or more at a time. For the bounds a test sets that
# are not the property it tests: an agent's silence bound (--timeout-ms,
# --failover-timeout-ms) that must not give up a live peer before the
# test's own kill, a wait for a step. A timing the test asserts is derived
# from the value chosen, so that it still fails when the property breaks.
nested() { if [ "${UNDERSTUDY_NESTED:-}" = 1 ]; then echo "$2"; else echo "$1"; fi; }
# free_port: a port free now, drawn at random below the kernel's ephemeral
# range (32768-60999): letting the kernel pick (bind to 0) gave two calls in
# a row the same port in CI (sys_vm_names, sys_hardening_net), and a port
# from the ephemeral range may go to an outgoing connection meanwhile.
free_port() { python3 -c 'import random, socket
for _ in range(500):
    p = random.randint(10000, 32000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break'; }
# need_taps: skips (77) unless network namespaces, taps and bridges can be made.
need_taps() {
	[ "$(id -u)" = 0 ] || { echo "SKIP: needs root for network namespaces and taps"; exit 77; }
	[ -c /dev/net/tun ] || { echo "SKIP: no /dev/net/tun"; exit 77; }
	command -v bridge >/dev/null || { echo "SKIP: no bridge(8) (iproute2)"; exit 77; }
}
# guest_lan VM_NS CLIENT_NS CLIENT_IF BRIDGE_IF CLIENT_CIDR TAP...: a link
# for guests with a NIC. VM_NS holds a bridge br0 with the taps; CLIENT_NS
# holds CLIENT_IF at CLIENT_CIDR, a veth whose peer BRIDGE_IF is on br0.
guest_lan() {
	local vns=$1 cns=$2 cif=$3 bif=$4 cidr=$5 t
	shift 5
	ip netns add "$vns" && ip netns add "$cns" || { echo "SKIP: cannot make network namespaces"; exit 77; }
	ip -n "$vns" link set lo up
	ip -n "$vns" link add br0 type bridge
	ip -n "$vns" link set br0 up
	ip link add "$cif" netns "$cns" type veth peer name "$bif" netns "$vns" || fail "veth"
	ip -n "$vns" link set "$bif" master br0 up
	ip -n "$cns" link set lo up
	ip -n "$cns" addr add "$cidr" dev "$cif"
	ip -n "$cns" link set "$cif" up
	for t in "$@"; do
		ip -n "$vns" tuntap add "$t" mode tap || fail "tuntap add $t"
		ip -n "$vns" link set "$t" master br0 up
	done
}
# wait_port PORT [seconds]: until something listens on 127.0.0.1:PORT
wait_port() {
	local i
	for i in $(seq 1 $((${2:-10} * 20))); do
		python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1',$1)))" 2>/dev/null && return 0
		sleep 0.05
	done
	return 1
}
# wait_log FILE PATTERN SECONDS: until PATTERN appears in FILE
wait_log() {   # file pattern seconds
	for _ in $(seq 1 $(($3 * 20))); do grep -q "$2" "$1" && return 0; sleep 0.05; done
	return 1
}
# start_etcd DIR [HOST] [NETNS]: a one-member etcd (the Debian etcd-server)
# with its data in DIR, on HOST (default 127.0.0.1) at a free client port,
# inside NETNS if given. Sets ETCD_PID and ETCD_EP (HOST:PORT); short
# election timings so that a lease of 1 s is allowed. Exits 77 (skip) when
# etcd is not installed; fails when it does not answer within 20 s.
start_etcd() {
	local dir=$1 host=${2:-127.0.0.1} ns=${3:-} cport pport run=()
	command -v etcd >/dev/null || { echo "SKIP: etcd-server not installed (make deps)"; exit 77; }
	[ -n "$ns" ] && run=(ip netns exec "$ns")
	cport=$(free_port); pport=$(free_port)
	mkdir -p "$dir"
	"${run[@]}" etcd --name w --data-dir "$dir/data" \
		--listen-client-urls "http://$host:$cport" --advertise-client-urls "http://$host:$cport" \
		--listen-peer-urls "http://$host:$pport" --initial-advertise-peer-urls "http://$host:$pport" \
		--initial-cluster "w=http://$host:$pport" --heartbeat-interval 25 --election-timeout 250 \
		--log-level error >"$dir/etcd.log" 2>&1 &
	ETCD_PID=$!
	ETCD_EP=$host:$cport
	for _ in $(seq 1 200); do
		"${run[@]}" curl -s -m 1 -X POST -d '{}' "http://$ETCD_EP/v3/maintenance/status" 2>/dev/null |
			grep -q '"leader"' && return 0
		sleep 0.1
	done
	fail "etcd did not answer on $ETCD_EP: $(tail -5 "$dir/etcd.log")"
}
# etcd_get EP KEY: the value of KEY ("" if absent)
etcd_get() {
	python3 - "$1" "$2" <<'PY'
import base64, json, sys, urllib.request
req = urllib.request.Request("http://%s/v3/kv/range" % sys.argv[1], method="POST",
    data=json.dumps({"key": base64.b64encode(sys.argv[2].encode()).decode()}).encode())
kvs = json.load(urllib.request.urlopen(req, timeout=3)).get("kvs", [])
print(base64.b64decode(kvs[0]["value"]).decode() if kvs else "")
PY
}
# ctl SOCKET REQUEST: the raw reply of an agent's control request
ctl() {
	python3 - "$1" "$2" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
out = b""
while True:
    d = s.recv(4096)
    if not d:
        break
    out += d
print(out.decode(), end="")
PY
}
