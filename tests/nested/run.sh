#!/usr/bin/env bash
# make check-nested: the KVM tests on a host without /dev/kvm (a kernel that
# is itself a guest, a container), in a Linux VM under QEMU's emulator (TCG)
# whose emulated CPU has SVM, so that Debian's kvm_amd gives it a /dev/kvm.
# The VM's root is this host's own root, read-only over virtio-9p with a
# tmpfs overlay for writes: the same packages, the same tree, nothing to
# install inside. Its logs come back through a second, writable 9p share.
#
# The tree is built in $BUILD (default build/nested) with GUEST_IOPL=3 (see
# guest/guest.h), then tests/run.sh runs inside the VM with ONLY=$ONLY
# (default: the tests that need KVM, tests/kvm_tests.sh; the rest run as
# well on the host), or NESTED_CMD instead, e.g.
#   NESTED_CMD="BUILD=build/nested MUTANTS=precopy_keep_delta GUEST_IOPL=3 bash tests/mutants.sh"
# Everything runs many times slower than on a host with KVM: timing figures
# from here mean nothing, verdicts do. The tests that hold the agents to
# real-time bounds call need_host_kvm and skip here (NESTED_TIMED=1 runs
# them anyway). make check runs this itself on a host without /dev/kvm
# (tests/run.sh). One TCG thread for both vCPUs (thread=single): with a
# thread per vCPU, nested KVM here was slower still and once froze the VM
# for good; but the failover tests pass only with it (NESTED_ACCEL=tcg: one
# thread each).
#
# A VM that froze (the emulator has, with a TCG thread per vCPU: no more
# output, not even a test's own timeout firing) is told from a slow one by
# a beat the VM writes to the share every 10 s: no beat for NESTED_STALL
# seconds (default 300; the longest stall of an agent seen there was 8 s)
# ends the VM and this script with exit 75; a VM whose own kernel panicked
# (seen once in CI, a stack overflow in its page-fault handler) ends it with
# exit 76. tests/run.sh starts the list once more in a fresh VM after either. Each test there has TEST_TIMEOUT seconds
# (default 900: the slowest takes about 210 s).
#
# Needs (make deps-nested): qemu-system-x86, linux-image-amd64 (a kernel in
# /boot and its modules), busybox-static. Exit status: the tests' (77 when
# the VM cannot be made here).
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build/nested}
V=${NESTED_VM:-$BUILD/nested-vm}   # its files (tests/run.sh runs a second VM beside)
skip() { echo "SKIP: $*"; exit 77; }

command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64 (make deps-nested)"
busybox=$(command -v busybox) || skip "no busybox (make deps-nested)"
kernel=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -1)
[ -n "$kernel" ] || skip "no kernel in /boot (make deps-nested)"
kver=${kernel#/boot/vmlinuz-}
modprobe -S "$kver" --show-depends kvm_amd >/dev/null 2>&1 || skip "no kvm_amd module for $kver"
mods=$(for m in virtio_pci 9pnet_virtio 9p overlay; do modprobe -S "$kver" --show-depends $m; done 2>/dev/null |
	awk '$1 == "insmod" { print $2 }' | awk '!seen[$0]++')
[ -n "$mods" ] || skip "no 9p/virtio/overlay modules for $kver"

rm -rf "$V" && mkdir -p "$V/out" "$V/root"/{bin,dev,proc,sys,mods,lower,upper,newroot} || exit 1
cp "$busybox" "$V/root/bin/busybox"
for a in sh mount insmod mkdir switch_root; do ln -s busybox "$V/root/bin/$a"; done
order=
for f in $mods; do
	b=$(basename "$f"); b=${b%.xz}; b=${b%.zst}; b=${b%.ko}
	case $f in *.xz) xz -dc "$f" ;; *.zst) zstd -dc "$f" ;; *) cat "$f" ;; esac >"$V/root/mods/$b.ko" || exit 1
	order="$order $b"
done
cat >"$V/root/init" <<EOI
#!/bin/sh
# Mount the host's root (9p, read-only) under a tmpfs overlay and go on there.
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $order; do insmod /mods/\$m.ko; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose host /lower
mount -t tmpfs -o size=75% upper /upper && mkdir -p /upper/u /upper/w
mount -t overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w root /newroot || exec sh
umount /proc /sys; mount --move /dev /newroot/dev
exec switch_root /newroot /bin/sh $PWD/tests/nested/stage2.sh
EOI
chmod +x "$V/root/init"
(cd "$V/root" && find . | cpio -o -H newc 2>/dev/null) >"$V/initrd.cpio" || exit 1
rm -rf "$V/root"

