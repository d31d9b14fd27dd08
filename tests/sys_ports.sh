#!/usr/bin/env bash
# Replication ports without hand-assigned numbers, no KVM needed (a
# secondary listens before it builds a VM; a primary's --peer is derived
# and logged before it opens /dev/kvm):
#   1. refused at parsing, exit 2 naming the option: a --listen or --peer
#      HOST without a port and no --index; --port-base + --index over 65535
#      (also from a config file); --index and --port-base out of range,
#      the file's line named;
#   2. secondary --listen HOST --index N --port-base B listens on B+N (a TCP
#      connect to it succeeds, and its log says so); from a config file
#      (index, port-base keys) too; the default base is 7800; an explicit
#      HOST:PORT wins over --index;
#   3. primary --peer HOST --index N: the derived HOST:B+N is logged, and
#      an IPv6 [ADDR] keeps its brackets;
#   4. protect --peer, migrate --to and switchover --listen take a HOST and
#      --index the same way: the request a stand-in agent (tests/fake_agent.py,
#      a real control socket) gets names HOST:B+N; without --index, exit 2
#      naming the option.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
[ -x "$BIN" ] || fail "no binary at $BIN"
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT

expect2() {   # WHAT PATTERN ARGS...: understudy ARGS exits 2 saying PATTERN
	local what=$1 pat=$2 out rc
	shift 2
	out=$(timeout 20 "$BIN" "$@" 2>&1 </dev/null); rc=$?
	[ $rc = 2 ] || fail "$what: exit $rc, want 2: $out"
	echo "$out" | grep -qF -- "$pat" || fail "$what: no '$pat' in: $out"
}
con=$(free_port)

# 1.
expect2 "listen without a port" "--listen '127.0.0.1': no port: give HOST:PORT, or --index N" \
	secondary --listen 127.0.0.1 --console tcp:127.0.0.1:$con --insecure
expect2 "peer without a port" "--peer 'node-b': no port" \
	primary --guest counter --peer node-b --insecure
expect2 "over 65535" "--port-base 65000 + --index 600 = 65600: over 65535 (--listen '127.0.0.1')" \
	secondary --listen 127.0.0.1 --port-base 65000 --index 600 --console tcp:127.0.0.1:$con --insecure
printf 'guest = counter\npeer = node-b\nport-base = 65535\nindex = 1\ninsecure = true\n' >"$tmp/over.conf"
expect2 "over 65535 from a file" "--port-base 65535 + --index 1 = 65536: over 65535 (--peer 'node-b')" \
	primary --config "$tmp/over.conf"
expect2 "--index range" "--index '65536': need a number, 0..65535" \
	primary --guest counter --peer node-b --index 65536 --insecure
expect2 "--port-base 0" "--port-base '0': need a port, 1..65535" \
	secondary --listen 127.0.0.1 --port-base 0 --index 1 --console tcp:127.0.0.1:$con --insecure
printf 'listen = 127.0.0.1\nindex = -1\n' >"$tmp/neg.conf"
expect2 "--index -1 from a file" "$tmp/neg.conf:2" \
	secondary --config "$tmp/neg.conf" --console tcp:127.0.0.1:$con --insecure
expect2 "a bad HOST:PORT still" "--peer 'node-b:x': bad port" \
	primary --guest counter --peer node-b:x --index 1 --insecure
ok "1. exit 2 naming the option: no port and no --index, a sum over 65535 (and from a file), --index and --port-base out of range (FILE:LINE)"

# 2. A free base: the port at BASE+N and its neighbours must be free.
base=
for _ in $(seq 50); do
	b=$(( (RANDOM % 20000) + 20000 ))
	python3 - "$b" <<'PY' && { base=$b; break; }
import socket, sys
b = int(sys.argv[1])
for p in range(b, b + 8):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        sys.exit(1)
    finally:
        s.close()
PY
done
[ -n "$base" ] || fail "no 8 free ports in a row"
# listening SECONDARY_ARGS...: starts a secondary; prints nothing, sets sp
listening() {
	"$BIN" secondary --console tcp:127.0.0.1:$(free_port) --insecure "$@" 2>"$tmp/sec.log" &
	sp=$!
	pids+=($sp)
}
stop() { kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null; }
listening --listen 127.0.0.1 --index 5 --port-base $base
wait_port $((base + 5)) 10 || fail "nothing on $((base + 5)): $(cat "$tmp/sec.log")"
grep -qF "waiting for a primary on 127.0.0.1:$((base + 5))" "$tmp/sec.log" || fail "log: $(cat "$tmp/sec.log")"
grep -qF -- "--listen 127.0.0.1:$((base + 5)): port $((base + 5)) (--port-base $base + --index 5)" "$tmp/sec.log" ||
	fail "the derivation is not logged: $(cat "$tmp/sec.log")"
