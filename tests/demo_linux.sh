#!/usr/bin/env bash
# make demo-linux: a stock Linux VM protected by understudy keeps a
# client's TCP connection across kill -9 of its primary.
# The guest: Debian's kernel (linux-image-amd64) with a busybox initramfs
# built here (tests/linux_initramfs.sh) whose TCP service appends each
# request to a file on its virtio disk, fsyncs, then replies with a
# sequence number. A secondary and a `primary --kernel` on their own taps
# and images, a client in another network namespace holding one TCP
# connection; the primary is SIGKILLed; the same connection carries on
# against the secondary, and the survivor's disk holds every reply
# (tests/linux_failover.py, DEMO_TRIALS kills, default 1).
# Where this host's KVM cannot boot Linux (no /dev/kvm, or a KVM without
# hardware virtualisation: PVM) it runs inside the nested VM of
# tests/nested/run.sh (QEMU's emulator with SVM; a TCG thread per vCPU),
# which takes several minutes. Exit 77 (SKIP) while understudy has no
# --kernel, or without root (namespaces, taps).
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/linux_lib.sh
BIN=${UNDERSTUDY_BIN:-$PWD/${BUILD:-build}/understudy}
[ -x "$BIN" ] || { echo "SKIP: $BIN not built (make all)"; exit 77; }
need_linux_loader
say() { printf '\n\033[1m%s\033[0m\n' "$*"; }

if ! { [ -r /dev/kvm ] && [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; } &&
	[ -z "${UNDERSTUDY_NESTED:-}" ]; then
	say "This host's KVM cannot boot Linux ($([ -e /dev/kvm ] && echo "no vmx/svm: PVM" || echo "no /dev/kvm")): the demo runs inside a VM under QEMU's emulator, whose nested KVM can (several minutes; its output at the end)"
	BUILD=build/nested NESTED_ACCEL=${NESTED_ACCEL:-tcg} NESTED_CMD="BUILD=build/nested bash tests/demo_linux.sh" \
		tests/nested/run.sh
	exit $?
fi
need_kvm
need_taps
VNS=udl$$ CNS=udc$$
T=$(mktemp -d /tmp/demo_linux.XXXXXX)
cleanup() {
	kill $(jobs -p) 2>/dev/null; wait 2>/dev/null
	ip netns del "$VNS" 2>/dev/null; ip netns del "$CNS" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
say "1. the guest: $(ls /boot/vmlinuz-* | sort -V | tail -1) and an initramfs built from busybox-static and the kernel's virtio modules"
linux_guest "$T/guest"
echo "   $LINUX_INITRD ($(stat -c %s "$LINUX_INITRD") bytes)"
say "2. the network: namespace $VNS (a bridge, taps tapla for the primary and taplb for the secondary), the client in $CNS at 10.79.0.1"
guest_lan "$VNS" "$CNS" dlc$$ dlb$$ 10.79.0.1/24 tapla taplb
say "3. a secondary, a primary --kernel whose guest serves TCP on 10.79.0.2:7000; one client connection; kill -9 of the primary"
cat <<EOF
   understudy secondary --listen 127.0.0.1:PORT --console tcp:127.0.0.1:PORT --net tap:taplb --disk sec.img --insecure
   understudy primary --kernel $LINUX_KERNEL --initrd initrd.gz \\
       --append "$LINUX_APPEND ut.mode=server ut.ip=10.79.0.2/24" \\
       --mem ${LINUX_MEM:-256M} --cpus ${LINUX_CPUS:-1} --disk pri.img --net tap:tapla --peer 127.0.0.1:PORT --console tcp:127.0.0.1:PORT --insecure
EOF
ip netns exec "$CNS" python3 tests/linux_failover.py "$BIN" "$VNS" "${DEMO_TRIALS:-1}" "${LINUX_SEED:-$RANDOM}" "$T" \
	tapla taplb "$LINUX_KERNEL" "$LINUX_INITRD" "$LINUX_APPEND" | sed 's/^/   /'
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || { echo "FAIL: the demo's check failed (above)"; exit 1; }
say "The client's TCP connection outlived the primary: no reset, no reconnect, every reply on the survivor's disk."
