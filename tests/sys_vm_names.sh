#!/usr/bin/env bash
# Named VMs without KVM: the name's checks, where the default name comes
# from, `understudy list` and the client commands' --name against stand-in
# agents (tests/fake_agent.py: a real control socket, no VM), and the
# refusal of a second VM of a name, which comes before any VM is built.
#   1. --name and the config key name: a bad name exits 2, naming --name or
#      FILE:LINE; a client's --name is checked the same way;
#   2. list: three sockets in UNDERSTUDY_RUN_DIR (a primary, a standby, one
#      nobody answers on): a header and one line each, sorted, the stale one
#      "not answering", exit 0; --json: one array, the same three; --dir;
#      a directory that does not exist lists nothing, exit 0;
#   3. status --name NAME asks RUN_DIR/NAME.sock;
#   4. run, primary, secondary and restore-free starts with a name whose
#      socket answers exit 2 naming it: the name given, the config file's
#      (vm7.conf: vm7), the guest's (counter); a socket nobody answers on
#      does not stop a start; the run directory is made 0700.
#   5. not root, no UNDERSTUDY_RUN_DIR (as nobody): run starts (it fails
#      later, at KVM, not with exit 2) with its socket directory
#      $XDG_RUNTIME_DIR/understudy made 0700, else /tmp/understudy-UID;
#      status --name and list look there; a default directory that cannot
#      be made is one warning and no socket, not a refusal; a --control or
#      control = whose directory is missing gets it made 0700, and one
#      whose directory cannot be made exits 2 naming it;
#   6. the name in the Hello (tests/raw_peer.py named: a primary's Hello, no
#      VM behind it): a secondary given no name takes the primary's (status
#      name, its log lines vm=NAME) and refuses a later primary of another
#      name with an Error naming both; one given --name refuses a primary of
#      another name and accepts one that sends none (an older primary);
#      a config file's name gives way like the guest's.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
[ -x "$BIN" ] || fail "no binary at $BIN"
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
run=$tmp/run
mkdir -m 0700 "$run"
export UNDERSTUDY_RUN_DIR=$run

# agent NAME SCRIPT_JSON: a stand-in agent at $run/NAME.sock
agent() {
	printf '%s\n' "$2" >"$tmp/$1.json"
	python3 tests/fake_agent.py "$run/$1.sock" "$tmp/$1.json" "$tmp/$1.requests" &
	pids+=($!)
	for _ in $(seq 100); do [ -S "$run/$1.sock" ] && return 0; sleep 0.05; done
	fail "the stand-in agent $1 did not start"
}
# expect2 WHAT PATTERN ARGS...: understudy ARGS exits 2 saying PATTERN
expect2() {
	local what=$1 pat=$2 out rc
	shift 2
	out=$(timeout 20 "$BIN" "$@" 2>&1 </dev/null); rc=$?
	[ $rc = 2 ] || fail "$what: exit $rc, want 2: $out"
	echo "$out" | grep -qF -- "$pat" || fail "$what: no '$pat' in: $out"
}

# 1.
expect2 "leading dot" "--name '.x'" run --guest counter --name .x
expect2 "a space" "--name 'a b'" run --guest counter --name 'a b'
expect2 "a slash" "--name 'a/b'" primary --guest counter --peer 127.0.0.1:1 --insecure --name a/b
expect2 "64 characters" "--name" secondary --listen 127.0.0.1:1 --console tcp:127.0.0.1:2 \
	--insecure --name "$(printf 'x%.0s' $(seq 64))"
expect2 "empty" "--name ''" restore "$tmp/nosuch" --name ''
printf 'guest = counter\nname = web/1\n' >"$tmp/bad.conf"
expect2 "config key" "$tmp/bad.conf:2: bad value for 'name'" run --config "$tmp/bad.conf"
expect2 "client --name" "--name 'a b'" status --name 'a b'
ok "1. bad names exit 2 (leading dot, space, slash, 64 characters, empty, FILE:LINE from a config file, a client's)"

# 2.
agent web1 '{"status json": [{"role": "primary", "state": "protected", "name": "web1",
 "peer": "10.0.0.2:7000", "epoch": 42, "acked": 41, "lag_ms": 1.5}]}'
agent db '{"status json": [{"role": "secondary", "state": "standby", "name": "db",
 "peer": "10.0.0.1:41000", "epoch": 7, "acked": 7}]}'
