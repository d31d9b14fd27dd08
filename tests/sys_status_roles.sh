#!/usr/bin/env bash
# What `understudy status` shows in each role: only what applies to it and
# to what happened to the VM, and --json keeps every field. Checks:
#  1. `run` (unprotected, no engine): role, state, the guest, memory,
#     vCPUs, uptime and devices; its JSON has the VM's fields;
#  2. a fresh protected pair: the primary shows the VM's lines (and counts
#     the pages its harvests re-protected, and its epochs by what started
#     them: the timer or waiting output) and no
#     "resumed from", migration, switchover or throttle line; the standby
#     shows its heartbeat and that the guest does not run on its host; the
#     JSON of both has every documented field (docs/design.md);
#  3. the primary killed -9: the survivor says "took over at epoch N, TIME,
#     after X ms of silence", shows the VM's lines, and no "since
#     heartbeat", apply or "reason" line; its JSON keeps every field, with
#     took_over true and the same epoch.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
test_tmp
# The pair's silence bounds: 500 ms on a host's KVM, 3 s in the nested VM
# (tests/lib.sh nested), where QEMU's emulator stalls an agent for a second
# or more; waits X times longer there.
T=$(nested 500 3000)
X=$(nested 1 4)

# status_until CTL PATTERN: the text status once it has a line PATTERN
status_until() {
	for _ in $(seq 1 $((200 * X))); do
		"$BIN" status --control "$1" >"$tmp/st" 2>/dev/null && grep -q "$2" "$tmp/st" && return 0
		sleep 0.05
	done
	fail "status of $1 never had '$2': $(cat "$tmp/st" 2>/dev/null)"
}
# has FILE LINE... / lacks FILE WORD...: lines that start so, words anywhere
has() {
	local f=$1 l
	shift
	for l in "$@"; do grep -q "^$l" "$f" || fail "no line '$l' in: $(cat "$f")"; done
}
lacks() {
	local f=$1 w
	shift
	for w in "$@"; do grep -qi -- "$w" "$f" && fail "'$w' shown: $(cat "$f")"; done
	return 0
}
# json_fields CTL ROLE OUTFILE: status --json has every field of ROLE
json_fields() {
	"$BIN" status --control "$1" --json >"$3" || fail "status --json of $1"
	python3 - "$3" "$2" <<'PY' || fail "status --json of $1 ($2): $(cat "$3")"
import json, sys
st = json.loads(open(sys.argv[1]).read())
vm = ["guest", "mem_bytes", "vcpus", "uptime_s", "running_since", "devices", "took_over",
      "took_over_epoch", "took_over_at", "took_over_silence_ms"]
# what both engines show; a VM with none (run) shows them too, as none
core = ["peer", "epoch", "acked", "dirty_pages_last", "since_heartbeat_ms", "reason", "fencing"]
want = {
    "run": ["role", "state", "name"] + vm + core,
    "primary": ["role", "state", "name"] + vm + [
        "peer", "epoch", "acked", "pause_p50_us", "pause_p99_us", "dirty_pages_last",
        "dirty_pages_avg", "bytes_sent", "lag_ms", "stretched", "since_heartbeat_ms", "pause_max_us",
        "pause_max_pages", "pause_max_harvest_us", "pause_max_copy_us", "pause_max_state_us",
        "reason", "fencing", "migration_downtime_ms", "migration_total_ms", "throttle_pct",
        "resumed_epoch", "switch_in_ms", "precopy_passes", "precopy_pages", "precopy_resent",
        "left_bytes", "predicted_downtime_ms", "hot_pages", "hot_budget", "reprotected_pages",
        "epochs_timer", "epochs_output"],
    "secondary": ["role", "state", "name"] + vm + [
        "peer", "epoch", "acked", "apply_p50_us", "apply_p99_us", "dirty_pages_last",
        "bytes_received", "since_heartbeat_ms", "verify_ok", "verify_failed", "reason", "fencing",
        "switchovers", "switch_epoch", "switch_downtime_ms"],
}[sys.argv[2]]
missing = [k for k in want if k not in st]
assert not missing, "missing %s" % missing
assert st["guest"] == "counter" and st["mem_bytes"] == 32 << 20 and st["vcpus"] == 2, st
assert st["devices"] == ["serial"], st["devices"]
PY
}

# ---- 1. run ------------------------------------------------------------------------
rcon=$(free_port)
"$BIN" run --guest counter --mem 32M --cpus 2 --console tcp:127.0.0.1:$rcon \
	--control "$tmp/run.ctl" 2>"$tmp/run.log" &
rp=$!
status_until "$tmp/run.ctl" "^state unprotected"
cp "$tmp/st" "$tmp/run.txt"
has "$tmp/run.txt" "role primary" "state unprotected" "guest counter" "memory 32 MiB" "vCPUs 2" \
	"uptime [0-9.]* s on this host (since 20" "devices serial console" "fencing: none"
