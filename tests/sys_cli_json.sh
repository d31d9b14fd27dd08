#!/usr/bin/env bash
# The command line reads an agent's `status json` as JSON, not as text to
# search: protect, migrate, switchover and takeover against a stand-in
# agent (tests/fake_agent.py, a real control socket; no VM, no KVM) whose
# status holds reasons with quotes, backslashes and newlines, escaped as
# any JSON encoder does.
#   1. migrate: a reason that quotes "disk_blocks" is no disk; --json prints
#      one valid object a line, the status inside as the agent gave it, and
#      the summary; a migration that fails names the reason whole (read up
#      to the first quote, it was cut at its first escaped quote);
#   2. protect: a VM that ends unprotected is named with its reason, exit 1
#      (the text status was searched for a "state" line before);
#   3. takeover: contending, then the key won: exit 0;
#   4. switchover: the standby's switch epoch and downtime read as fields;
#      --json prints the standby's status, valid JSON.
#   5. a reply that is not what the command needs is named, at once, with
#      exit 1: a status without "state" (protect, takeover), a standby's
#      status without "switch_epoch" (switchover said "ok switched over at
#      epoch 0" before), a migrating source's "epoch" as a string, a drill
#      status that is no JSON (drill waited 200 s more); an answer that is
#      never JSON is named when protect gives up.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT

# agent NAME SCRIPT_JSON: a stand-in agent at $tmp/NAME.ctl
agent() {
	printf '%s\n' "$2" >"$tmp/$1.json"
	python3 tests/fake_agent.py "$tmp/$1.ctl" "$tmp/$1.json" "$tmp/$1.requests" &
	pids+=($!)
	for _ in $(seq 100); do [ -S "$tmp/$1.ctl" ] && return 0; sleep 0.05; done
	fail "the stand-in agent $1 did not start"
}
# each_line_json FILE: every line of FILE is one JSON object
each_line_json() {
	python3 - "$1" <<'PY' || fail "not one JSON object a line: $(cat "$1")"
import json, sys
for line in open(sys.argv[1]):
    assert isinstance(json.loads(line), dict), line
PY
}

NASTY='peer lost: it said \"no\" about \"disk_blocks\" at C:\\vm\nstate protected'
# The figures a migrating source's status always has (replication/status.c).
FIGS='"migration_downtime_ms": 0.0, "migration_total_ms": 0.0, "throttle_pct": 0,
 "predicted_downtime_ms": 0.0, "pause_p50_us": 0.0, "lag_ms": 0.0, "dirty_pages_last": 0,
 "left_bytes": 0'

