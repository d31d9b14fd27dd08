#!/usr/bin/env bash
# System test: the kv guest (virtio-net on a tap + a log on a virtio-blk
# disk), in network namespaces made here: a VM namespace with a bridge and
# the tap, a client namespace wired to it by a veth pair.
#  1. `run --guest kv:... --disk IMG --net tap:T`: ping; GET of a missing key
#     is NONE; PUT -> OK with versions 1, 2; GET -> VAL with the version and
#     the value (spaces in values kept); 64-byte keys and values taken; a
#     retried PUT (same client address and reqid) gets the same reply and
#     is applied once, the same reqid from another client address is a new
#     PUT; bad keys, values and requests get ERR <reqid> <reason>; garbage
#     gets no reply and does no harm (the guest answers after it).
#  2. The VM stopped, a fresh `run --guest kv` on the same image: every
#     acknowledged PUT is returned by GET with its version and value (log
#     replay); the dedupe table came back from the log (a retry after the
#     reboot gets the old reply); versions go on; kv:dump=1 lists the log.
#  3. A torn last record (one byte changed in a copy of the image): the
#     replay stops before it, the next PUT takes its place.
#     Snapshot and restore with the image as it was: the same answers.
#     migrate --with-disk to a secondary with its own image and tap: the
#     same answers there, the log goes on on its image.
#  4. Missing --net or --disk, bad arguments: a clear error, exit status.
#  5. A protected pair (each host its own image and tap on the bridge),
#     the primary SIGKILLed at seeded moments while a client PUTs with
#     retries (tests/kv_failover.py): every acknowledged PUT is returned by
#     GET with its version, versions never go back, no reqid is applied
#     twice, the secondary's image replays every acknowledged PUT.
# KV_TRIALS (default 30) trials, none started after KV_BUDGET_S (default
# 150) seconds; KV_SEED to replay one.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
BIN=${UNDERSTUDY_BIN:-build/understudy}
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
[ -x "$BIN" ] || { echo "SKIP: $BIN not built"; exit 77; }
need_kvm
need_taps

