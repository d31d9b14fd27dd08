#!/usr/bin/env bash
# System test (issue 26): a restored Linux guest that reboots boots again.
# `run --kernel` (a busybox shell on its stdio console, a virtio disk); the
# guest writes a mark on its disk, `snapshot`, run killed -9, `restore
# --kernel ... ` of the snapshot on the same image; typed `reboot -f` in
# the restored guest (the same boot_id): restore does not end, the shell
# comes back with a new boot_id and reads the mark back, restore logs the
# reboot once (tests/linux_reboot.py, mode restore, says what is checked).
# Skips (77) while `primary` has no --kernel. Cost in the nested VM: two
# Linux boots, a snapshot and a restore.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/linux_lib.sh
BIN=${UNDERSTUDY_BIN:-build/understudy}
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
[ -x "$BIN" ] || { echo "SKIP: $BIN not built"; exit 77; }
need_linux_kvm
"$BIN" primary --help 2>&1 | grep -q -- '--kernel' ||
	{ echo "SKIP: $BIN primary has no --kernel (the Linux loader of issue 26 is not in this build)"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: no ip (iproute2) for the test's namespace"; exit 77; }
VNS=ulq$$ KEEP=
fail() { echo "FAIL: $*"; KEEP=1; exit 1; }
T=$(mktemp -d /tmp/sys_linux_reboot_restore.XXXXXX)
cleanup() {
	local logs=$(dirname "$BIN")/test-logs
	kill $(jobs -p) 2>/dev/null
	wait 2>/dev/null
	ip netns del "$VNS" 2>/dev/null
	if [ -n "$KEEP" ] && [ -d "$logs" ]; then
		mkdir -p "$logs/sys_linux_reboot_restore" &&
			cp "$T"/*.log "$T"/*.events "$T"/*.console "$logs/sys_linux_reboot_restore/" 2>/dev/null
		echo "agents' logs copied to $logs/sys_linux_reboot_restore"
	fi
	if [ -n "$KEEP" ]; then echo "logs kept in $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
ip netns add "$VNS" && ip -n "$VNS" link set lo up ||
	{ echo "SKIP: cannot make a network namespace (root needed)"; exit 77; }
linux_guest "$T/guest"

ip netns exec "$VNS" python3 tests/linux_reboot.py "$BIN" "$VNS" "$T" \
	"$LINUX_KERNEL" "$LINUX_INITRD" "$LINUX_APPEND" restore ||
	fail "a restored Linux guest's reboot"
echo "PASS: a Linux guest restored with restore --kernel boots again when it reboots"