[ -n "${ONLY:-}" ] || ONLY=$(tests/kvm_tests.sh)

# NESTED_BUILT=1: tests/run.sh built it already (two VMs side by side must
# not both run make in one tree).
if [ "${NESTED_BUILT:-0}" != 1 ]; then
	echo "== build ($BUILD, guests with IOPL 3)"
	make -s -j"$(nproc)" BUILD="$BUILD" GUEST_IOPL=3 check-build || exit 1
fi

# What the VM runs (stage2.sh calls it), logs into the writable share.
cmd=${NESTED_CMD:-BUILD=$BUILD ONLY=$(printf %q "${ONLY:-}") tests/run.sh}
# The tests' own knobs (NET_TRIALS, KV_SEED, ...) go along.
{
	for v in $(compgen -e | grep -E '^([A-Z0-9_]+_(TRIALS|SEED|KILLS|REQUIRE)|NESTED_TIMED|LINUX_[A-Z0-9_]+)$'); do
		printf 'export %s=%q\n' "$v" "${!v}"
	done
	cat <<EOC
export GUEST_IOPL=3    # for a test that builds a variant (make MUTANT=...) in the VM
export UNDERSTUDY_NESTED=1    # need_host_kvm (tests/lib.sh) skips there
export TEST_TIMEOUT=${TEST_TIMEOUT:-900}
( while :; do date +%s >/out/alive; sleep 10; done ) &   # the beat the host watches
cd $PWD || exit 1
rm -rf $BUILD/test-logs && mkdir -p /out/test-logs && ln -s /out/test-logs $BUILD/test-logs
$cmd
EOC
} >"$V/out/cmd.sh"

cpu=${NESTED_CPU:-max}
echo "== boot $kernel under QEMU (TCG, -cpu $cpu, ${NESTED_CPUS:-2} vCPUs), then $cmd"
timeout "${NESTED_TIMEOUT:-7200}" qemu-system-x86_64 -machine q35 -accel "${NESTED_ACCEL:-tcg,thread=single}" -cpu "$cpu" \
	-smp "${NESTED_CPUS:-2}" -m "${NESTED_MEM:-8G}" -nographic -no-reboot \
	-kernel "$kernel" -initrd "$V/initrd.cpio" \
	-append "console=ttyS0 quiet panic=-1" \
	-virtfs local,path=/,mount_tag=host,security_model=none,multidevs=remap,readonly=on \
	-virtfs "local,path=$PWD/$V/out,mount_tag=out,security_model=none" \
	>"$V/console.log" 2>&1 &
qemu=$!
# The beat: from the boot's start until the first one, less the time a
# boot may take (NESTED_BOOT_S; it takes a minute or two), then from the
# last one.
stall=${NESTED_STALL:-300} boot_s=${NESTED_BOOT_S:-300} start=$(date +%s) froze=
while kill -0 "$qemu" 2>/dev/null; do
	sleep 5
	if [ -f "$V/out/alive" ]; then
		since=$(( $(date +%s) - $(stat -c %Y "$V/out/alive") ))
	else
		since=$(( $(date +%s) - start - boot_s ))
	fi
	if [ "$since" -gt "$stall" ]; then
		froze=$since
		pkill -KILL -P "$qemu"; kill -KILL "$qemu"   # QEMU, then its timeout
		break
	fi
done
wait "$qemu" 2>/dev/null   # (no "Killed" from the shell)
q=$?
[ -f "$V/out/run.log" ] && cat "$V/out/run.log"
if [ -n "$froze" ]; then
	echo "FROZE: the nested VM gave no sign of life for $froze s (no beat on $V/out/alive); console: $V/console.log"
	tail -5 "$V/console.log" | sed 's/^/    | /'
	exit 75
fi
if [ ! -f "$V/out/rc" ]; then
	# Its kernel died (panic=-1 and -no-reboot end QEMU): the emulator's
	# failure as much as a freeze is, exit 76; anything else, exit 1.
	if grep -qE 'Kernel panic|BUG: ' "$V/console.log"; then
		echo "CRASHED: the nested VM's kernel died (qemu exit $q) before the tests ended; console: $V/console.log"
		grep -m1 -E 'BUG: |Kernel panic' "$V/console.log" | sed 's/^/    | /'
		exit 76
	fi
	echo "FAIL: the VM ended (qemu exit $q) before the tests did; console: $V/console.log"
	tail -20 "$V/console.log" | sed 's/^/    | /'
	exit 1
fi
echo "(nested run: logs in $V/out/test-logs, console in $V/console.log)"
exit "$(cat "$V/out/rc")"
