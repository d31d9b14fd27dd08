#!/usr/bin/env bash
# System test: the virtio-blk device end to end with the blk guest: PCI
# enumeration and BAR sizing, feature negotiation, reads and writes that
# land in the image file (checked with dd/od), a descriptor outside RAM
# (DEVICE_NEEDS_RESET, the VM runs on, the driver re-initialises), an
# MSI-X interrupt delivered into the guest, a
# snapshot taken in the middle of a long selftest and restored (the guest
# goes on with its queue where it was), and the errors of a bad --disk.
set -u
. "$(dirname "$0")/lib.sh"
BIN=${UNDERSTUDY_BIN:-build/understudy}
[ -x "$BIN" ] || { echo "SKIP: $BIN not built"; exit 77; }
need_kvm

T=$(mktemp -d /tmp/sys_virtio_blk.XXXXXX)
VMPID=
cleanup() {
	[ -n "$VMPID" ] && kill "$VMPID" 2>/dev/null
	exec 3>&- 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
FAIL_LOGS="$T/*.err"
fail() { echo "FAIL: $*"; show_logs; exit 1; }
# Waits for a step X times longer in the nested VM (tests/lib.sh nested),
# where QEMU's emulator stalls a process for a second or more.
X=$(nested 1 4)

wait_lines() {   # file count [tenths of a second]
	for _ in $(seq 1 "${3:-600}"); do
		[ "$(grep -c '' "$1" 2>/dev/null)" -ge "$2" ] && return 0
		sleep 0.1
	done
	fail "timed out waiting for $2 lines in $1: $(tail -5 "$1")"
}

start_vm() {   # name, options...
	local n=$1; shift
	rm -f "$T/$n.in"; mkfifo "$T/$n.in"
	"$BIN" "$@" --control "$T/$n.ctl" <"$T/$n.in" >"$T/$n.out" 2>"$T/$n.err" &
	VMPID=$!
	exec 3>"$T/$n.in"
	for _ in $(seq 1 $((200 * X))); do [ -S "$T/$n.ctl" ] && return 0; sleep 0.05; done
	fail "control socket did not appear: $(cat "$T/$n.err")"
}

stop_vm() {
	echo halt >&3
	exec 3>&-
	wait "$VMPID" || fail "VM exited with $?: $(tail -3 "$T/$1.err")"
	VMPID=
}

line() { sed -n "${2}p" "$T/$1.out"; }

# sector's first pattern line, as the guest writes it: s<10 digits> p<5 digits> l00 ........
pattern_line() { printf 's%010d p%05d l00 ........' "$1" "$2"; }
sector_head() { dd if="$T/disk.img" bs=512 skip="$1" count=1 2>/dev/null | head -c 31; }

truncate -s 64M "$T/disk.img"

# 1. enumeration, negotiation, a write seen in the file, a selftest.
start_vm a run --guest blk --mem 32M --disk "$T/disk.img"
printf 'info\nwrite 7 0a1b2c3d\nread 7\nselftest 0 64 1\nid\nflush\n' >&3
wait_lines "$T/a.out" 6
case "$(line a 1)" in
	"blk capacity=131072 features=0000000100002200 bar=00000000e0000000 bar_size=32768 queue=16") ;;
	*) fail "info: $(line a 1)" ;;
esac
[ "$(line a 2)" = ok ] || fail "write: $(line a 2)"
[ "$(line a 3)" = "data 0a1b2c3d$(printf '0%.0s' $(seq 1 56))" ] || fail "read: $(line a 3)"
[ "$(line a 4)" = "ok 64" ] || fail "selftest: $(line a 4)"
[ "$(line a 5)" = "id disk.img" ] || fail "id: $(line a 5)"
[ "$(line a 6)" = ok ] || fail "flush: $(line a 6)"
[ "$(sector_head 5)" = "$(pattern_line 5 1)" ] || fail "sector 5 in the image: $(sector_head 5 | od -c | head -3)"
[ "$(sector_head 63)" = "$(pattern_line 63 1)" ] || fail "sector 63 in the image"
echo "ok guest enumerated PCI, sized the BAR, negotiated; its writes are in the image"

