#!/usr/bin/env bash
# System test: `understudy snapshot` against a running VM (full, then diffs),
# `understudy restore` of the chain, and every way a snapshot can be bad:
# corrupted, truncated, out of chain, another machine's, a full disk.
set -u
. "$(dirname "$0")/lib.sh"
BIN=${UNDERSTUDY_BIN:-build/understudy}
[ -x "$BIN" ] || { echo "SKIP: $BIN not built"; exit 77; }
need_kvm

# Part 3 mounts a small tmpfs: as root, the whole test runs in a private mount
# namespace of its own, so the mount is seen by the VM it starts and by no one
# else, and goes away with the test.
if [ -z "${US_SNAPSHOT_NS:-}" ] && [ "$(id -u)" = 0 ] && unshare -m --propagation private true 2>/dev/null; then
	US_SNAPSHOT_NS=1 exec unshare -m --propagation private bash "$0" "$@"
fi

T=$(mktemp -d /tmp/sys_snapshot.XXXXXX)
VMPID=
cleanup() {
	[ -n "$VMPID" ] && kill "$VMPID" 2>/dev/null
	exec 3>&- 2>/dev/null
	mountpoint -q "$T/small" 2>/dev/null && umount -l "$T/small"
	rm -rf "$T"
}
trap cleanup EXIT
FAIL_LOGS="$T/*.err"
fail() { echo "FAIL: $*"; show_logs; exit 1; }
# Waits for a step X times longer in the nested VM (tests/lib.sh nested),
# where QEMU's emulator stalls a process for a second or more.
X=$(nested 1 4)

wait_lines() {   # file count
	for _ in $(seq 1 $((200 * X))); do
		[ "$(grep -c '' "$1" 2>/dev/null)" -ge "$2" ] && return 0
		sleep 0.05
	done
	fail "timed out waiting for $2 lines in $1: $(cat "$1")"
}

start_vm() {   # name, extra options...
	local n=$1; shift
	rm -f "$T/$n.in"; mkfifo "$T/$n.in"
	"$BIN" run --guest counter --control "$T/$n.ctl" "$@" <"$T/$n.in" >"$T/$n.out" 2>"$T/$n.err" &
	VMPID=$!
	exec 3>"$T/$n.in"
	for _ in $(seq 1 $((100 * X))); do [ -S "$T/$n.ctl" ] && return 0; sleep 0.05; done
	fail "control socket did not appear"
}

stop_vm() {
	echo halt >&3
	exec 3>&-
	wait "$VMPID" || fail "VM exited with $?"
	VMPID=
}

# The reference: an uninterrupted conversation.
printf 'incr\nincr\nincr\nincr\nincr\nincr\nget\nincr\nhalt\n' |
	"$BIN" run --guest counter --mem 16M >"$T/ref.out" 2>/dev/null || fail "reference run"
[ "$(grep -c '' "$T/ref.out")" = 8 ] || fail "reference output: $(cat "$T/ref.out")"

# 1. full + two diffs of a running VM; restore the chain and talk on.
start_vm a --mem 16M
printf 'incr\nincr\nincr\n' >&3; wait_lines "$T/a.out" 3
"$BIN" snapshot --control "$T/a.ctl" --out "$T/base" || fail "full snapshot"
printf 'incr\nincr\n' >&3; wait_lines "$T/a.out" 5
"$BIN" snapshot --control "$T/a.ctl" --out "$T/d1" --incremental || fail "diff 1"
printf 'incr\n' >&3; wait_lines "$T/a.out" 6
"$BIN" snapshot --control "$T/a.ctl" --out "$T/d2" --incremental || fail "diff 2"
stop_vm
printf 'get\nincr\nhalt\n' | "$BIN" restore "$T/base" "$T/d1" "$T/d2" >"$T/r.out" 2>"$T/r.err" ||
	fail "restore: $(cat "$T/r.err")"
diff <(sed -n '7,8p' "$T/ref.out") "$T/r.out" >/dev/null || fail "restored conversation differs: $(cat "$T/r.out")"
echo "ok restore of full + 2 diffs continues the conversation ($(head -1 "$T/r.out"))"
ls "$T" | grep -q tmp && fail "temporary files left behind"

# 1b. a snapshot holds guest RAM: private (0600 whatever the umask), and never
# written through a symbolic link planted at the destination or at the
# temporary name the writer once used (<path>.tmp.<pid>).
umask 022
echo victim >"$T/victim"; echo victim2 >"$T/victim2"
start_vm p --mem 16M
printf 'incr\n' >&3; wait_lines "$T/p.out" 1
"$BIN" snapshot --control "$T/p.ctl" --out "$T/priv" || fail "snapshot for the mode check"
[ "$(stat -c %a "$T/priv")" = 600 ] || fail "snapshot mode $(stat -c %a "$T/priv"), want 600"
ln -s "$T/victim" "$T/link"
if "$BIN" snapshot --control "$T/p.ctl" --out "$T/link" 2>"$T/link.err"; then
	fail "a snapshot was written to a symbolic link"