lacks "$tmp/run.txt" "resumed from" "migration" "switchover" "took over"
json_fields "$tmp/run.ctl" run "$tmp/run.json"
python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["uptime_s"] > 0 and s["running_since"].endswith("Z") and not s["took_over"] and s["epoch"] == 0 and s["peer"] == "" and s["since_heartbeat_ms"] == -1 and s["fencing"].startswith("none"), s' \
	"$tmp/run.json" || fail "run JSON: $(cat "$tmp/run.json")"
ok "1. run: $(grep -c . "$tmp/run.txt") lines: $(grep -E '^(guest|memory|vCPUs|uptime|devices)' "$tmp/run.txt" | tr '\n' ';')"
kill -9 $rp; wait $rp 2>/dev/null

# ---- 2. a fresh protected pair -------------------------------------------------------
sport=$(free_port); scon=$(free_port); pcon=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
	--failover-timeout-ms $T --control "$tmp/sec.ctl" 2>"$tmp/sec.log" &
wait_port $sport $((20 * X)) || fail "secondary did not listen"
"$BIN" primary --guest counter --mem 32M --cpus 2 --console tcp:127.0.0.1:$pcon \
	--peer 127.0.0.1:$sport --insecure --timeout-ms $T --control "$tmp/pri.ctl" 2>"$tmp/pri.log" &
pp=$!
wait_log "$tmp/pri.log" "protected: secondary holds" $((30 * X)) || fail "never protected"
out=$(python3 tests/counter_client.py $pcon incr incr incr) || fail "client of the primary"
status_until "$tmp/pri.ctl" "^state protected"
cp "$tmp/st" "$tmp/pri.txt"
has "$tmp/pri.txt" "role primary" "state protected" "guest counter" "memory 32 MiB" "vCPUs 2" \
	"uptime [0-9.]* s on this host" "devices serial console" "epoch [0-9]" "since heartbeat" \
	"reason none" "epochs by trigger: timer [0-9]*, output [0-9]*$"
lacks "$tmp/pri.txt" "resumed from" "migration" "switchover" "throttle" "left to send" \
	"predicted downtime" "took over"
json_fields "$tmp/pri.ctl" primary "$tmp/pri.json"
# The guest wrote pages (boot, three incr): some harvest re-protected them.
python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["reprotected_pages"] > 0 and s["hot_pages"] <= s["hot_budget"], s' \
	"$tmp/pri.json" || fail "primary: no re-protected page counted, or more hot pages than the budget: $(cat "$tmp/pri.json")"
# Every epoch but the first after the sync was started by the timer or by
# output waiting; the three replies started some.
python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["epochs_output"] > 0 and s["epochs_timer"] + s["epochs_output"] + 1 == s["epoch"], s' \
	"$tmp/pri.json" || fail "primary: epochs by trigger do not add up, or no output epoch: $(cat "$tmp/pri.json")"
status_until "$tmp/sec.ctl" "^state standby"
cp "$tmp/st" "$tmp/sec.txt"
has "$tmp/sec.txt" "role secondary" "guest counter" "memory 32 MiB" "vCPUs 2" \
	"uptime none: the guest does not run on this host" "since heartbeat" "apply p50"
lacks "$tmp/sec.txt" "switchovers" "took over"
json_fields "$tmp/sec.ctl" secondary "$tmp/sec.json"
ok "2. fresh pair: the primary has no resumed/migration/switchover/throttle line, the standby no switchover line; JSON complete on both"

# ---- 3. the survivor -------------------------------------------------------------------
kill -9 $pp; wait $pp 2>/dev/null
wait_log "$tmp/sec.log" "TOOK OVER" $((20 * X)) || fail "no takeover: $(tail -3 "$tmp/sec.log")"
status_until "$tmp/sec.ctl" "^state unprotected"
cp "$tmp/st" "$tmp/surv.txt"
has "$tmp/surv.txt" "role primary" "state unprotected" "guest counter" "memory 32 MiB" "vCPUs 2" \
	"uptime [0-9.]* s on this host" "devices serial console" \
	"took over at epoch [1-9][0-9]*, 20[0-9-]* [0-9:]* UTC, after [0-9]* ms of silence$" "fencing:"
lacks "$tmp/surv.txt" "since heartbeat" "apply p" "^reason" "peer lost" "bytes received"
epoch=$(sed -n 's/^took over at epoch \([0-9]*\),.*/\1/p' "$tmp/surv.txt")
grep -q "guest resumed from epoch $epoch " "$tmp/sec.log" || fail "took over at $epoch, the log says: $(grep -o 'guest resumed from epoch [0-9]*' "$tmp/sec.log")"
json_fields "$tmp/sec.ctl" secondary "$tmp/surv.json"
python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["took_over"] and s["took_over_epoch"] == int(sys.argv[2]) and s["took_over_at"].endswith("Z") and s["took_over_silence_ms"] > 0 and s["role"] == "primary", s' \
	"$tmp/surv.json" "$epoch" || fail "survivor JSON: $(cat "$tmp/surv.json")"
ok "3. survivor: '$(grep '^took over' "$tmp/surv.txt")', no heartbeat, apply or reason line; JSON complete, took_over_epoch $epoch"
echo "PASS: sys_status_roles"
