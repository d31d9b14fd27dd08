#!/usr/bin/env bash
# --metrics HOST:PORT: Prometheus metrics of the agents.
#   1. bad --metrics values are refused (exit 2); a port already taken: exit 1;
#   2. a protected pair: both answer GET /metrics, `promtool check metrics`
#      is clean, role and state say primary/protected and secondary/standby,
#      the counters move between two scrapes (epochs_total, pause and commit
#      histograms, page bytes sent and received), the epochs by trigger
#      (timer, output) and the hot set's counts are there and add up, other
#      paths get 404;
#   3. kill -9 of the primary: the secondary says takeovers_total 1, role
#      primary, state active, and still passes promtool;
#   4. `run --metrics`: a VM without protection says primary/unprotected;
#      after `understudy protect`, protected (the attached engine's metrics).
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
command -v curl >/dev/null || { echo "SKIP: curl not installed (make deps)"; exit 77; }
command -v promtool >/dev/null || { echo "SKIP: promtool not installed (prometheus, make deps)"; exit 77; }
test_tmp
# The agents' silence bounds: 400 ms on a host's KVM, 3 s in the nested VM
# (tests/lib.sh nested), where QEMU's emulator stalls an agent for a second
# or more and a short bound gives up a live peer; waits X times longer there.
T=$(nested 400 3000)
X=$(nested 1 4)

scrape() { curl -s -m 5 -o "$2" -w '%{http_code}' "http://127.0.0.1:$1/metrics"; }
# value FILE NAME{LABELS}: the sample's value ("" if absent)
# FILE KEY: the sample's value, KEY without the label vm="..." every sample has
value() { sed -E 's/,vm="[^"]*"\}/}/; s/\{vm="[^"]*"\}//' "$1" | awk -v k="$2" '$1 == k { print $2 }'; }
check_prom() {   # FILE WHAT
	promtool check metrics <"$1" >"$1.lint" 2>&1 || fail "promtool on $2: $(head -5 "$1.lint")"
}
gt() { python3 -c "import sys; sys.exit(0 if float('$1') > float('$2') else 1)"; }

# 1. bad values
"$BIN" primary --guest counter --peer 127.0.0.1:1 --insecure --metrics nonsense 2>"$tmp/bad.log"
[ $? = 2 ] || fail "--metrics nonsense accepted"
"$BIN" secondary --listen 127.0.0.1:1 --console tcp:127.0.0.1:2 --insecure \
	--on-event-timeout-ms 100 2>"$tmp/bad2.log"
[ $? = 2 ] && grep -q "needs --on-event" "$tmp/bad2.log" || fail "--on-event-timeout-ms alone accepted"
taken=$(free_port)
python3 -c "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',$taken)); s.listen(); time.sleep(60)" &
holder=$!
wait_port $taken || fail "port holder"
timeout 20 "$BIN" secondary --listen 127.0.0.1:$(free_port) --console tcp:127.0.0.1:$(free_port) \
	--insecure --metrics 127.0.0.1:$taken 2>"$tmp/taken.log"
rc=$?
[ $rc = 1 ] || fail "--metrics on a taken port: exit $rc, want 1: $(tail -2 "$tmp/taken.log")"
grep -q "cannot serve metrics" "$tmp/taken.log" || fail "no reason logged: $(tail -2 "$tmp/taken.log")"
kill $holder; wait $holder 2>/dev/null
ok "1. bad --metrics refused (exit 2); a taken port: exit 1, '$(grep -o 'cannot serve metrics.*' "$tmp/taken.log")'"

# 2. a protected pair
sport=$(free_port); scon=$(free_port); smet=$(free_port); pcon=$(free_port); pmet=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
	--failover-timeout-ms $T --metrics 127.0.0.1:$smet 2>"$tmp/sec.log" &
sp=$!
wait_port $sport $((20 * X)) || fail "secondary did not listen"
"$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon --peer 127.0.0.1:$sport --insecure \
	--timeout-ms $T --metrics 127.0.0.1:$pmet 2>"$tmp/pri.log" &
