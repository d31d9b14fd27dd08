#!/usr/bin/env bash
# System test: a stock Linux kernel (Debian's linux-image-amd64) with an
# initramfs built here from busybox-static and its virtio modules
# (tests/linux_initramfs.sh), booted by `understudy run --kernel --initrd
# --append`, the serial console on stdio:
#  1. the same kernel as an uncompressed ELF vmlinux (the ELF inside the
#     bzImage, tests/linux_lib.sh's linux_vmlinux), --cpus 1,
#     ut.mode=poweroff: the guest's /init prints its ready marker, "ut:
#     nproc 1", powers off; `run` exits with status 0.
#  2. --cpus 2, ut.mode=shell: a shell prompt on the console; typed
#     `nproc` says 2; an RTC alarm set 2 s ahead through
#     /sys/class/rtc/rtc0/wakealarm wakes a read of /dev/rtc0 with AF
#     after 1-2 s and IRQ 8's count in /proc/interrupts grows (the RTC's
#     interrupt); typed `reboot -f` restarts the guest (its ready
#     marker again, still 2 vCPUs); typed `poweroff -f` ends `run` with
#     status 0.
# Skips (77) while `run` has no --kernel. Cost: two boots and a reboot of
# Linux; ~30-60 s each in the nested VM (tests/nested/run.sh, where this
# runs on hosts whose KVM cannot boot Linux), a few seconds on hardware KVM.
# LINUX_BOOT_S (default 600): how long one boot may take.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/linux_lib.sh
BIN=${UNDERSTUDY_BIN:-build/understudy}
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
[ -x "$BIN" ] || { echo "SKIP: $BIN not built"; exit 77; }
need_linux_kvm
need_linux_loader

