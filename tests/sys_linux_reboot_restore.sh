#!/usr/bin/env bash
# System test (issue 26): a restored Linux guest that reboots boots again
# from the kernel its snapshot records. `run --kernel` of a copy of the
# kernel (a busybox shell on its stdio console, a virtio disk); the guest
# writes a mark on its disk, `snapshot`, run killed -9; `restore` with the
# copy moved away is refused (exit 2, naming it); `restore` of the snapshot
# with no --kernel on the same image; typed `reboot -f` in the restored
# guest (the same boot_id): restore does not end, the shell comes back with
# a new boot_id and reads the mark back, restore logs the reboot once
# (tests/linux_reboot.py, mode restore, says what is checked).
# Skips (77) while `primary` has no --kernel. Cost in the nested VM: two
# Linux boots, a snapshot and a restore.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/linux_lib.sh
need_linux_kvm
linux_test_start
linux_ns_lab sys_linux_reboot_restore

ip netns exec "$VNS" python3 tests/linux_reboot.py "$BIN" "$VNS" "$T" \
	"$LINUX_KERNEL" "$LINUX_INITRD" "$LINUX_APPEND" restore ||
	fail "a restored Linux guest's reboot"
echo "PASS: a Linux guest restored without --kernel boots again from the recorded kernel when it reboots"