pp=$!
wait_log "$tmp/pri.log" "protected: secondary holds" $((30 * X)) || fail "never protected"
python3 tests/counter_client.py $pcon incr incr >/dev/null || fail "client of the primary"
[ "$(scrape $pmet "$tmp/p1")" = 200 ] || fail "primary /metrics: no 200"
[ "$(scrape $smet "$tmp/s1")" = 200 ] || fail "secondary /metrics: no 200"
sleep 1.5
python3 tests/counter_client.py $pcon incr >/dev/null || fail "client of the primary"
[ "$(scrape $pmet "$tmp/p2")" = 200 ] || fail "primary /metrics: no 200"
[ "$(scrape $smet "$tmp/s2")" = 200 ] || fail "secondary /metrics: no 200"
for f in p1 p2 s1 s2; do check_prom "$tmp/$f" "$f"; done
# every sample of the primary is labelled with its VM's name (its guest's here)
! grep -v '^#' "$tmp/p2" | grep -qv 'vm="counter"} ' ||
	fail "a sample without vm=\"counter\": $(grep -v '^#' "$tmp/p2" | grep -v 'vm="counter"} ' | head -3)"
[ "$(value "$tmp/p2" 'understudy_role{role="primary"}')" = 1 ] || fail "primary role: $(grep '^understudy_role' "$tmp/p2")"
[ "$(value "$tmp/p2" 'understudy_state{state="protected"}')" = 1 ] || fail "primary state: $(grep '^understudy_state' "$tmp/p2")"
[ "$(value "$tmp/s2" 'understudy_role{role="secondary"}')" = 1 ] || fail "secondary role: $(grep '^understudy_role' "$tmp/s2")"
[ "$(value "$tmp/s2" 'understudy_state{state="standby"}')" = 1 ] || fail "secondary state: $(grep '^understudy_state' "$tmp/s2")"
for m in understudy_epochs_total understudy_pause_seconds_count understudy_output_commit_seconds_count \
	understudy_sent_bytes_total understudy_acked_epoch; do
	a=$(value "$tmp/p1" $m); b=$(value "$tmp/p2" $m)
	[ -n "$a" ] && [ -n "$b" ] && gt "$b" "$a" || fail "primary $m did not grow: $a -> $b"
done
for m in understudy_epochs_total understudy_apply_seconds_count understudy_received_bytes_total; do
	a=$(value "$tmp/s1" $m); b=$(value "$tmp/s2" $m)
	[ -n "$a" ] && [ -n "$b" ] && gt "$b" "$a" || fail "secondary $m did not grow: $a -> $b"
done
sent=0; rcvd=0
for e in zero raw lz4 xor; do
	sent=$((sent + $(value "$tmp/p2" "understudy_sent_page_bytes_total{encoding=\"$e\"}")))
	rcvd=$((rcvd + $(value "$tmp/s2" "understudy_received_page_bytes_total{encoding=\"$e\"}")))
done
[ $sent -gt 0 ] && [ $rcvd -gt 0 ] || fail "page bytes by encoding: sent $sent, received $rcvd"
gt "$(value "$tmp/p2" understudy_compression_ratio)" 0 || fail "compression ratio 0"
[ -n "$(value "$tmp/p2" understudy_heartbeat_age_seconds)" ] || fail "no heartbeat age"
[ "$(value "$tmp/p2" understudy_takeovers_total)" = 0 ] || fail "takeovers before any"
[ "$(value "$tmp/p2" 'understudy_drills_total{result="pass"}')" = 0 ] || fail "drills"
# The engine's counts: what started each epoch, the pages the harvests
# re-protected, the hot set. Declared with their type on both agents, the
# standby's at 0; on the primary the timer's epochs grow over 1.5 s, an
# incr's reply starts an output epoch, every epoch but the first after the
# sync has one of the two triggers, the boot's writes were re-protected.
for f in p2 s2; do
	for fam in "understudy_epochs_started_total counter" "understudy_reprotected_pages_total counter" \
		"understudy_hot_pages gauge" "understudy_hot_budget_pages gauge"; do
		grep -qx "# TYPE $fam" "$tmp/$f" || fail "$f: no '# TYPE $fam': $(grep "${fam% *}" "$tmp/$f")"
		grep -q "^# HELP ${fam% *} [A-Z]" "$tmp/$f" || fail "$f: no help for ${fam% *}"
	done