stop
printf 'listen = 127.0.0.1\nport-base = %s\nindex = 2\n' "$base" >"$tmp/vm2.conf"
listening --config "$tmp/vm2.conf"
wait_port $((base + 2)) 10 || fail "config file: nothing on $((base + 2)): $(cat "$tmp/sec.log")"
stop
listening --listen 127.0.0.1:$((base + 7)) --index 1 --port-base $base
wait_port $((base + 7)) 10 || fail "HOST:PORT did not win over --index: $(cat "$tmp/sec.log")"
grep -qF "waiting for a primary on 127.0.0.1:$((base + 7))" "$tmp/sec.log" || fail "log: $(cat "$tmp/sec.log")"
stop
out=$(timeout 5 "$BIN" secondary --listen 127.0.0.1 --index 3 --console tcp:127.0.0.1:$(free_port) \
	--insecure 2>&1)
echo "$out" | grep -qF "port 7803 (--port-base 7800 + --index 3)" || fail "default base: $out"
ok "2. secondary: --index 5 --port-base $base listens on $((base + 5)); index/port-base from a file: $((base + 2)); HOST:PORT wins; default base 7800"

# 3.
out=$(UNDERSTUDY_RUN_DIR=$tmp timeout 10 "$BIN" primary --guest counter --peer 127.0.0.1 --index 4 \
	--port-base $base --insecure --console tcp:127.0.0.1:$(free_port) 2>&1)
echo "$out" | grep -qF -- "--peer 127.0.0.1:$((base + 4)): port $((base + 4))" || fail "primary: $out"
out=$(UNDERSTUDY_RUN_DIR=$tmp timeout 10 "$BIN" primary --guest counter --peer '[::1]' --index 4 \
	--insecure --console tcp:127.0.0.1:$(free_port) 2>&1)
echo "$out" | grep -qF -- "--peer [::1]:7804: port 7804" || fail "primary IPv6: $out"
ok "3. primary --peer 127.0.0.1 --index 4: 127.0.0.1:$((base + 4)); [::1] keeps its brackets: [::1]:7804"

# 4. The commands that name a standby on a running VM's control socket.
printf '%s\n' '{"protect": ["ok protecting\n"], "migrate": ["error: not here\n"],
 "switchover": ["error: not here\n"], "status json": [{"role": "primary", "state": "unprotected"}]}' \
	>"$tmp/agent.json"
python3 tests/fake_agent.py "$tmp/vm.ctl" "$tmp/agent.json" "$tmp/requests" &
pids+=($!)
for _ in $(seq 100); do [ -S "$tmp/vm.ctl" ] && break; sleep 0.05; done
[ -S "$tmp/vm.ctl" ] || fail "4. the stand-in agent did not start"
timeout 20 "$BIN" protect --control "$tmp/vm.ctl" --peer 127.0.0.1 --index 6 --port-base $base \
	--insecure --no-wait >/dev/null 2>&1
timeout 20 "$BIN" migrate --control "$tmp/vm.ctl" --to node-b --index 1 --insecure >/dev/null 2>&1
timeout 20 "$BIN" switchover --control "$tmp/vm.ctl" --listen '[::1]' --index 2 --port-base $base \
	--no-wait >/dev/null 2>&1
grep -q "^protect 127.0.0.1:$((base + 6)) " "$tmp/requests" || fail "4. protect: $(cat "$tmp/requests")"
grep -q "^migrate node-b:7801 " "$tmp/requests" || fail "4. migrate: $(cat "$tmp/requests")"
grep -qxF "switchover listen=[::1]:$((base + 2))" "$tmp/requests" || fail "4. switchover: $(cat "$tmp/requests")"
grep -v '^status json$' "$tmp/requests" >"$tmp/orders"
[ "$(wc -l <"$tmp/orders")" = 3 ] || fail "4. requests: $(cat "$tmp/requests")"
expect2 "protect without --index" "--peer '127.0.0.1': no port" \
	protect --control "$tmp/vm.ctl" --peer 127.0.0.1 --insecure
expect2 "migrate without --index" "--to 'node-b': no port" \
	migrate --control "$tmp/vm.ctl" --to node-b --insecure
expect2 "switchover without --index" "--listen 'node-b': no port" \
	switchover --control "$tmp/vm.ctl" --listen node-b
[ "$(grep -vc '^status json$' "$tmp/requests")" = 3 ] ||
	fail "4. a refused command reached the agent: $(cat "$tmp/requests")"
ok "4. protect --peer 127.0.0.1, migrate --to node-b, switchover --listen [::1] with --index: the agent got 127.0.0.1:$((base + 6)), node-b:7801, [::1]:$((base + 2)); without --index exit 2"
echo PASS