# 1. migrate
agent mig "{
 \"status json\": [
  {\"role\": \"primary\", \"state\": \"protected\", \"peer\": \"127.0.0.1:7999\", \"epoch\": 3,
   \"bytes_sent\": 4096, \"reason\": \"$NASTY\", $FIGS},
  {\"role\": \"primary\", \"state\": \"protected\", \"peer\": \"127.0.0.1:7999\", \"epoch\": 4,
   \"bytes_sent\": 8192, \"reason\": \"$NASTY\", $FIGS},
  {\"role\": \"primary\", \"state\": \"migrated\", \"peer\": \"127.0.0.1:7999\", \"epoch\": 5,
   \"bytes_sent\": 12288, \"migration_downtime_ms\": 2.5, \"migration_total_ms\": 900.0,
   \"throttle_pct\": 0, \"predicted_downtime_ms\": 0.0, \"pause_p50_us\": 0.0, \"lag_ms\": 0.0,
   \"dirty_pages_last\": 0, \"left_bytes\": 0, \"reason\": \"\"}],
 \"migrate\": [\"ok migrating to 127.0.0.1:7999\n\"]}"
timeout 60 "$BIN" migrate --control "$tmp/mig.ctl" --to 127.0.0.1:7999 --insecure --json \
	>"$tmp/mig.out" 2>"$tmp/mig.err"
rc=$?
[ $rc = 0 ] || fail "1. migrate: exit $rc, expected 0: $(cat "$tmp/mig.err")"
grep -q '^migrate 127.0.0.1:7999 ' "$tmp/mig.requests" || fail "1. no migrate request: $(cat "$tmp/mig.requests")"
each_line_json "$tmp/mig.out"
python3 - "$tmp/mig.out" <<'PY' || fail "1. migrate --json: $(cat "$tmp/mig.out")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
st = lines[0]["status"]
assert st["reason"] == 'peer lost: it said "no" about "disk_blocks" at C:\\vm\nstate protected', st
s = lines[-1]
assert s["summary"] is True and s["result"] == "migrated", s
assert s["bytes"] == 12288 and s["epochs"] == 5 and s["downtime_ms"] == 2.5, s
assert s["total_s"] == 0.9 and s["postcopy"] is False, s
PY
ok "1. migrate: a reason quoting \"disk_blocks\" is no disk; $(wc -l <"$tmp/mig.out") JSON lines, the reason intact"

agent mgf "{
 \"status json\": [
  {\"role\": \"primary\", \"state\": \"protected\", \"peer\": \"127.0.0.1:7999\", \"reason\": \"\",
   \"epoch\": 3, \"bytes_sent\": 4096, $FIGS},
  {\"role\": \"primary\", \"state\": \"unprotected\", \"peer\": \"127.0.0.1:7999\",
   \"reason\": \"$NASTY\"}],
 \"migrate\": [\"ok migrating to 127.0.0.1:7999\n\"]}"
timeout 60 "$BIN" migrate --control "$tmp/mgf.ctl" --to 127.0.0.1:7999 --insecure \
	>"$tmp/mgf.out" 2>"$tmp/mgf.err"
rc=$?
[ $rc = 1 ] || fail "1. a failed migration: exit $rc, expected 1: $(cat "$tmp/mgf.err")"
grep -q 'failed: the source is unprotected (peer lost: it said "no" about "disk_blocks" at C:\\vm' \
	"$tmp/mgf.err" || fail "1. a failed migration: the reason is not whole: $(tail -2 "$tmp/mgf.err")"
ok "1. a failed migration names its reason whole"

# 2. protect
agent pro "{
 \"status json\": [
  {\"role\": \"primary\", \"state\": \"syncing\", \"reason\": \"\"},
  {\"role\": \"primary\", \"state\": \"unprotected\", \"reason\": \"$NASTY\"}],
 \"protect\": [\"ok attaching\n\"]}"
timeout 60 "$BIN" protect --control "$tmp/pro.ctl" --peer 127.0.0.1:7999 --insecure \
	>"$tmp/pro.out" 2>"$tmp/pro.err"
rc=$?
[ $rc = 1 ] || fail "2. protect: exit $rc, expected 1: $(cat "$tmp/pro.out" "$tmp/pro.err")"
grep -q 'not protected: the VM is unprotected (peer lost: it said "no"' "$tmp/pro.err" ||
	fail "2. protect: the reason is not named: $(cat "$tmp/pro.err")"
ok "2. protect: $(head -1 "$tmp/pro.err" | cut -c1-100)"

# 3. takeover
agent tko '{
 "status json": [
  {"role": "secondary", "state": "contending", "reason": ""},
  {"role": "primary", "state": "unprotected", "reason": ""}],
 "takeover": ["ok contending for the witness key at epoch 3\n"]}'
timeout 60 "$BIN" takeover --control "$tmp/tko.ctl" >"$tmp/tko.out" 2>&1
rc=$?
[ $rc = 0 ] || fail "3. takeover: exit $rc, expected 0: $(cat "$tmp/tko.out")"
grep -q 'ok took over: won the witness key' "$tmp/tko.out" || fail "3. takeover: $(cat "$tmp/tko.out")"
ok "3. takeover: contending, then won the key"

# 4. switchover
agent swo "{
 \"status json\": [
  {\"role\": \"secondary\", \"state\": \"standby\", \"epoch\": 40, \"switch_epoch\": 40,
   \"switch_downtime_ms\": 1.25, \"reason\": \"$NASTY\"},
  {\"role\": \"secondary\", \"state\": \"standby\", \"epoch\": 41, \"switch_epoch\": 40,
   \"switch_downtime_ms\": 1.25, \"reason\": \"$NASTY\"}],
 \"switchover\": [\"ok switching over: standby at 127.0.0.1:7999\n\"]}"
timeout 60 "$BIN" switchover --control "$tmp/swo.ctl" --listen 127.0.0.1:7999 >"$tmp/swo.out" 2>&1
rc=$?
[ $rc = 0 ] || fail "4. switchover: exit $rc, expected 0: $(cat "$tmp/swo.out")"
grep -q 'ok switched over at epoch 40: downtime 1.250 ms' "$tmp/swo.out" ||
	fail "4. switchover: $(cat "$tmp/swo.out")"
timeout 60 "$BIN" switchover --control "$tmp/swo.ctl" --listen 127.0.0.1:7999 --json \
	>"$tmp/swo.json" 2>"$tmp/swo.err" || fail "4. switchover --json: $(cat "$tmp/swo.err")"
each_line_json "$tmp/swo.json"
ok "4. switchover: $(cut -c1-80 "$tmp/swo.out")"

# 5. bad replies: run_bad NAME WANT_IN_STDERR COMMAND...: exit 1 within 10 s,
# stderr naming what is wrong
run_bad() {
	local name=$1 want=$2 t0 rc
	shift 2
	t0=$(date +%s)
	timeout 60 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
	rc=$?
	[ $rc = 1 ] || fail "5. $name: exit $rc, expected 1: $(cat "$tmp/$name.out" "$tmp/$name.err")"
	grep -qF -- "$want" "$tmp/$name.err" ||
		fail "5. $name: '$want' not said: $(cat "$tmp/$name.err")"
	[ $(($(date +%s) - t0)) -le 10 ] || fail "5. $name: $(($(date +%s) - t0)) s to say it"
	ok "5. $name: $(grep -F -- "$want" "$tmp/$name.err" | head -1 | cut -c1-110)"
}
agent nostate '{"status json": [{"role": "primary", "reason": ""}],
 "protect": ["ok attaching\n"], "takeover": ["ok contending for the witness key\n"]}'
run_bad protect-nostate 'a bad status: no field "state"' \
	"$BIN" protect --control "$tmp/nostate.ctl" --peer 127.0.0.1:7999 --insecure
run_bad takeover-nostate 'a bad status: no field "state"' \
	"$BIN" takeover --control "$tmp/nostate.ctl"
agent noswitch '{"status json": [{"role": "secondary", "state": "standby", "epoch": 41,
  "reason": ""}],
 "switchover": ["ok switching over: standby at 127.0.0.1:7999\n"]}'
run_bad switchover-noepoch 'says nothing of the switch: no field "switch_epoch"' \
	"$BIN" switchover --control "$tmp/noswitch.ctl" --listen 127.0.0.1:7999
agent strepoch "{\"status json\": [{\"role\": \"primary\", \"state\": \"protected\",
  \"peer\": \"127.0.0.1:7999\", \"epoch\": \"3\", \"bytes_sent\": 4096, \"reason\": \"\", $FIGS}],
 \"migrate\": [\"ok migrating to 127.0.0.1:7999\n\"]}"
run_bad migrate-strepoch 'a bad status: "epoch" is a JSON string, not a number' \
	"$BIN" migrate --control "$tmp/strepoch.ctl" --to 127.0.0.1:7999 --insecure
agent drill '{"drill test-failover": ["ok drill started\n"],
 "drill status": ["error unknown request\n"]}'
run_bad drill-notjson "a bad drill status: not a JSON object (unexpected character): 'error unknown request?'" \
	"$BIN" drill test-failover --control "$tmp/drill.ctl" --seconds 1
agent never '{"status json": ["error not up yet\n"], "protect": ["ok attaching\n"]}'
run_bad protect-notjson "not protected within 2040 ms; the last status answer was not a JSON object (unexpected character): 'error not up yet?'" \
	"$BIN" protect --control "$tmp/never.ctl" --peer 127.0.0.1:7999 --insecure \
	--handshake-timeout-ms 10
echo "PASS"