VNS=ukv$$ CNS=ukc$$ CIF=kc$$ BIF=kb$$
T=$(mktemp -d /tmp/sys_kv.XXXXXX)
VMPID= DSTPID= KEEP=
FAIL_LOGS="$T/*.err"
fail() { echo "FAIL: $*"; show_logs; KEEP=1; exit 1; }
cleanup() {
	[ -n "$VMPID" ] && kill "$VMPID" 2>/dev/null
	[ -n "$DSTPID" ] && kill "$DSTPID" 2>/dev/null
	wait 2>/dev/null
	ip netns del "$VNS" 2>/dev/null
	ip netns del "$CNS" 2>/dev/null
	if [ -n "$KEEP" ]; then echo "logs kept in $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT

guest_lan "$VNS" "$CNS" "$CIF" "$BIF" 10.78.0.1/24 tapk tapk2

GIP=10.78.0.2 PORT=7000
IMG=$T/kv.img
truncate -s 8M "$IMG"

start_kv() {   # name image
	ip netns exec "$VNS" "$BIN" run --guest "kv:ip=$GIP/24,port=$PORT" --disk "$2" --net tap:tapk \
		--console stdio </dev/null >"$T/$1.out" 2>"$T/$1.err" &
	VMPID=$!
	wait_log "$T/$1.out" "kv ready" 10 || fail "$1: guest not ready: $(tail -3 "$T/$1.err") $(cat "$T/$1.out")"
}
stop_kv() {
	kill "$VMPID"; wait "$VMPID" 2>/dev/null; VMPID=
}
# kv [--sport N] REQUEST...: the replies, one a line
kv() { ip netns exec "$CNS" python3 tests/kv_client.py "$GIP" "$PORT" "$@"; }
expect() {   # what got want
	[ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
}

# 1. the protocol
start_kv a "$IMG"
grep -q "kv replayed 0 records" "$T/a.out" || fail "a fresh image replayed something: $(head -2 "$T/a.out")"
ip netns exec "$CNS" ping -c 3 -W 2 -q $GIP >"$T/ping" || fail "ping: $(cat "$T/ping")"
ok "ping answered: $(grep -o '[0-9]* received' "$T/ping")"
expect "GET of a missing key" "$(kv "GET g1 nokey")" "NONE g1 nokey"
got=$(kv "PUT p1 alpha one" "GET g2 alpha" "PUT p2 alpha two words" "GET g3 alpha")
expect "PUT/GET" "$got" $'OK p1 1\nVAL g2 alpha 1 one\nOK p2 2\nVAL g3 alpha 2 two words'
ok "GET of a missing key: NONE; PUT: OK with versions 1, 2; GET: VAL with version and value"
k64=$(printf 'k%.0s' $(seq 64)) v64=$(printf 'v%.0s' $(seq 64))
expect "64-byte key and value" "$(kv "PUT p3 $k64 $v64" "GET g4 $k64")" $'OK p3 1\nVAL g4 '"$k64 1 $v64"
ok "a 64-byte key with a 64-byte value is taken"

# a retry: the same reply, applied once; the same reqid from elsewhere is new
got=$(kv --sport 40001 "PUT r1 beta first" "PUT r1 beta first" "PUT r1 beta changed" "GET g5 beta")
expect "retried PUT" "$got" $'OK r1 1\nOK r1 1\nOK r1 1\nVAL g5 beta 1 first'
expect "retry from the same address" "$(kv --sport 40001 "PUT r1 beta again")" "OK r1 1"
expect "same reqid, another address" "$(kv --sport 40002 "PUT r1 beta second" "GET g6 beta")" \
	$'OK r1 2\nVAL g6 beta 2 second'
ok "a retried PUT (same address and reqid) gets the same reply and is applied once"

# errors
got=$(kv "PUT e1 ${k64}x v" "PUT e2 key" "PUT e3 key ${v64}x" "PUT e4 key a$(printf '\t')b" \
	 "GET e5 alpha extra" "GET e6" "PUT e7 key ")
expect "errors" "$got" $'ERR e1 bad-key\nERR e2 bad-value\nERR e3 bad-value\nERR e4 bad-value\nERR e5 bad-request\nERR e6 bad-key\nERR e7 bad-value'
expect "nothing applied by the errors" "$(kv "GET g7 key")" "NONE g7 key"
ok "bad keys, values and requests: ERR <reqid> <reason>, nothing applied"

# garbage: no reply, no harm
for hex in "" "00" "ffffffffffffffff" "48454c4c4f" "505554" "50555420" "7075742072206120620a" \
	   "474554202020" "5055542000ff206b2076" "$(head -c 1400 /dev/urandom | od -An -tx1 | tr -d ' \n')"; do
	got=$(kv --raw "$hex")
	[ "$got" = NOREPLY ] || fail "garbage '${hex:0:40}' got a reply: $got"
done
expect "after the garbage" "$(kv "GET g8 alpha")" "VAL g8 alpha 2 two words"
ok "garbage (empty, binary, lowercase, a verb without reqid, 1400 random bytes): no reply, no harm"

# more PUTs to check after the reboot
declare -A want
for i in $(seq 1 20); do
	k=key$((i % 7))
	r=$(kv "PUT m$i $k value-$i") || fail "PUT m$i"
	[[ $r == "OK m$i "* ]] || fail "PUT m$i: $r"
	want[$k]="${r#OK m$i } value-$i"
done
want[alpha]="2 two words" want[beta]="2 second" want[$k64]="1 $v64"
stop_kv
ok "20 more PUTs over 7 keys acknowledged; the VM stopped"

# 2. replay
start_kv b "$IMG"
nrec=$(sed -n 's/^kv replayed \([0-9]*\) records.*/\1/p' "$T/b.out")
[ "$nrec" = 25 ] || fail "replayed '$nrec' records, want 25 (5 PUTs + 20): $(head -1 "$T/b.out")"
n=0
for k in "${!want[@]}"; do
	got=$(kv "GET q$n $k")
	expect "after the replay, $k" "$got" "VAL q$n $k ${want[$k]}"
	n=$((n + 1))
done
ok "a fresh run on the image replayed 25 records: every acknowledged PUT is there ($n keys, versions and values)"
expect "a retry after the reboot" "$(kv --sport 40001 "PUT r1 beta late")" "OK r1 1"
expect "a new PUT after the reboot" "$(kv "PUT n1 alpha three" "GET n2 alpha")" \
	$'OK n1 3\nVAL n2 alpha 3 three'
ok "the dedupe table came back from the log (a retry gets its old reply); versions go on"
stop_kv
ip netns exec "$VNS" "$BIN" run --guest kv:dump=1 --disk "$IMG" </dev/null >"$T/dump.out" 2>"$T/dump.err" ||
	fail "kv:dump=1: $(cat "$T/dump.err")"
[ "$(grep -c '^rec ' "$T/dump.out")" = 26 ] || fail "dump: $(grep -c '^rec ' "$T/dump.out") records, want 26"
grep -q "^rec 25 10.78.0.1:[0-9]* n1 alpha 3 three$" "$T/dump.out" || fail "dump: last record: $(tail -2 "$T/dump.out")"
ok "kv:dump=1 lists the 26 records (seq, client, reqid, key, version, value)"

# 3. a torn last record
cp "$IMG" "$T/torn.img"
printf 'X' | dd of="$T/torn.img" bs=1 seek=$((25 * 512 + 140)) conv=notrunc status=none
ip netns exec "$VNS" "$BIN" run --guest kv:dump=1 --disk "$T/torn.img" </dev/null >"$T/torn.out" 2>"$T/torn.err"
grep -q "kv replayed 25 records" "$T/torn.out" || fail "torn record: $(grep replayed "$T/torn.out")"
start_kv c "$T/torn.img"
expect "after a torn record" "$(kv "GET t1 alpha" "PUT t2 alpha four" "GET t3 alpha")" \
	$'VAL t1 alpha 2 two words\nOK t2 3\nVAL t3 alpha 3 four'
stop_kv
ip netns exec "$VNS" "$BIN" run --guest kv:dump=1 --disk "$T/torn.img" </dev/null >"$T/torn2.out" 2>"$T/torn2.err"
grep -q "^rec 25 10.78.0.1:[0-9]* t2 alpha 3 four$" "$T/torn2.out" || fail "the PUT after a torn record: $(tail -2 "$T/torn2.out")"
ok "a torn last record ends the replay; the next PUT takes its sector"

# 3b. snapshot and restore (the image as the snapshot left it): the store
# answers the same, the restored guest announces itself, versions go on.
ip netns exec "$VNS" "$BIN" run --guest "kv:ip=$GIP/24,port=$PORT" --disk "$IMG" --net tap:tapk \
	--control "$T/s.ctl" --console stdio </dev/null >"$T/s.out" 2>"$T/s.err" &
VMPID=$!
wait_log "$T/s.out" "kv ready" 10 || fail "snapshot: guest not ready"
before=$(kv "PUT s1 gamma snap" "GET s2 alpha" "GET s3 gamma")
expect "before the snapshot" "$before" $'OK s1 1\nVAL s2 alpha 3 three\nVAL s3 gamma 1 snap'
ip netns exec "$VNS" "$BIN" snapshot --control "$T/s.ctl" --out "$T/snap" >/dev/null 2>"$T/snap.err" ||
	fail "snapshot: $(cat "$T/snap.err")"
stop_kv
ip netns exec "$VNS" "$BIN" restore "$T/snap" --disk "$IMG" --net tap:tapk --console stdio </dev/null \
	>"$T/r.out" 2>"$T/r.err" &
VMPID=$!
wait_log "$T/r.out" "announced" 10 || fail "restored kv did not announce: $(tail -3 "$T/r.err")"
expect "after the restore" "$(kv "GET s2 alpha" "GET s3 gamma" "PUT s4 gamma after")" \
	$'VAL s2 alpha 3 three\nVAL s3 gamma 1 snap\nOK s4 2'
stop_kv
ip netns exec "$VNS" "$BIN" run --guest kv:dump=1 --disk "$IMG" </dev/null >"$T/dump2.out" 2>"$T/dump2.err"
grep -q "^rec 27 10.78.0.1:[0-9]* s4 gamma 2 after$" "$T/dump2.out" || fail "after the restore, the log: $(tail -2 "$T/dump2.out")"
ok "snapshot/restore (same image): the store answers the same, announces itself, the log goes on"

# 3c. migrate --with-disk to a waiting secondary with its own image and tap
# on the same bridge: the store answers the same there, versions go on.
truncate -s 8M "$T/dst.img"
ip netns exec "$VNS" "$BIN" secondary --listen 127.0.0.1:7710 --console tcp:127.0.0.1:7711 --insecure \
	--disk "$T/dst.img" --net tap:tapk2 --failover-timeout-ms $(nested 2000 6000) 2>"$T/m.dst.err" &
DSTPID=$!
ip netns exec "$VNS" "$BIN" run --guest "kv:ip=$GIP/24,port=$PORT" --disk "$IMG" --net tap:tapk \
	--control "$T/m.ctl" --console stdio </dev/null >"$T/m.out" 2>"$T/m.err" &
VMPID=$!
wait_log "$T/m.out" "kv ready" 10 || fail "migrate: guest not ready"
expect "before the migration" "$(kv "PUT m1 delta moved" "GET m2 alpha")" $'OK m1 1\nVAL m2 alpha 3 three'
# (the link's silence bound: the default 500 ms on a host, 3 s against the
# nested VM's stalls of a second or more: tests/lib.sh nested)
ip netns exec "$VNS" "$BIN" migrate --control "$T/m.ctl" --to 127.0.0.1:7710 --insecure --with-disk \
	--timeout-ms $(nested 500 3000) >/dev/null 2>"$T/m.migrate" || fail "migrate: $(tail -3 "$T/m.migrate") $(tail -3 "$T/m.err")"
wait "$VMPID"; rc=$?; VMPID=
[ $rc = 0 ] || fail "the migrated source exited $rc"
wait_log "$T/m.dst.err" "TOOK OVER" $(nested 10 40) || fail "the destination does not run the guest: $(tail -3 "$T/m.dst.err")"
expect "after the migration" "$(kv "GET m3 delta" "GET m4 alpha" "PUT m5 delta there")" \
	$'VAL m3 delta 1 moved\nVAL m4 alpha 3 three\nOK m5 2'
kill "$DSTPID"; wait "$DSTPID" 2>/dev/null
ip netns exec "$VNS" "$BIN" run --guest kv:dump=1 --disk "$T/dst.img" </dev/null >"$T/dump3.out" 2>"$T/dump3.err"
grep -q " m5 delta 2 there$" "$T/dump3.out" || fail "the destination's image: $(tail -2 "$T/dump3.out")"
ok "migrate --with-disk to a secondary with its own image and tap: the store answers the same, the log goes on there"

# 4. errors at boot
vm() { ip netns exec "$VNS" "$BIN" run "$@" </dev/null >"$T/e.out" 2>"$T/e.err"; }
vm --guest kv:ip=$GIP/24 --disk "$IMG"; rc=$?
[ $rc = 3 ] && grep -q "no virtio-net device (run with --net" "$T/e.out" || fail "kv without --net: rc $rc $(cat "$T/e.out")"
vm --guest kv:ip=$GIP/24 --net tap:tapk; rc=$?
[ $rc = 3 ] && grep -q "no virtio-blk device (run with --disk" "$T/e.out" || fail "kv without --disk: rc $rc $(cat "$T/e.out")"
vm --guest kv:port=7 --disk "$IMG" --net tap:tapk; rc=$?
[ $rc = 2 ] && grep -q "error kv: need ip=" "$T/e.out" || fail "kv without ip=: rc $rc $(cat "$T/e.out")"
vm --guest kv:ip=10.78.0.255/24 --disk "$IMG" --net tap:tapk; rc=$?
[ $rc = 2 ] || fail "kv with a broadcast address: rc $rc"
for bad in "kv:ip=$GIP/24,bogus=1" "kv:ip=$GIP/24,port=x"; do
	vm --guest "$bad" --disk "$IMG" --net tap:tapk; rc=$?
	[ $rc = 2 ] || fail "--guest '$bad': rc $rc $(cat "$T/e.err")"
done
ok "without --net or --disk, without ip=, or with bad arguments: a clear error and exit 2/3"

# 5. failover of a protected pair, disk and network: tests/kv_failover.py
seed=${KV_SEED:-$RANDOM}
ip netns exec "$CNS" python3 tests/kv_failover.py "$BIN" "$VNS" "${KV_TRIALS:-30}" "$seed" "$T" tapk tapk2 \
	"${KV_BUDGET_S:-150}" || fail "kv across failover (seed $seed; KV_SEED=$seed replays it)"
echo "PASS: kv guest"