# 2. a descriptor outside RAM: DEVICE_NEEDS_RESET, the VM carries on; then
# one request with interrupts on: exactly one MSI-X message reaches the guest.
printf 'evil\nselftest 64 16 1\nmsix\n' >&3
wait_lines "$T/a.out" 10
[ "$(line a 7)" = needs-reset ] || fail "bad descriptor: $(line a 7)"
[ "$(line a 8)" = "reinit ok" ] || fail "re-init after reset: $(line a 8)"
[ "$(line a 9)" = "ok 16" ] || fail "after reset: $(line a 9)"
grep -q "outside guest RAM; the device needs a reset" "$T/a.err" || fail "no clear log line for the bad descriptor"
echo "ok a descriptor outside RAM sets DEVICE_NEEDS_RESET; the device works again after a reset"
[ "$(line a 10)" = "msix ok" ] || fail "MSI-X: $(line a 10)"
echo "ok MSI-X: a completion with interrupts on raised one interrupt in the guest"

# 3. snapshot in the middle of a long selftest; restore; the guest goes on.
echo 'selftest 1000 100000 2' >&3
sleep 0.3
"$BIN" snapshot --control "$T/a.ctl" --out "$T/snap" || fail "snapshot"
midway=1
[ "$(grep -c '' "$T/a.out")" -ge 11 ] && midway=0
wait_lines "$T/a.out" 11
[ "$(line a 11)" = "ok 100000" ] || fail "selftest during the snapshot: $(line a 11)"
stop_vm a
[ $midway = 1 ] || echo "SKIP: the snapshot landed after the selftest ended (slow host); restore still checked"

if "$BIN" restore "$T/snap" </dev/null >"$T/nodisk.out" 2>"$T/nodisk.err"; then
	fail "restore of a VM with a disk ran without --disk"
fi
grep -q "give its image with --disk" "$T/nodisk.err" || fail "restore without --disk: $(cat "$T/nodisk.err")"

start_vm r restore "$T/snap" --disk "$T/disk.img"
n=0
if [ $midway = 1 ]; then
	wait_lines "$T/r.out" 1
	[ "$(line r 1)" = "ok 100000" ] || fail "restored selftest did not finish well: $(line r 1)"
	n=1
fi
printf 'check 1000 100000 2\nselftest 120000 16 3\nread 7\n' >&3
wait_lines "$T/r.out" $((n + 3))
[ "$(line r $((n + 1)))" = "ok 100000" ] || fail "check after restore: $(line r $((n + 1)))"
[ "$(line r $((n + 2)))" = "ok 16" ] || fail "selftest after restore: $(line r $((n + 2)))"
want="data $( (pattern_line 7 1; echo) | od -An -tx1 | tr -d ' \n')"
[ "$(line r $((n + 3)))" = "$want" ] || fail "sector 7 after restore: $(line r $((n + 3))), want $want"
stop_vm r
[ "$(sector_head 120015)" = "$(pattern_line 120015 3)" ] || fail "restored guest's write not in the image"
[ "$(sector_head 100999)" = "$(pattern_line 100999 2)" ] || fail "last selftest sector not in the image"
echo "ok snapshot mid-selftest restored: the guest went on with its queue (midway=$midway)"

# 4. a bad --disk is a clear error, never a crash.
expect_error() {   # status pattern options...
	local want=$1 pat=$2 rc; shift 2
	echo halt | "$BIN" run --guest blk "$@" >"$T/e.out" 2>"$T/e.err"
	rc=$?
	[ $rc = "$want" ] || fail "$*: exit $rc, want $want: $(cat "$T/e.err")"
	grep -q "$pat" "$T/e.err" || fail "$*: no '$pat' in: $(cat "$T/e.err")"
}
expect_error 2 "No such file or directory" --disk "$T/missing.img"   # judged at parsing
expect_error 2 "Is a directory" --disk "$T"
truncate -s 100 "$T/tiny.img"
expect_error 1 "not a raw image" --disk "$T/tiny.img"
expect_error 2 "need a file name" --disk ""
# The agents take a disk now (tests/sys_disk_failover.sh): a secondary's
# image must exist and be writable at start, and --disk-sync needs --disk.
"$BIN" secondary --listen 127.0.0.1:9 --console tcp:127.0.0.1:9 --insecure --disk "$T/none.img" \
	>/dev/null 2>"$T/e.err"
[ $? = 2 ] && grep -q "none.img: No such file" "$T/e.err" || fail "secondary --disk missing: $(cat "$T/e.err")"
"$BIN" secondary --listen 127.0.0.1:9 --console tcp:127.0.0.1:9 --insecure --disk-sync ack \
	>/dev/null 2>"$T/e.err"
[ $? = 2 ] && grep -q "needs --disk" "$T/e.err" || fail "secondary --disk-sync: $(cat "$T/e.err")"
# The image is locked by the VM that has it.
start_vm l run --guest blk --disk "$T/disk.img"
expect_error 1 "in use by another process" --disk "$T/disk.img"
stop_vm l
echo "ok a missing, unusable or busy --disk, or --disk-sync without one, is refused with a clear message"
