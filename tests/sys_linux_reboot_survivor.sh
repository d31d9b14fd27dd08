#!/usr/bin/env bash
# System test (issue 26): a Linux guest that reboots on the survivor of a
# takeover boots again there. `primary --kernel` (a busybox shell on its
# console, a virtio disk) and `secondary` (no --kernel: what it would boot
# comes from the primary's Hello) on loopback in a namespace made here;
# the guest writes a mark on its disk, kill -9 of the primary, the
# secondary takes over; typed on the survivor's console `reboot -f`: the
# survivor does not end, its console shows a fresh boot and the shell
# again, and the guest answers with a new boot_id, the mark read back and
# a second one written, which the survivor's image holds
# (tests/linux_reboot.py, mode survivor, says what is checked). Skips (77)
# while `primary` has no --kernel. Cost in the nested VM: two Linux boots
# (one protected) and a takeover.
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
VNS=ulv$$ KEEP=
fail() { echo "FAIL: $*"; KEEP=1; exit 1; }
T=$(mktemp -d /tmp/sys_linux_reboot_survivor.XXXXXX)
cleanup() {
	local logs=$(dirname "$BIN")/test-logs
	kill $(jobs -p) 2>/dev/null
	wait 2>/dev/null
	ip netns del "$VNS" 2>/dev/null
	if [ -n "$KEEP" ] && [ -d "$logs" ]; then
		mkdir -p "$logs/sys_linux_reboot_survivor" &&
			cp "$T"/*.log "$T"/*.events "$T"/*.console "$logs/sys_linux_reboot_survivor/" 2>/dev/null
		echo "agents' logs copied to $logs/sys_linux_reboot_survivor"
	fi
	if [ -n "$KEEP" ]; then echo "logs kept in $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
ip netns add "$VNS" && ip -n "$VNS" link set lo up ||
	{ echo "SKIP: cannot make a network namespace (root needed)"; exit 77; }
linux_guest "$T/guest"

ip netns exec "$VNS" python3 tests/linux_reboot.py "$BIN" "$VNS" "$T" \
	"$LINUX_KERNEL" "$LINUX_INITRD" "$LINUX_APPEND" survivor ||
	fail "a Linux guest's reboot on the survivor of a takeover"
echo "PASS: a Linux guest that reboots on the survivor of kill -9 boots again there"