python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$run/stale.sock"
[ -S "$run/stale.sock" ] || fail "no stale socket file"
out=$("$BIN" list 2>&1) || fail "list exited $?: $out"
[ "$(echo "$out" | wc -l)" = 4 ] || fail "list: want a header and 3 lines: $out"
echo "$out" | head -1 | grep -qE '^NAME +ROLE +STATE +EPOCH +LAG_MS +PEER$' || fail "list header: $out"
echo "$out" | sed -n 2p | grep -qE '^db +secondary +standby +7 +- +10\.0\.0\.1:41000$' || fail "list db: $out"
echo "$out" | sed -n 3p | grep -qE '^stale +- +not answering +- +- +-$' || fail "list stale: $out"
echo "$out" | sed -n 4p | grep -qE '^web1 +primary +protected +42 +1\.500 +10\.0\.0\.2:7000$' || fail "list web1: $out"
out=$("$BIN" list --json 2>&1) || fail "list --json exited $?: $out"
python3 - "$out" "$run" <<'PY' || fail "list --json: $out"
import json, sys
rows = json.loads(sys.argv[1])
assert [r["name"] for r in rows] == ["db", "stale", "web1"], rows
db, stale, web = rows
assert (db["role"], db["state"], db["epoch"], db["peer"], db["answering"]) == \
    ("secondary", "standby", 7, "10.0.0.1:41000", True), db
