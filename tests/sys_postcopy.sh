#!/usr/bin/env bash
# understudy migrate --bandwidth and --postcopy-after:
#   1. --bandwidth 50: an idle 256 MiB guest with 240 MiB of incompressible
#      pages takes about as long as its bytes need at 50 MiB/s, and completes;
#   2. a guest dirtying faster than a 1 MiB/s link carries, --postcopy-after 2
#      --no-auto-converge: completes via post-copy; the destination's RAM at
#      the switch equals the source's (test mode: a digest of all RAM at the
#      source's pause against the destination's pages before its resume plus
#      each fetched page as it arrived, before the guest could write it);
#   3. the counter conversation goes on across a post-copy migration in which
#      every page is fetched on demand (test mode: all pages stale, the
#      background stream 3 s late): the guest's code, stacks and page tables
#      fault, from the guest and from KVM emulating it; afterwards the
#      destination's VM is an ordinary one: `protect` gives it a secondary;
#      the stress guest (2 vCPUs, LAPIC timer, AVX) passes its self-check
#      after the same;
#   4. the source killed during post-copy: the destination reports the VM
#      lost, exits 1 and does not run the guest on;
#   5. the destination killed during post-copy: the source reports the VM
#      lost and exits 1, migrate exits 1.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_host_kvm "post-copy steps held to 2 s timeouts"
tmp=$(mktemp -d)
cleanup() { [ -n "${POSTCOPY_KEEP:-}" ] && cp -r "$tmp" "$POSTCOPY_KEEP"; kill -9 $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
count() { python3 tests/counter_client.py "$@" | tail -1 | cut -d' ' -f1; }
n=0
start_dest() {   # sets dport dcon dp; logs $tmp/$n.dst.log
	n=$((n + 1)); dport=$(free_port); dcon=$(free_port)
	"$BIN" secondary --listen 127.0.0.1:$dport --console tcp:127.0.0.1:$dcon --insecure \
		--failover-timeout-ms 2000 --control "$tmp/$n.dst.ctl" 2>"$tmp/$n.dst.log" &
	dp=$!
	wait_port $dport || fail "destination did not listen"
}
start_run() {   # [ENV=V...] -- GUEST ARGS...: sets scon sp
	local envs=()
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	scon=$(free_port)
	env "${envs[@]}" "$BIN" run "$@" --console tcp:127.0.0.1:$scon --control "$tmp/$n.src.ctl" \
		2>"$tmp/$n.src.log" &
	sp=$!
	wait_port $scon || fail "source did not start"
}
migrate() {   # ARGS...: to the current destination, --json on stdout
	"$BIN" migrate --timeout-ms 2000 --control "$tmp/$n.src.ctl" --to 127.0.0.1:$dport --insecure "$@"
}
summary() {   # FILE EXPR: asserts EXPR on the --json summary s
	tail -1 "$1" | python3 -c '
import json, sys
s = json.loads(sys.stdin.read())
assert s["summary"] and ('"$2"'), s
print("   summary:", s)' || fail "summary ($2): $(tail -1 "$1")"
}

# 1. Bandwidth.
start_dest; start_run -- --guest counter:area_mb=240,dense=1 --mem 256M
[ "$(count $scon incr)" = 1 ] || fail "source counter"
t0=$(date +%s.%N)
migrate --bandwidth 50 --max-time 120 --json >"$tmp/1.json" 2>"$tmp/1.err" ||
	fail "migrate --bandwidth 50: $(tail -2 "$tmp/1.err"; tail -3 "$tmp/$n.src.log")"
t1=$(date +%s.%N)
wait $sp || fail "the source exited non-zero"
summary "$tmp/1.json" 's["result"] == "migrated" and s["bytes"] > 200 * 2**20'
python3 - "$t0" "$t1" "$tmp/1.json" <<'PY' || fail "the time does not match the bandwidth"
import json, sys
took = float(sys.argv[2]) - float(sys.argv[1])
s = json.loads(open(sys.argv[3]).read().splitlines()[-1])
need = s["bytes"] / (50 * 2**20)
print("   %.1f MiB in %.2f s; at 50 MiB/s they need %.2f s" % (s["bytes"] / 2**20, took, need))
assert 0.8 * need <= took <= need + 20, (took, need)
# The progress objects: sent + left (the total the progress line shows)
# is about the 240 MiB written while the sync runs, and left shrinks.
sync = [json.loads(l)["status"] for l in open(sys.argv[3]).read().splitlines()[:-1]]
sync = [st for st in sync if st["state"] == "syncing"]
assert len(sync) >= 2, "fewer than 2 progress objects during the sync"
for st in sync:
    total = st["bytes_sent"] + st["left_bytes"]
    assert 200 * 2**20 <= total <= 320 * 2**20, ("total", total, st)
assert sync[-1]["left_bytes"] < sync[0]["left_bytes"], "left does not shrink"
print("   progress: sent+left %.0f..%.0f MiB, left %.0f -> %.0f MiB" % (
    min(st["bytes_sent"] + st["left_bytes"] for st in sync) / 2**20,
    max(st["bytes_sent"] + st["left_bytes"] for st in sync) / 2**20,
    sync[0]["left_bytes"] / 2**20, sync[-1]["left_bytes"] / 2**20))
PY
[ "$(count $dcon incr)" = 2 ] || fail "the destination does not go on from 1"
ok "1. --bandwidth 50: the migration takes as long as its bytes need at 50 MiB/s"
kill $dp; wait $dp 2>/dev/null

# 2. Post-copy of a guest dirtying faster than the link carries (its pages
# compress well: ~5 MB/s on the wire at 200 MiB/s of writes; the link: 1 MiB/s).
start_dest; start_run UNDERSTUDY_POSTCOPY_VERIFY=1 -- --guest dirty:mb=64,rate_mb=200,report_ms=100 --mem 256M
# Until the working set has been written once and the guest dirties on.
python3 - $scon <<'PY' || fail "the dirty guest does not write its working set"
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=60)
buf, end, seen = b"", time.time() + 60, None
while time.time() < end:
    buf += s.recv(65536)
    pages = [int(l.split()[1]) for l in buf.split(b"\n")[:-1] if l.startswith(b"pages ")]
    if pages and pages[-1] >= 64 * 256 and seen is None:
        seen = pages[-1]
    if seen is not None and pages[-1] >= seen + 64 * 256 // 4:
        sys.exit(0)
