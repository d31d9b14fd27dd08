#!/usr/bin/env bash
# System test, tests 4 and 5 of issue 26: a stock Linux guest (Debian's
# kernel, the busybox initramfs of tests/linux_initramfs.sh) serving TCP
# requests that it appends to a file on its virtio disk, booted once by
# `run --kernel`; a client in another namespace holds ONE TCP connection
# through: `snapshot --with-disk`, kill -9 and `restore` on another tap
# and image; `protect` onto a secondary and `switchover`; `migrate
# --with-disk` of that protected VM to a fresh secondary. After each the
# same connection carries on with no gap in the numbers, and after the
# guest powers off the last image holds every reply
# (tests/linux_lifecycle.py says what is checked). Test 5: the agents run
# with UNDERSTUDY_VERIFY=1, so each standby compares every epoch it applies
# with the digest of the primary's RAM and complete machine state; both
# standbys of the protected steps must have verified epochs, none
# differing, with LINUX_VERIFY=1 (make check runs without it). Its first
# whole run found one epoch's RAM differing after the switchover (KVM's
# steal-time byte, now left out of the digest); the five runs after that
# fix verified every epoch equal, in a nested VM of two vCPUs. In make
# check's, of one vCPU, it finds the standby's TSC behind the primary's,
# a defect not yet fixed (docs/design.md, "Tests of Linux guests").
# Cost in the nested VM: 2-3 minutes (119 s without verify mode, 151-185 s
# with it); each step is bounded by LINUX_BOOT_S, 600 s.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/linux_lib.sh
BIN=${UNDERSTUDY_BIN:-build/understudy}
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
[ -x "$BIN" ] || { echo "SKIP: $BIN not built"; exit 77; }
need_linux_kvm
fail() { echo "FAIL: $*"; KEEP=1; exit 1; }
linux_lab sys_linux_lifecycle tapma tapmb tapmc

ip netns exec "$CNS" env LINUX_VERIFY="${LINUX_VERIFY:-0}" python3 tests/linux_lifecycle.py "$BIN" "$VNS" "$T" tapma tapmb tapmc \
	"$LINUX_KERNEL" "$LINUX_INITRD" "$LINUX_APPEND" ||
	fail "a Linux guest's TCP connection and disk across snapshot/restore, switchover and migrate"
echo "PASS: a Linux guest's TCP connection and disk survive snapshot/restore, switchover and migrate"