assert "lag_ms" not in db, db
assert (stale["answering"], stale["state"]) == (False, "not answering") and stale["why"], stale
assert stale["socket"] == sys.argv[2] + "/stale.sock", stale
assert (web["role"], web["state"], web["epoch"], web["lag_ms"]) == ("primary", "protected", 42, 1.5), web
PY
mkdir "$tmp/other"
out=$(UNDERSTUDY_RUN_DIR=/nonexistent "$BIN" list --dir "$run" --json) && [ "$(echo "$out" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 3 ] ||
	fail "list --dir: $out"
out=$("$BIN" list --dir "$tmp/other" --json) && [ "$out" = "[]" ] || fail "an empty directory: $out"
out=$("$BIN" list --dir "$tmp/nonexistent") && [ "$(echo "$out" | wc -l)" = 1 ] || fail "no directory: $out"
ok "2. list: db, stale (not answering), web1, one line each after a header, and as JSON; --dir; none"

# 3.
out=$("$BIN" status --name web1 --json) || fail "status --name web1: $out"
[ "$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["name"])')" = web1 ] ||
	fail "status --name web1: $out"
grep -qx "status json" "$tmp/web1.requests" || fail "web1 was not asked: $(cat "$tmp/web1.requests")"
out=$("$BIN" status --name nosuch 2>&1); [ $? = 1 ] && echo "$out" | grep -qF "$run/nosuch.sock" ||
	fail "status --name nosuch: $out"
ok "3. status --name web1 asked $run/web1.sock; --name nosuch names $run/nosuch.sock, exit 1"

# 4.
expect2 "run --name web1" "$run/web1.sock" run --guest counter --name web1 --console tcp:127.0.0.1:1
expect2 "secondary --name db" "$run/db.sock" secondary --listen 127.0.0.1:1 \
	--console tcp:127.0.0.1:2 --insecure --name db
agent vm7 '{"status json": [{"role": "primary", "state": "unprotected", "name": "vm7"}]}'
printf 'guest = counter\nconsole = tcp:127.0.0.1:1\n' >"$tmp/vm7.conf"
expect2 "run --config vm7.conf" "a VM named 'vm7' runs on this host already: its agent answers on $run/vm7.sock" \
	run --config "$tmp/vm7.conf"
agent counter '{"status json": [{"role": "primary", "state": "unprotected", "name": "counter"}]}'
expect2 "primary --guest counter" "$run/counter.sock" primary --guest counter --peer 127.0.0.1:1 --insecure
# --control: the given socket, the default one not even asked
n=$(wc -l <"$tmp/counter.requests")
out=$(timeout 5 "$BIN" run --guest counter --control "$tmp/own.ctl" --console tcp:127.0.0.1:1 2>&1); rc=$?
[ $rc != 2 ] || fail "run --control: exit 2: $out"
[ "$(wc -l <"$tmp/counter.requests")" = "$n" ] || fail "run --control asked the default socket"
# nobody answers on stale.sock: the start goes on (to KVM, or a running VM
# timeout stops); a fresh run directory is made 0700
out=$(timeout 5 "$BIN" run --guest counter --name stale --console tcp:127.0.0.1:1 2>&1); rc=$?
[ $rc != 2 ] || fail "a stale socket refused a start: $out"
out=$(UNDERSTUDY_RUN_DIR=$tmp/fresh timeout 5 "$BIN" run --guest counter --console tcp:127.0.0.1:1 2>&1); rc=$?
[ $rc != 2 ] || fail "a fresh run directory: exit 2: $out"
[ "$(stat -c %a "$tmp/fresh")" = 700 ] || fail "the run directory is $(stat -c %a "$tmp/fresh"), want 700"
ok "4. a live socket of the name refuses run, primary, secondary (exit 2, the socket named): --name, vm7.conf, the guest; --control and a stale socket do not; the run directory is 0700"

# 5.
as_nobody() {
	env -u UNDERSTUDY_RUN_DIR XDG_RUNTIME_DIR="$xdg" \
		setpriv --reuid=65534 --regid=65534 --clear-groups "$@"
}
command -v setpriv >/dev/null || fail "no setpriv (util-linux) to run as nobody"
[ "$(id -u)" = 0 ] || fail "run as root: part 5 runs commands as nobody"
nob=$(mktemp -d /tmp/understudy-nobody.XXXXXX)
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp" "$nob"' EXIT
chmod 0755 "$nob"
xdg=$nob/xdg
mkdir -m 0700 "$xdg" && chown 65534:65534 "$xdg"
as_nobody test -x "$BIN" || fail "nobody cannot run $BIN"
out=$(as_nobody timeout 5 "$BIN" run --guest counter --name web --console tcp:127.0.0.1:1 2>&1); rc=$?
[ $rc != 2 ] || fail "run as nobody without --control: exit 2: $out"
[ "$(stat -c '%a %u' "$xdg/understudy")" = "700 65534" ] ||
	fail "$xdg/understudy: $(stat -c '%a %u' "$xdg/understudy" 2>&1), want 700 65534: $out"
out=$(as_nobody "$BIN" status --name web 2>&1); [ $? = 1 ] && echo "$out" | grep -qF "$xdg/understudy/web.sock" ||
	fail "status --name web as nobody: $out"
python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' \
	"$xdg/understudy/gone.sock" && chown 65534:65534 "$xdg/understudy/gone.sock" || fail "no socket file"
out=$(as_nobody "$BIN" list --json) || fail "list as nobody: $out"
[ "$(echo "$out" | python3 -c 'import json,sys; print([r["name"] for r in json.load(sys.stdin)])')" = "['gone']" ] ||
	fail "list as nobody: $out"
# no XDG_RUNTIME_DIR: /tmp/understudy-65534 (made here only when missing)
had=$([ -e /tmp/understudy-65534 ] && echo yes)
out=$(xdg='' as_nobody timeout 5 "$BIN" run --guest counter --name web --console tcp:127.0.0.1:1 2>&1); rc=$?
[ $rc != 2 ] && [ "$(stat -c '%a %u' /tmp/understudy-65534)" = "700 65534" ] ||
	fail "no XDG_RUNTIME_DIR: exit $rc, /tmp/understudy-65534: $(stat -c '%a %u' /tmp/understudy-65534 2>&1): $out"
[ "$had" ] || rmdir /tmp/understudy-65534
# a default directory that cannot be made: a warning, no socket, no refusal
mkdir -m 0555 "$nob/ro"
out=$(xdg=$nob/ro as_nobody timeout 5 "$BIN" run --guest counter --name web --console tcp:127.0.0.1:1 2>&1); rc=$?
[ $rc != 2 ] || fail "an unusable default directory refused the start: $out"
[ "$(echo "$out" | grep -c "running without a control socket")" = 1 ] &&
	echo "$out" | grep -qF "$nob/ro/understudy: Permission denied" ||
	fail "an unusable default directory: want one warning naming it: $out"
# --control and control = in a directory that is missing: made 0700
out=$(timeout 5 "$BIN" run --guest counter --console tcp:127.0.0.1:1 --control "$tmp/ctl/vm.sock" 2>&1); rc=$?
[ $rc != 2 ] && [ "$(stat -c %a "$tmp/ctl")" = 700 ] ||
	fail "--control in a missing directory: exit $rc, $(stat -c %a "$tmp/ctl" 2>&1): $out"
printf 'guest = counter\nconsole = tcp:127.0.0.1:1\ncontrol = %s/ctl2/vm1.sock\n' "$tmp" >"$tmp/vm1.conf"
out=$(timeout 5 "$BIN" run --config "$tmp/vm1.conf" 2>&1); rc=$?
[ $rc != 2 ] && [ "$(stat -c %a "$tmp/ctl2")" = 700 ] ||
	fail "control = in a missing directory: exit $rc, $(stat -c %a "$tmp/ctl2" 2>&1): $out"
out=$(as_nobody timeout 5 "$BIN" run --guest counter --console tcp:127.0.0.1:1 \
	--control "$nob/ro/sub/vm.sock" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -qF -- "--control $nob/ro/sub/vm.sock: cannot make its directory $nob/ro/sub" ||
	fail "--control in a directory nobody may make: exit $rc, want 2 naming it: $out"
ok "5. as nobody: the socket directory $xdg/understudy (0700, nobody's), else /tmp/understudy-65534; status --name and list look there; an unusable default: one warning, no refusal; --control and control = get a missing directory made 0700, one that cannot be made exits 2 naming it"

# 6.
# secondary ARGS...: a secondary on a free port ($sport), its log $tmp/sec.log
secondary() {
	sport=$(free_port)
	"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$(free_port) --insecure \
		--failover-timeout-ms 3000 "$@" 2>"$tmp/sec.log" </dev/null &
	spid=$!
	pids+=($spid)
	for _ in $(seq 100); do "$BIN" status --control "$tmp/sec.ctl" >/dev/null 2>&1 && return 0; sleep 0.05; done
	fail "the secondary did not start: $(cat "$tmp/sec.log")"
}
# hello NAME WANT: a primary's Hello naming NAME; the secondary answers WANT
# ("- held": accepted, "9": one Error, then closed)
hello() {
	local got
	got=$(python3 tests/raw_peer.py $sport named "$1" 1) || fail "Hello '$1': $got"
	[ "$got" = "$2" ] || fail "Hello '$1': the secondary answered '$got', want '$2': $(tail -3 "$tmp/sec.log")"
}
sec_name() { "$BIN" status --control "$tmp/sec.ctl" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["name"])'; }
secondary --control "$tmp/sec.ctl"
[ "$(sec_name)" = "" ] || fail "a secondary given no name has one: $(sec_name)"
hello gamma "- held"
[ "$(sec_name)" = gamma ] || fail "the secondary did not take the primary's name: '$(sec_name)'"
grep -q "^understudy\[secondary\] vm=gamma .*the primary names the VM 'gamma'" "$tmp/sec.log" ||
	fail "no vm=gamma line: $(cat "$tmp/sec.log")"
hello delta 9
grep -qF "refusing primary: the primary's VM is named 'delta', this secondary's 'gamma'" "$tmp/sec.log" ||
	fail "a second primary of another name: $(tail -3 "$tmp/sec.log")"
[ "$(sec_name)" = gamma ] || fail "the refused primary renamed the secondary: '$(sec_name)'"
kill $spid; wait $spid 2>/dev/null
secondary --control "$tmp/sec.ctl" --name beta
hello gamma 9
grep -qF "refusing primary: the primary's VM is named 'gamma', this secondary's 'beta'" "$tmp/sec.log" ||
	fail "secondary --name beta: $(tail -3 "$tmp/sec.log")"
hello "" "- held"
[ "$(sec_name)" = beta ] || fail "secondary --name beta is named '$(sec_name)'"
kill $spid; wait $spid 2>/dev/null
# a config file's name is a default: vm9-standby.conf's secondary serves gamma
printf 'insecure = true\n' >"$tmp/vm9-standby.conf"
secondary --control "$tmp/sec.ctl" --config "$tmp/vm9-standby.conf"
[ "$(sec_name)" = vm9-standby ] || fail "the secondary of vm9-standby.conf is named '$(sec_name)'"
hello gamma "- held"
[ "$(sec_name)" = gamma ] || fail "the secondary of vm9-standby.conf did not take gamma: '$(sec_name)'"
kill $spid; wait $spid 2>/dev/null
ok "6. a secondary given no name took the Hello's (gamma: status, log lines) and then refused delta; --name beta refused gamma and accepted a Hello without a name; one named by its config file (vm9-standby) took gamma"
echo PASS
