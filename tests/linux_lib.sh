# Helpers of the Linux guest tests (sourced after tests/lib.sh).
# The guest's command line: the serial console, and what makes Debian's
# kernel boot fast enough in the nested VM (tests/nested/run.sh; measured
# there with QEMU: init at 15.6 s of guest time, ../shared/PLATFORM.md).
LINUX_APPEND="console=ttyS0 earlyprintk=serial,ttyS0 nokaslr no_timer_check tsc=reliable lpj=4000000"
# need_linux_loader: skips (77) unless `understudy run` boots a kernel.
need_linux_loader() {
	"$BIN" run --help 2>&1 | grep -q -- '--kernel' ||
		{ echo "SKIP: $BIN run has no --kernel (the Linux loader of issue 26 is not in this build)"; exit 77; }
}
# linux_guest DIR: builds the guest (tests/linux_initramfs.sh) in DIR; sets
# LINUX_KERNEL and LINUX_INITRD. Skips (77) when a package is missing.
linux_guest() {
	local out rc
	out=$(bash tests/linux_initramfs.sh "$1")
	rc=$?
	[ $rc = 77 ] && { echo "$out"; exit 77; }
	[ $rc = 0 ] || fail "tests/linux_initramfs.sh $1: exit $rc"
	read -r LINUX_KERNEL LINUX_INITRD <<<"$out"
}
# console_has FILE PATTERN: a line of the serial console output in FILE
# (carriage returns dropped) matches the extended regular expression.
console_has() { tr -d '\r' <"$1" | grep -qE "$2"; }
# wait_console FILE PATTERN SECONDS [COUNT]: until COUNT (1) lines match,
# or the process $VMPID (if set) ended.
wait_console() {
	local i
	for i in $(seq 1 $(($3 * 10))); do
		[ "$(tr -d '\r' <"$1" | grep -cE "$2")" -ge "${4:-1}" ] && return 0
		[ -n "${VMPID:-}" ] && ! kill -0 "$VMPID" 2>/dev/null && break
		sleep 0.1
	done
	[ "$(tr -d '\r' <"$1" | grep -cE "$2")" -ge "${4:-1}" ]
}
# wait_exit PID SECONDS: the exit status of PID (a child), or 124 after
# SECONDS (PID is then killed).
wait_exit() {
	local i
	for i in $(seq 1 $(($2 * 10))); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$1" 2>/dev/null && { kill -9 "$1"; wait "$1" 2>/dev/null; return 124; }
	wait "$1"
}
# console_gist FILE: the guest's own lines and the kernel's last ones, for
# a failure message.
console_gist() {
	tr -d '\r' <"$1" | grep -E '^ut: |panic|Oops|BUG' | tail -6 | tr '\n' '|'
	echo " last: $(tr -d '\r' <"$1" | tail -3 | tr '\n' '|')"
}
# linux_vmlinux BZIMAGE OUT: the uncompressed ELF vmlinux inside a bzImage
# (the setup header's payload_offset/payload_length name it; xz, gzip, zstd
# or lz4 by its magic) written to OUT, as a kernel build's own vmlinux
# would be. Skips (77) when the payload's decompressor is not installed.
linux_vmlinux() {
	local kind
	kind=$(python3 - "$1" "$2.payload" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
setup = ((b[0x1f1] or 4) + 1) * 512
off, length = struct.unpack_from("<II", b, 0x248)
p = b[setup + off:setup + off + length]
open(sys.argv[2], "wb").write(p)
for magic, kind in ((b"\xfd7zXZ", "xz"), (b"\x1f\x8b", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd"),
                    (b"\x02\x21\x4c\x18", "lz4")):
    if p.startswith(magic):
        print(kind)
        break
else:
    print("unknown")
PY
	) || fail "linux_vmlinux: cannot read the payload of $1"
	case $kind in
	unknown) echo "SKIP: $1: a payload in a compression this test does not know"; exit 77 ;;
	lz4) command -v lz4 >/dev/null || { echo "SKIP: no lz4 to unpack $1"; exit 77; }
		lz4 -dc "$2.payload" >"$2" 2>/dev/null ;;
	*) command -v "$kind" >/dev/null || { echo "SKIP: no $kind to unpack $1"; exit 77; }
		# the payload ends in the kernel's own size word: the tool warns
		# about the trailing bytes but writes the whole ELF
		"$kind" -dc "$2.payload" >"$2" 2>/dev/null ;;
	esac
	rm -f "$2.payload"
	[ "$(head -c 4 "$2" | od -An -c | tr -d ' ')" = '177ELF' ] || fail "linux_vmlinux: $1's payload is not an ELF"
}
# linux_test_start: the start of every test of a Linux guest under
# protection, after its need_linux_kvm line (which tests/kvm_tests.sh reads
# to send it to the nested VM): BIN made absolute and built, a primary with
# the loader (--kernel), and fail keeping the agents' logs (KEEP, see
# linux_lab_cleanup). Skips (77) saying why.
linux_test_start() {
	BIN=${UNDERSTUDY_BIN:-build/understudy}
	case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
	[ -x "$BIN" ] || { echo "SKIP: $BIN not built"; exit 77; }
	"$BIN" primary --help 2>&1 | grep -q -- '--kernel' ||
		{ echo "SKIP: $BIN primary has no --kernel (the Linux loader of issue 26 is not in this build)"; exit 77; }
	fail() { echo "FAIL: $*"; KEEP=1; exit 1; }
}
# linux_ns_lab NAME: linux_lab without taps: a temporary directory $T, a
# namespace $VNS with its loopback up (the agents talk there), the guest
# (linux_guest), and the same cleanup on exit.
linux_ns_lab() {
	command -v ip >/dev/null || { echo "SKIP: no ip (iproute2) for the test's namespace"; exit 77; }
	VNS=ulv$$ CNS= LAB_NAME=$1 KEEP=
	T=$(mktemp -d "/tmp/$1.XXXXXX")
	trap linux_lab_cleanup EXIT
	ip netns add "$VNS" && ip -n "$VNS" link set lo up ||
		{ echo "SKIP: cannot make a network namespace (root needed)"; exit 77; }
	linux_guest "$T/guest"
}
# linux_lab NAME TAP...: what a test of a Linux guest behind taps needs
# (need_taps, need_linux_loader, e2fsprogs to read the disk): a temporary
# directory $T, namespaces $VNS (a bridge with the taps; the agents run
# there) and $CNS (the client, 10.79.0.1/24 on the bridge), the guest
# (linux_guest), and a cleanup on exit that keeps the agents' logs after a
# failure (fail sets KEEP): in $T, and where the nested VM's test logs go
# ($(dirname $BIN)/test-logs/NAME).
linux_lab() {
	local name=$1
	shift
	need_taps
	need_linux_loader
	command -v debugfs >/dev/null && command -v e2fsck >/dev/null ||
		{ echo "SKIP: no debugfs/e2fsck (e2fsprogs) to read the guest's disk"; exit 77; }
	VNS=ulv$$ CNS=ulc$$ LAB_NAME=$name KEEP=
	T=$(mktemp -d "/tmp/$name.XXXXXX")
	trap linux_lab_cleanup EXIT
	linux_guest "$T/guest"
	guest_lan "$VNS" "$CNS" lc$$ lb$$ 10.79.0.1/24 "$@"
}
linux_lab_cleanup() {
	local logs
	kill $(jobs -p) 2>/dev/null
	wait 2>/dev/null
	ip netns del "$VNS" 2>/dev/null
	[ -n "$CNS" ] && ip netns del "$CNS" 2>/dev/null
	logs=$(dirname "$BIN")/test-logs
	if [ -n "$KEEP" ] && [ -d "$logs" ]; then
		mkdir -p "$logs/$LAB_NAME" &&
			cp "$T"/*.log "$T"/*.events "$T"/*.console "$logs/$LAB_NAME/" 2>/dev/null
		echo "agents' logs copied to $logs/$LAB_NAME"
	fi
	if [ -n "$KEEP" ]; then echo "logs kept in $T"; else rm -rf "$T"; fi
}