fi
grep -q "symbolic link" "$T/link.err" || fail "symlink refusal unclear: $(cat "$T/link.err")"
[ -L "$T/link" ] && [ "$(cat "$T/victim")" = victim ] || fail "the link or its target changed"
ln -s "$T/victim2" "$T/pred.tmp.$VMPID"
"$BIN" snapshot --control "$T/p.ctl" --out "$T/pred" || fail "snapshot beside a planted temporary name"
[ "$(cat "$T/victim2")" = victim2 ] || fail "written through the link at the old temporary name"
[ -f "$T/pred" ] && [ ! -L "$T/pred" ] && [ "$(stat -c %a "$T/pred")" = 600 ] ||
	fail "snapshot beside a planted temporary name: $(ls -l "$T/pred")"
rm -f "$T/pred.tmp.$VMPID" "$T/link"
stop_vm
echo "ok snapshots are 0600; a symlinked destination is refused ($(head -c 120 "$T/link.err")); links at the destination and the old temporary name are never written through"

# 2. bad snapshots: a clear error, no guest output.
expect_refused() {   # what, files...
	local what=$1; shift
	if printf 'get\nhalt\n' | timeout 20 "$BIN" restore "$@" >"$T/bad.out" 2>"$T/bad.err"; then
		fail "$what: restore succeeded"
	fi
	[ -s "$T/bad.out" ] && fail "$what: the guest ran: $(cat "$T/bad.out")"
	grep -qiE 'checksum|truncated|not the diff|not an understudy|another machine|does not apply|damaged|incremental' "$T/bad.err" ||
		fail "$what: unclear error: $(cat "$T/bad.err")"
	echo "ok $what refused: $(grep -m1 -iE 'checksum|truncated|not the diff|another|does not apply|damaged|incremental' "$T/bad.err")"
}
cp "$T/base" "$T/corrupt"
printf '\x55' | dd of="$T/corrupt" bs=1 seek=$((8 * 1024 * 1024)) conv=notrunc 2>/dev/null
expect_refused "corrupted page data" "$T/corrupt"
cp "$T/d2" "$T/corrupt2"
printf '\x55' | dd of="$T/corrupt2" bs=1 seek=$(( $(stat -c %s "$T/d2") - 200 )) conv=notrunc 2>/dev/null
expect_refused "corrupted state in a diff" "$T/base" "$T/d1" "$T/corrupt2"
head -c $(( $(stat -c %s "$T/base") - 5000 )) "$T/base" >"$T/trunc"
expect_refused "truncated snapshot" "$T/trunc"
expect_refused "diff out of chain" "$T/base" "$T/d2"
expect_refused "diff alone" "$T/d1"

start_vm other --mem 32M
printf 'incr\n' >&3; wait_lines "$T/other.out" 1
"$BIN" snapshot --control "$T/other.ctl" --out "$T/obase" || fail "other full"
"$BIN" snapshot --control "$T/other.ctl" --out "$T/od1" --incremental || fail "other diff"
stop_vm
expect_refused "another machine's diff" "$T/base" "$T/od1"

# 3. a full disk: an error, the previous snapshot intact, the next one complete.
mkdir "$T/small"
if [ -z "${US_SNAPSHOT_NS:-}" ]; then
	echo "SKIP: sys_snapshot part 3 (full disk): no private mount namespace (uid $(id -u); unshare -m failed)"
	echo "PASS sys_snapshot parts 1-2"
	exit 0
fi
if ! err=$(mount -t tmpfs -o size=24m tmpfs "$T/small" 2>&1); then
	echo "SKIP: sys_snapshot part 3 (full disk): cannot mount a tmpfs: $err"
	echo "PASS sys_snapshot parts 1-2"
	exit 0
fi
start_vm c --mem 16M
printf 'incr\nincr\n' >&3; wait_lines "$T/c.out" 2
"$BIN" snapshot --control "$T/c.ctl" --out "$T/small/a" || fail "first snapshot on the small disk"
sum_a=$(md5sum <"$T/small/a")
printf 'incr\n' >&3; wait_lines "$T/c.out" 3
if "$BIN" snapshot --control "$T/c.ctl" --out "$T/small/b" 2>"$T/enospc.err"; then
	fail "a second full snapshot fit in 24 MiB"
fi
grep -q 'No space' "$T/enospc.err" || fail "ENOSPC error unclear: $(cat "$T/enospc.err")"
echo "ok full disk: $(cat "$T/enospc.err")"
[ -e "$T/small/b" ] && fail "partial snapshot left at the target name"
ls "$T/small" | grep -q tmp && fail "temporary file left on the full disk"
[ "$(md5sum <"$T/small/a")" = "$sum_a" ] || fail "previous snapshot changed"
printf 'incr\n' >&3; wait_lines "$T/c.out" 4
"$BIN" snapshot --control "$T/c.ctl" --out "$T/small/c" --incremental || fail "the next snapshot"
stop_vm
printf 'get\nhalt\n' | "$BIN" restore "$T/small/a" "$T/small/c" >"$T/c2.out" 2>"$T/c2.err" ||
	fail "restore after ENOSPC: $(cat "$T/c2.err")"
[ "$(cat "$T/c2.out")" = "$(sed -n 4p "$T/c.out")" ] ||
	fail "after ENOSPC the chain restores to $(cat "$T/c2.out"), want $(sed -n 4p "$T/c.out")"
echo "ok after ENOSPC: the previous snapshot intact, the next diff complete ($(cat "$T/c2.out"))"
echo "PASS sys_snapshot"
