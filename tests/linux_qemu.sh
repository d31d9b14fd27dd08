#!/usr/bin/env bash
# tests/linux_qemu.sh [poweroff|server]: the Linux guest of the tests
# (tests/linux_initramfs.sh) under QEMU instead of understudy: the reference
# that tells a broken guest from a broken loader. Not part of make check;
# run it by hand, on a host with KVM or in the nested VM:
#   NESTED_ACCEL=tcg NESTED_CMD="bash tests/linux_qemu.sh" make check-nested
# With a usable /dev/kvm QEMU runs `-enable-kvm -cpu host`, else its
# emulator (TCG: a check of the guest, slow). Prints the guest's console.
#  poweroff: boots with ut.mode=poweroff on 1 vCPU, then 2 (QEMU_CPUS="1 2");
#     the ready marker, "ut: nproc N" with N the vCPUs, QEMU's exit status 0.
#  server: a blank 64 MiB disk (virtio-blk) and a NIC on a tap in a network
#     namespace made here (needs root), ut.mode=server: the guest formats
#     and mounts the disk and serves TCP; a client in another namespace
#     sends 20 requests over one connection (replies numbered 1..20), then
#     asks for a power-off; the image read on the host holds the 20 lines.
# Both by default. Exit 0 pass, 1 fail, 77 skip.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
modes=${*:-poweroff server}
command -v qemu-system-x86_64 >/dev/null || { echo "SKIP: no qemu-system-x86_64 (make deps-nested)"; exit 77; }
T=$(mktemp -d /tmp/linux_qemu.XXXXXX)
VNS=ulq$$ CNS=ulc$$ KEEP=
fail() { echo "FAIL: $*"; KEEP=1; exit 1; }
cleanup() {
	kill $(jobs -p) 2>/dev/null; wait 2>/dev/null
	ip netns del "$VNS" 2>/dev/null; ip netns del "$CNS" 2>/dev/null
	if [ -n "$KEEP" ]; then echo "logs kept in $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
read -r KERNEL INITRD < <(bash tests/linux_initramfs.sh "$T/guest"; echo "rc $?") || exit 1
case $KERNEL in SKIP:*) echo "$KERNEL $INITRD"; exit 77 ;; rc) fail "linux_initramfs.sh failed" ;; esac
if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
	accel=(-enable-kvm -cpu host) how="KVM, -cpu host"
else
	accel=(-accel tcg -cpu max) how="no /dev/kvm here: QEMU's emulator"
fi
APPEND="console=ttyS0 earlyprintk=serial,ttyS0 nokaslr no_timer_check tsc=reliable lpj=4000000"
qemu() {   # cpus, append, extra args...: QEMU's status; console in $T/console
	local cpus=$1 app=$2
	shift 2
	timeout "${QEMU_TIMEOUT_S:-600}" qemu-system-x86_64 "${accel[@]}" -smp "$cpus" -m 512M -nodefaults \
		-no-reboot -display none -serial "file:$T/console" -kernel "$KERNEL" -initrd "$INITRD" \
		-append "$APPEND $app" "$@" </dev/null >"$T/qemu.out" 2>&1
}
echo "kernel $KERNEL, initrd $INITRD ($(stat -c %s "$INITRD") bytes), $how"

for mode in $modes; do
case $mode in
poweroff)
	for cpus in ${QEMU_CPUS:-1 2}; do
		t0=$(date +%s)
		qemu "$cpus" ut.mode=poweroff
		rc=$?
		echo "--- console, $cpus vCPU(s), ut.mode=poweroff ($(( $(date +%s) - t0 )) s, QEMU exit $rc):"
		tr -d '\r' <"$T/console" | grep -E '^ut: |Power down|Kernel panic|Run /init' | sed 's/^/    | /'
		[ $rc = 0 ] || fail "QEMU exit $rc: $(tail -3 "$T/qemu.out") $(tail -5 "$T/console")"
		tr -d '\r' <"$T/console" | grep -q "^ut: ready mode=poweroff cpus=$cpus " || fail "no ready marker"
		tr -d '\r' <"$T/console" | grep -qx "ut: nproc $cpus" || fail "nproc is not $cpus"
		ok "QEMU ($how), $cpus vCPU(s): ready marker, nproc $cpus, powered off (exit 0)"
	done
	;;
server)
	need_taps
	guest_lan "$VNS" "$CNS" ulc$$ ulb$$ 10.79.0.1/24 tapq
	truncate -s 64M "$T/disk.img"
	t0=$(date +%s)
	ip netns exec "$VNS" timeout "${QEMU_TIMEOUT_S:-600}" qemu-system-x86_64 "${accel[@]}" -smp 1 -m 512M \
		-nodefaults -no-reboot -display none -serial "file:$T/console" \
		-kernel "$KERNEL" -initrd "$INITRD" -append "$APPEND ut.mode=server ut.ip=10.79.0.2/24" \
		-drive "file=$T/disk.img,if=virtio,format=raw" \
		-netdev tap,id=n0,ifname=tapq,script=no,downscript=no -device virtio-net-pci,netdev=n0 \
		</dev/null >"$T/qemu.out" 2>&1 &
	qp=$!
	wait_log "$T/console" "ut: server listening" "${QEMU_TIMEOUT_S:-600}" ||
		fail "the server never listened: $(tr -d '\r' <"$T/console" | grep '^ut: ' | tail -5) $(tail -3 "$T/qemu.out")"
	echo "--- up after $(( $(date +%s) - t0 )) s"
	ip netns exec "$CNS" python3 tests/linuxguest.py requests 10.79.0.2 7000 20 --poweroff >"$T/replies" ||
		fail "client: $(tail -3 "$T/replies")"
	wait $qp
	rc=$?
	echo "--- console, ut.mode=server ($(( $(date +%s) - t0 )) s, QEMU exit $rc):"
	tr -d '\r' <"$T/console" | grep -E '^ut: |Power down|Kernel panic' | sed 's/^/    | /'
	echo "--- replies: $(head -1 "$T/replies") ... $(grep -v poweroff "$T/replies" | tail -1); $(tail -1 "$T/replies")"
	[ $rc = 0 ] || fail "QEMU exit $rc"
	[ "$(grep -c '^[0-9]' "$T/replies")" = 20 ] || fail "not 20 replies"
	python3 tests/linuxguest.py check "$T/disk.img" "$T/replies" || fail "the disk's log"
	ok "QEMU ($how), server: the guest formatted and mounted its disk, answered 20 requests over one TCP connection (numbered 1..20), each fsynced to the disk's log before its reply; powered off on request (exit 0)"
	;;
*) fail "unknown mode $mode (poweroff, server)" ;;
esac
done
