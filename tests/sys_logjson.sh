#!/usr/bin/env bash
# --log-format json: every line an agent writes to stderr is one JSON object
# with time (ISO 8601 UTC, ms), level, module, role, vm (the VM's name: the
# primary's, from its guest; the secondary here has none), message, and epoch
# once there is one; text stays the default, with "vm=NAME" after the role.
#   1. --log-format bogus: exit 2; without the option the lines are text;
#   2. a pair in JSON through a takeover with a fence command whose text
#      (logged as it is) holds quotes, a backslash, a tab, UTF-8 and a byte
#      that is not UTF-8: every line of both agents parses (python3 json,
#      strict UTF-8), the keys are there, and the command comes back intact
#      (the bad byte as U+FFFD).
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_host_kvm "a takeover within its 400 ms failover timeout"
test_tmp

# 1.
"$BIN" run --guest counter --log-format yaml 2>"$tmp/bad.log"
[ $? = 2 ] && grep -q "text|json" "$tmp/bad.log" || fail "--log-format yaml accepted"
con=$(free_port)
"$BIN" run --guest counter --console tcp:127.0.0.1:$con 2>"$tmp/text.log" &
rp=$!
wait_port $con 20 || fail "run did not start: $(cat "$tmp/text.log")"
kill $rp; wait $rp 2>/dev/null
[ -s "$tmp/text.log" ] && ! grep -qv '^understudy\[run\] vm=counter +[0-9.]* [A-Z]* *[a-z]*: ' "$tmp/text.log" ||
	fail "default text lines: $(head -3 "$tmp/text.log")"
ok "1. --log-format yaml refused (exit 2); default is text: $(head -1 "$tmp/text.log")"

# 2.
fence=$(printf 'true "quoted" \\ back\tslash caf\xc3\xa9 bad\xff end')
sport=$(free_port); scon=$(free_port); pcon=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
	--failover-timeout-ms 400 --log-format json --fence-cmd "$fence" \
	--on-event 'echo "hook \"out\""; exit 1' 2>"$tmp/sec.json" &
sp=$!
wait_port $sport 20 || fail "secondary did not listen: $(cat "$tmp/sec.json")"
"$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon --peer 127.0.0.1:$sport --insecure \
	--timeout-ms 400 --log-format json 2>"$tmp/pri.json" &
pp=$!
wait_log "$tmp/pri.json" '"message":"protected: secondary holds' 30 || fail "never protected: $(tail -3 "$tmp/pri.json")"
python3 tests/counter_client.py $pcon incr >/dev/null || fail "client of the primary"
sleep 0.5
kill -9 $pp; wait $pp 2>/dev/null
wait_log "$tmp/sec.json" "TOOK OVER" 30 || fail "no takeover: $(tail -3 "$tmp/sec.json")"
wait_log "$tmp/sec.json" "hook FAILED" 10 || fail "no hook line: $(tail -3 "$tmp/sec.json")"
kill $sp; wait $sp 2>/dev/null
python3 - "$tmp/pri.json" "$tmp/sec.json" "$fence" <<'PY' || fail "JSON lines"
import json, re, sys
want_cmd = sys.argv[3].encode("utf-8", "surrogateescape").decode("utf-8", "replace")
iso = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
found_cmd = False
for path, role in ((sys.argv[1], "primary"), (sys.argv[2], "secondary")):
    lines = open(path, "rb").read().split(b"\n")
    assert lines[-1] == b"", "%s: the last line is not complete" % path
    epochs = 0
    for i, raw in enumerate(lines[:-1], 1):
        try:
            o = json.loads(raw.decode("utf-8"))
        except Exception as e:
            sys.exit("%s:%d: not JSON (%s): %r" % (path, i, e, raw[:200]))
        for k in ("time", "level", "module", "role", "message"):
            if not isinstance(o.get(k), str):
                sys.exit("%s:%d: no %s: %r" % (path, i, k, o))
        if not iso.match(o["time"]):
            sys.exit("%s:%d: time %r" % (path, i, o["time"]))
        if o["level"] not in ("error", "warn", "info", "debug"):
            sys.exit("%s:%d: level %r" % (path, i, o["level"]))
        if o["role"] != role:
            sys.exit("%s:%d: role %r, want %r" % (path, i, o["role"], role))
        # the primary's VM is named after its guest; the secondary was told no name
        if o.get("vm") != ("counter" if role == "primary" else None):
            sys.exit("%s:%d: vm %r" % (path, i, o.get("vm")))
        if "epoch" in o:
            if not isinstance(o["epoch"], int) or o["epoch"] < 1:
                sys.exit("%s:%d: epoch %r" % (path, i, o["epoch"]))
            epochs += 1
        if want_cmd in o["message"]:
            found_cmd = True
    if not epochs:
        sys.exit("%s: no line carries an epoch" % path)
    print("%s: %d lines, all JSON; %d with an epoch" % (role, len(lines) - 1, epochs))
if not found_cmd:
    sys.exit("the fence command did not come back intact: %r" % want_cmd)
print("the fence command came back intact: %r" % want_cmd)
PY
ok "2. $(python3 -c "import sys; print(sum(1 for _ in open(sys.argv[1], 'rb')) + sum(1 for _ in open(sys.argv[2], 'rb')))" "$tmp/pri.json" "$tmp/sec.json") JSON lines from a pair through a takeover, escaping checked"
echo "PASS sys_logjson"