done
et='understudy_epochs_started_total{trigger="timer"}'; eo='understudy_epochs_started_total{trigger="output"}'
for k in "$et" "$eo" understudy_reprotected_pages_total understudy_hot_pages understudy_hot_budget_pages; do
	[ "$(value "$tmp/s2" "$k")" = 0 ] || fail "secondary $k: '$(value "$tmp/s2" "$k")', want 0"
done
t1=$(value "$tmp/p1" "$et"); t2=$(value "$tmp/p2" "$et"); o1=$(value "$tmp/p1" "$eo"); o2=$(value "$tmp/p2" "$eo")
[ -n "$t1" ] && [ -n "$t2" ] && gt "$t2" "$t1" || fail "timer epochs did not grow over 1.5 s: $t1 -> $t2"
[ -n "$o1" ] && [ -n "$o2" ] && gt "$o2" "$o1" || fail "output epochs did not grow with an incr's reply: $o1 -> $o2"
for f in p1 p2; do
	e=$(value "$tmp/$f" understudy_epoch); t=$(value "$tmp/$f" "$et"); o=$(value "$tmp/$f" "$eo")
	[ "$e" = $((t + o + 1)) ] || fail "$f: epoch $e != timer $t + output $o + the first after the sync"
done
gt "$(value "$tmp/p2" understudy_reprotected_pages_total)" 0 || fail "no page re-protected"
[ "$(value "$tmp/p2" understudy_hot_pages)" -le "$(value "$tmp/p2" understudy_hot_budget_pages)" ] ||
	fail "more hot pages than the budget: $(grep '^understudy_hot' "$tmp/p2")"
code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$pmet/other")
[ "$code" = 404 ] || fail "/other: $code, want 404"
ok "2. protected pair: promtool clean on 4 scrapes; epochs_total $(value "$tmp/p1" understudy_epochs_total) -> $(value "$tmp/p2" understudy_epochs_total) (primary), $(value "$tmp/s1" understudy_epochs_total) -> $(value "$tmp/s2" understudy_epochs_total) (secondary); page bytes sent $sent, received $rcvd; /other 404"
ok "   epochs started by the timer $t1 -> $t2, by output $o1 -> $o2; re-protected pages $(value "$tmp/p2" understudy_reprotected_pages_total), hot $(value "$tmp/p2" understudy_hot_pages)/$(value "$tmp/p2" understudy_hot_budget_pages); the standby's 0"

# 3. failover
kill -9 $pp; wait $pp 2>/dev/null
wait_log "$tmp/sec.log" "TOOK OVER" $((30 * X)) || fail "no takeover"
[ "$(scrape $smet "$tmp/s3")" = 200 ] || fail "secondary /metrics after takeover: no 200"
check_prom "$tmp/s3" "s3"
[ "$(value "$tmp/s3" understudy_takeovers_total)" = 1 ] || fail "takeovers_total: $(grep '^understudy_takeovers_total' "$tmp/s3")"
[ "$(value "$tmp/s3" 'understudy_role{role="primary"}')" = 1 ] || fail "role after takeover: $(grep '^understudy_role' "$tmp/s3")"
[ "$(value "$tmp/s3" 'understudy_state{state="active"}')" = 1 ] || fail "state after takeover: $(grep '^understudy_state' "$tmp/s3")"
[ "$(value "$tmp/s3" 'understudy_events_total{event="unprotected"}')" = 1 ] || fail "unprotected not counted"
ok "3. after kill -9 of the primary: takeovers_total 1, role primary, state active, promtool clean"
kill $sp; wait $sp 2>/dev/null