sys.exit(1)
PY
migrate --bandwidth 1 --postcopy-after 2 --no-auto-converge --max-time 120 --json >"$tmp/2.json" \
	2>"$tmp/2.err" || fail "post-copy migrate: $(tail -2 "$tmp/2.err"; tail -3 "$tmp/$n.src.log")"
wait $sp; rc=$?
[ $rc = 0 ] || fail "the source exited $rc after post-copy"
summary "$tmp/2.json" 's["result"] == "migrated" and s["postcopy"]'
grep -q "POST-COPY: [1-9][0-9]* pages" "$tmp/$n.src.log" || fail "no stale pages: $(grep POST-COPY "$tmp/$n.src.log")"
wait_log "$tmp/$n.dst.log" "post-copy verify" 20 || fail "no digest check: $(tail -3 "$tmp/$n.dst.log")"
grep -q "post-copy verify: the RAM at the switch equals" "$tmp/$n.dst.log" ||
	fail "$(grep 'post-copy verify' "$tmp/$n.dst.log")"
kill -0 $dp || fail "the destination ended after post-copy"
[ "$("$BIN" status --control "$tmp/$n.dst.ctl" | sed -n "s/^state //p")" = unprotected ] || fail "destination state: not an ordinary unprotected VM"
ok "2. post-copy after 2 rounds at 1 MiB/s: migrated, RAM at the switch equal ($(grep -o 'POST-COPY: [0-9]* pages' "$tmp/$n.src.log"))"
kill $dp; wait $dp 2>/dev/null

# 3. The counter conversation, every page fetched on demand.
pc_env=(UNDERSTUDY_POSTCOPY_VERIFY=1 UNDERSTUDY_POSTCOPY_STALE_ALL=1 UNDERSTUDY_POSTCOPY_BG_DELAY_MS=3000)
start_dest; start_run "${pc_env[@]}" -- --guest counter
[ "$(count $scon incr incr incr)" = 3 ] || fail "source counter"
migrate --downtime-ms 1 --postcopy-after 2 --no-auto-converge --bandwidth 5 --json >"$tmp/3.json" 2>"$tmp/3.err" &
mp=$!
wait_log "$tmp/$n.dst.log" "stale pages made missing" 30 || fail "no post-copy: $(tail -3 "$tmp/$n.dst.log")"
[ "$(count $dcon incr incr)" = 5 ] || fail "the destination does not go on from 3 during post-copy"
grep -q "POST-COPY COMPLETE" "$tmp/$n.dst.log" && fail "post-copy ended before the conversation (no faults tested)"
wait $mp || fail "migrate: $(tail -2 "$tmp/3.err")"
wait $sp || fail "the source exited non-zero"
summary "$tmp/3.json" 's["postcopy"] and s["postcopy_faults"] >= 10 and s["fault_p99_us"] > 0'
[ "$(count $dcon incr)" = 6 ] || fail "the destination does not go on after post-copy"
grep -q "post-copy verify: the RAM at the switch equals" "$tmp/$n.dst.log" || fail "digest: $(grep verify "$tmp/$n.dst.log")"
# The destination is an ordinary VM now: it can be protected again.
dctl=$tmp/$n.dst.ctl; odp=$dp
start_dest
out=$("$BIN" protect --control "$dctl" --peer 127.0.0.1:$dport --insecure --timeout-ms 2000) ||
	fail "protect after post-copy: $out"
[ "$("$BIN" status --control "$dctl" | sed -n "s/^state //p")" = protected ] || fail "not protected after post-copy"
ok "3. counter conversation across post-copy, $(grep -o '[0-9]* faults fetched (wait[^)]*)' "$tmp/$((n - 1)).dst.log"); protected again afterwards"
kill $odp $dp; wait $odp $dp 2>/dev/null

# 3b. The stress guest (2 vCPUs, LAPIC timer, AVX state), every page on demand.
start_dest; start_run "${pc_env[@]}" -- --guest stress --cpus 2
sleep 1
migrate --downtime-ms 1 --postcopy-after 2 --no-auto-converge --bandwidth 5 --json >"$tmp/3b.json" 2>"$tmp/3b.err" ||
	fail "stress migrate: $(tail -2 "$tmp/3b.err")"
wait $sp || fail "the source exited non-zero"
summary "$tmp/3b.json" 's["postcopy"] and s["postcopy_faults"] >= 1'
out=$(python3 - $dcon <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
s.sendall(b"check\n")
buf, end = b"", time.time() + 20
while time.time() < end and b"\n" not in buf.split(b"check", 1)[-1]:
    d = s.recv(4096)
    if not d:
        break
    buf += d
print(buf.decode(errors="replace").strip().splitlines()[-1] if buf else "")
PY
)
echo "$out" | grep -q "^ok" || fail "stress self-check on the destination: $out"
grep -q "post-copy verify: the RAM at the switch equals" "$tmp/$n.dst.log" || fail "digest: $(grep verify "$tmp/$n.dst.log")"
ok "3b. stress guest (2 vCPUs) across post-copy: self-check '$out'"
kill $dp; wait $dp 2>/dev/null

# 4. The source dies during post-copy.
pc_env=(UNDERSTUDY_POSTCOPY_STALE_ALL=1 UNDERSTUDY_POSTCOPY_BG_DELAY_MS=30000)
start_dest; start_run "${pc_env[@]}" -- --guest counter
[ "$(count $scon incr incr)" = 2 ] || fail "source counter"
migrate --downtime-ms 1 --postcopy-after 2 --no-auto-converge --bandwidth 5 >/dev/null 2>"$tmp/4.err" &
mp=$!
wait_log "$tmp/$n.dst.log" "stale pages made missing" 30 || fail "no post-copy: $(tail -3 "$tmp/$n.dst.log")"
[ "$(count $dcon incr)" = 3 ] || fail "the destination does not run during post-copy"
kill -9 $sp; wait $sp 2>/dev/null
for _ in $(seq 1 200); do kill -0 $dp 2>/dev/null || break; sleep 0.05; done
kill -0 $dp 2>/dev/null && fail "the destination runs on without its source"
wait $dp; rc=$?
[ $rc != 0 ] || fail "the destination exited 0 after losing its source"
grep -q "THE VM IS LOST" "$tmp/$n.dst.log" || fail "no report: $(tail -3 "$tmp/$n.dst.log")"
wait $mp && fail "migrate exit 0 with its source killed"
ok "4. source killed during post-copy: the destination reports the VM lost and exits $rc"

# 5. The destination dies during post-copy.
start_dest; start_run "${pc_env[@]}" -- --guest counter
[ "$(count $scon incr)" = 1 ] || fail "source counter"
migrate --downtime-ms 1 --postcopy-after 2 --no-auto-converge --bandwidth 5 >/dev/null 2>"$tmp/5.err" &
mp=$!
wait_log "$tmp/$n.src.log" "the destination runs the guest" 30 || fail "no post-copy: $(tail -3 "$tmp/$n.src.log")"
kill -9 $dp; wait $dp 2>/dev/null
for _ in $(seq 1 200); do kill -0 $sp 2>/dev/null || break; sleep 0.05; done
kill -0 $sp 2>/dev/null && fail "the source still runs without its destination"
wait $sp; rc=$?
[ $rc != 0 ] || fail "the source exited 0 after losing its destination"
grep -q "THE VM IS LOST" "$tmp/$n.src.log" || fail "no report: $(tail -3 "$tmp/$n.src.log")"
wait $mp && fail "migrate exit 0 with its destination killed"
grep -qi "VM is lost\|VM lost" "$tmp/5.err" || fail "migrate does not say the VM is lost: $(cat "$tmp/5.err")"
ok "5. destination killed during post-copy: the source reports the VM lost and exits $rc"