T=$(mktemp -d /tmp/sys_linux_boot.XXXXXX)
VMPID= KEEP=
fail() { echo "FAIL: $*"; KEEP=1; exit 1; }
cleanup() {
	[ -n "$VMPID" ] && kill -9 "$VMPID" 2>/dev/null
	exec 3>&- 2>/dev/null
	wait 2>/dev/null
	if [ -n "$KEEP" ]; then echo "logs kept in $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
linux_guest "$T/guest"
BOOT_S=${LINUX_BOOT_S:-600}
echo "kernel $LINUX_KERNEL, initrd $LINUX_INITRD ($(stat -c %s "$LINUX_INITRD") bytes)"

# 1. An ELF vmlinux (the ELF inside Debian's bzImage, as a kernel build's
# vmlinux), 1 vCPU: its ready marker, nproc 1, power-off ends run with 0.
linux_vmlinux "$LINUX_KERNEL" "$T/vmlinux"
t0=$(date +%s)
"$BIN" run --kernel "$T/vmlinux" --initrd "$LINUX_INITRD" --append "$LINUX_APPEND ut.mode=poweroff" \
	--mem 512M --cpus 1 --console stdio </dev/null >"$T/a.out" 2>"$T/a.err" &
VMPID=$!
wait_exit "$VMPID" "$BOOT_S"
rc=$?
VMPID=
grep -q "ELF vmlinux" "$T/a.err" || fail "vmlinux: not loaded as an ELF: $(head -5 "$T/a.err")"
console_has "$T/a.out" '^ut: ready mode=poweroff cpus=1 ' ||
	fail "vmlinux, 1 vCPU: no ready marker (exit $rc): $(console_gist "$T/a.out") err: $(tail -3 "$T/a.err")"
console_has "$T/a.out" '^ut: nproc 1$' || fail "vmlinux, 1 vCPU: nproc is not 1: $(console_gist "$T/a.out")"
[ $rc = 0 ] || fail "vmlinux, 1 vCPU: the guest powered off, run exited $rc: $(tail -3 "$T/a.err")"
rm -f "$T/vmlinux"
ok "run --kernel VMLINUX (ELF) --cpus 1, ut.mode=poweroff: ready marker, nproc 1, power-off ends run with status 0 ($(( $(date +%s) - t0 )) s)"

# 2. a shell, 2 vCPUs, reboot, poweroff
mkfifo "$T/in" && exec 3<>"$T/in" || fail "fifo"
t0=$(date +%s)
"$BIN" run --kernel "$LINUX_KERNEL" --initrd "$LINUX_INITRD" --append "$LINUX_APPEND ut.mode=shell" \
	--mem 512M --cpus 2 --console stdio <"$T/in" >"$T/b.out" 2>"$T/b.err" &
VMPID=$!
wait_console "$T/b.out" '^ut: shell$' "$BOOT_S" ||
	fail "2 vCPUs: no shell: $(console_gist "$T/b.out") err: $(tail -3 "$T/b.err")"
console_has "$T/b.out" '^ut: ready mode=shell cpus=2 ' || fail "2 vCPUs: ready marker: $(console_gist "$T/b.out")"
t_up=$(( $(date +%s) - t0 ))
# The reply is told from the echo of the typed line by its start.
echo "nproc | sed 's/^/ut-nproc /'" >&3
wait_console "$T/b.out" '^ut-nproc [0-9]+$' 60 || fail "typed nproc: no answer: $(tail -c 300 "$T/b.out")"
console_has "$T/b.out" '^ut-nproc 2$' || fail "typed nproc: $(tr -d '\r' <"$T/b.out" | grep '^ut-nproc')"
ok "run --kernel --cpus 2, ut.mode=shell: a shell on the serial console after $t_up s; typed nproc says 2"
# The RTC's alarm interrupt: /dev/rtc0 opened first (an open forgets the
# interrupts before it, so it must come before the alarm can fire: typed
# lines take seconds under the emulator), then an alarm 2 s ahead through
# sysfs (rtc_cmos programs the alarm registers and AIE), then a read of the
# open device, which returns only once IRQ 8 has come (rtc_cmos's handler
# reads register C and reports AF). Without the interrupt the read waits
# until timeout kills it.
irq8() { tr -d '\r' <"$T/b.out" | sed -n "s/^ut-irq-$1 *8: *//p" | awk '{ n = 0; for (i = 1; i <= NF && $i ~ /^[0-9]+$/; i++) n += $i; print n; exit }'; }
# Short typed lines; the markers are put together by the guest's shell, so
# that the echo of a typed line (wrapped by the line editor) never matches.
echo "i=\$(grep ' 8:' /proc/interrupts); echo \"ut\"\"-irq-a \$i\"" >&3
echo "exec 4</dev/rtc0; t0=\$(date +%s); echo +2 >/sys/class/rtc/rtc0/wakealarm" >&3
echo "a=\$(grep alarm_IRQ /proc/driver/rtc); echo \"ut\"\"-rtc-set \$a\"" >&3
echo "x=\$(timeout 60 dd bs=8 count=1 <&4 2>/dev/null | od -An -tx1); exec 4<&-" >&3
echo "[ -n \"\$x\" ] && echo \"ut\"\"-rtc-woke \$((\$(date +%s) - t0)) \$x\"" >&3
echo "i=\$(grep ' 8:' /proc/interrupts); echo \"ut\"\"-irq-b \$i\"; echo \"ut\"\"-rtc-done\"" >&3
wait_console "$T/b.out" '^ut-rtc-done' 120 || fail "RTC alarm: the typed commands did not finish: $(tail -c 400 "$T/b.out")"
console_has "$T/b.out" '^ut-rtc-set alarm_IRQ[[:space:]]*: yes' ||
	fail "RTC alarm: /proc/driver/rtc does not show the alarm set: $(tr -d '\r' <"$T/b.out" | grep '^ut-rtc-set')"
woke=$(tr -d '\r' <"$T/b.out" | sed -n 's/^ut-rtc-woke //p' | head -1)
[ -n "$woke" ] || fail "RTC alarm: the read of /dev/rtc0 never returned (no IRQ 8 in 60 s): $(tr -d '\r' <"$T/b.out" | grep '^ut-irq')"
set -- $woke
# 1 or 2 s after the write, the alarm being whole seconds of the RTC; the
# 8 bytes are the count (1) and AF | IRQF (0x20 | 0x80) in the low byte
[ "$1" -ge 1 ] && [ "$1" -le 10 ] || fail "RTC alarm: the read returned after $1 s, not at the alarm 2 s ahead"
[ "$2" = a0 ] && [ "$3" = 01 ] || fail "RTC alarm: /dev/rtc0 read $woke, want 'a0 01 ...' (one alarm interrupt)"
before=$(irq8 a) after=$(irq8 b)
[ -n "$before" ] && [ -n "$after" ] && [ "$after" -gt "$before" ] ||
	fail "RTC alarm: IRQ 8's count in /proc/interrupts did not grow ($before -> $after): $(tr -d '\r' <"$T/b.out" | grep '^ut-irq')"
ok "RTC alarm (wakealarm +2): IRQ 8 came $1 s after it was set, /dev/rtc0 read AF, /proc/interrupts' IRQ 8 went $before -> $after"
echo "reboot -f" >&3
wait_console "$T/b.out" '^ut: shell$' "$BOOT_S" 2 ||
	fail "typed reboot -f: the guest did not come back (run: $(kill -0 $VMPID 2>/dev/null && echo running || echo ended)): $(console_gist "$T/b.out") err: $(tail -3 "$T/b.err")"
[ "$(tr -d '\r' <"$T/b.out" | grep -cE '^ut: ready mode=shell cpus=2 ')" = 2 ] ||
	fail "after the reboot: $(tr -d '\r' <"$T/b.out" | grep '^ut: ready')"
kill -0 "$VMPID" 2>/dev/null || fail "run ended at the reboot"
ok "typed reboot -f restarts the guest in the same run (its ready marker again, 2 vCPUs)"
echo "poweroff -f" >&3
wait_exit "$VMPID" 120
rc=$?
VMPID=
[ $rc = 0 ] || fail "typed poweroff -f: run exited $rc: $(console_gist "$T/b.out") err: $(tail -3 "$T/b.err")"
ok "typed poweroff -f ends run with status 0 ($(( $(date +%s) - t0 )) s for boot, reboot and power-off)"
echo "PASS: Linux boots under understudy run"