# The dashboard: valid JSON, and every metric its queries use is exported.
python3 - contrib/grafana/understudy.json "$tmp/p2" "$tmp/s3" <<'PY' || fail "contrib/grafana/understudy.json"
import json, re, sys
d = json.load(open(sys.argv[1]))
have = set()
for f in sys.argv[2:]:
    for line in open(f):
        if line.startswith("# TYPE "):
            have.add(line.split()[2])
exprs = [t["expr"] for p in d["panels"] for t in p["targets"]]
exprs += [a["expr"] for a in d.get("annotations", {}).get("list", []) if "expr" in a]
used = {re.sub(r"_(bucket|sum|count)$", "", m) for e in exprs for m in re.findall(r"understudy_\w+", e)}
missing = sorted(used - have)
if missing:
    sys.exit("the dashboard uses metrics nobody exports: %s" % missing)
titles = " ".join(p["title"] for p in d["panels"])
for w in ("Pause", "commit", "Lag", "Epochs", "encoding", "Role", "State", "Takeovers"):
    if w not in titles:
        sys.exit("no panel for %s" % w)
if not any("histogram_quantile(0.99" in e for e in exprs):
    sys.exit("no p99 from a histogram")
print("%d panels, %d metrics used, all exported" % (len(d["panels"]), len(used)))
PY
ok "   grafana dashboard: valid JSON, its $(python3 -c "import json; print(len(json.load(open('contrib/grafana/understudy.json'))['panels']))") panels use only exported metrics"

# 4. run
rmet=$(free_port)
"$BIN" run --guest counter --console tcp:127.0.0.1:$(free_port) --metrics 127.0.0.1:$rmet \
	--control "$tmp/run.ctl" 2>"$tmp/run.log" &
rp=$!
wait_port $rmet $((20 * X)) || fail "run: no metrics port: $(tail -3 "$tmp/run.log")"
[ "$(scrape $rmet "$tmp/r1")" = 200 ] || fail "run /metrics: no 200"
check_prom "$tmp/r1" "run"
[ "$(value "$tmp/r1" 'understudy_state{state="unprotected"}')" = 1 ] || fail "run state: $(grep '^understudy_state' "$tmp/r1")"
# understudy protect attaches an engine to the running VM: its metrics are served from then on.
sport=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$(free_port) --insecure \
	--failover-timeout-ms $(nested 1000 3000) 2>"$tmp/sec4.log" &
sp=$!
wait_port $sport $((20 * X)) || fail "secondary did not listen"
"$BIN" protect --control "$tmp/run.ctl" --peer 127.0.0.1:$sport --insecure --timeout-ms $(nested 1000 3000) >/dev/null ||
	fail "protect: $(tail -3 "$tmp/run.log")"
wait_log "$tmp/run.log" "protected: secondary holds" $((30 * X)) || fail "run never protected: $(tail -3 "$tmp/run.log")"
[ "$(scrape $rmet "$tmp/r2")" = 200 ] || fail "run /metrics: no 200"
check_prom "$tmp/r2" "run, protected"
[ "$(value "$tmp/r2" 'understudy_state{state="protected"}')" = 1 ] || fail "protected run state: $(grep '^understudy_state' "$tmp/r2")"
[ "$(value "$tmp/r2" 'understudy_events_total{event="protected"}')" = 1 ] || fail "protected event not counted"
gt "$(value "$tmp/r2" understudy_pause_seconds_count)" 0 || fail "no pauses counted after protect"
kill $rp $sp; wait $rp $sp 2>/dev/null
ok "4. run --metrics: primary, unprotected, promtool clean; after understudy protect: protected, pauses counted"
echo "PASS sys_metrics"
