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
need_linux_kvm
linux_test_start
linux_ns_lab sys_linux_reboot_survivor

ip netns exec "$VNS" python3 tests/linux_reboot.py "$BIN" "$VNS" "$T" \
	"$LINUX_KERNEL" "$LINUX_INITRD" "$LINUX_APPEND" survivor ||
	fail "a Linux guest's reboot on the survivor of a takeover"
echo "PASS: a Linux guest that reboots on the survivor of kill -9 boots again there"
