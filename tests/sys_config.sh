#!/usr/bin/env bash
# --config FILE (cli/config.c), with real agents:
#   1. a primary and a secondary started with nothing but --config FILE form
#      a pair: the primary gets protected, the counter answers through the
#      console the file names, both control sockets are where the files say;
#   2. an unknown key: exit 2, the message names FILE:LINE and the key;
#   3. a bad value: exit 2, the option's own complaint and FILE:LINE;
#      a flag that is not true/false, a section, a line without '=', a
#      missing file: exit 2 with the file named;
#   4. the command line wins over the file: run --config F --console OTHER
#      serves its console on OTHER, not on the port in F; two files, the
#      second overriding the first.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
test_tmp
# The pair's silence bounds: 2 s on a host's KVM, 4 s in the nested VM
# (tests/lib.sh nested), where QEMU's emulator stalls an agent for a second
# or more.
T=$(nested 2000 4000)
state_of() { "$BIN" status --control "$1" 2>/dev/null | sed -n 's/^state //p'; }

# 1. A pair from files alone.
sport=$(free_port); scon=$(free_port); pcon=$(free_port)
cat >"$tmp/vm1-secondary.conf" <<EOF
# the standby of vm1
listen = 127.0.0.1:$sport
console = tcp:127.0.0.1:$scon
insecure = true
failover-timeout-ms = $T   ; generous: the machine is shared
control = $tmp/sec.ctl
EOF
cat >"$tmp/vm1-primary.conf" <<EOF
; the active copy of vm1
guest = counter
mem = 64M
peer = 127.0.0.1:$sport
console = tcp:127.0.0.1:$pcon
	insecure = true
timeout-ms = $T
control = $tmp/pri.ctl
EOF
"$BIN" secondary --config "$tmp/vm1-secondary.conf" 2>"$tmp/sec.log" &
spid=$!
wait_port $sport 30 || fail "secondary from its file did not listen on $sport: $(tail -3 "$tmp/sec.log")"
"$BIN" primary --config="$tmp/vm1-primary.conf" 2>"$tmp/pri.log" &
ppid=$!
wait_port $pcon 30 || fail "primary from its file: no console on $pcon: $(tail -3 "$tmp/pri.log")"
for _ in $(seq 1 600); do
	[ "$(state_of "$tmp/pri.ctl")" = protected ] && break
	sleep 0.05
done
[ "$(state_of "$tmp/pri.ctl")" = protected ] ||
	fail "primary not protected: $(state_of "$tmp/pri.ctl"); $(tail -3 "$tmp/pri.log")"
out=$(python3 tests/counter_client.py $pcon incr incr get | cut -d' ' -f1 | tr '\n' ' ')
[ "$out" = "1 2 2 " ] || fail "counter through the file's console: '$out'"
"$BIN" status --control "$tmp/sec.ctl" >/dev/null || fail "no secondary control socket at the file's path"
grep -qi insecure "$tmp/pri.log" || fail "insecure = true did not make a plaintext link (no warning logged)"
ok "1. a pair from --config files alone: protected, counter '$out', control sockets as in the files"
kill -0 $ppid 2>/dev/null || fail "the primary died: $(tail -5 "$tmp/pri.log")"
kill -TERM $ppid; wait $ppid 2>/dev/null
kill -9 $spid 2>/dev/null; wait $spid 2>/dev/null   # it may have stopped with the primary

# expect2 NAME PATTERN CMD...: exit 2 and a message matching PATTERN
expect2() {
	local name=$1 pat=$2 out rc
	shift 2
	out=$("$BIN" "$@" 2>&1 </dev/null); rc=$?
	[ $rc = 2 ] || fail "$name: exit $rc, expected 2: $out"
	echo "$out" | grep -q -- "$pat" || fail "$name: message does not match '$pat': $out"
	echo "   $name -> $(echo "$out" | grep -- "$pat" | head -1)"
}

# 2. An unknown key names the file and the line.
printf '# vm2\nguest = counter\n\nlisen = 127.0.0.1:7000\n' >"$tmp/vm2.conf"
expect2 "unknown key" "$tmp/vm2.conf:4: unknown key 'lisen'" secondary --config "$tmp/vm2.conf"
expect2 "unknown key (run)" "$tmp/vm2.conf:4: unknown key 'lisen'" run --config "$tmp/vm2.conf"
ok "2. an unknown key: exit 2, FILE:LINE named"

# 3. Bad values name the file and the line, after the option's own complaint.
printf 'guest = counter\npeer = 127.0.0.1:7000\ninsecure = true\nepoch-ms = fast\n' >"$tmp/vm3.conf"
expect2 "bad value" "$tmp/vm3.conf:4: bad value for 'epoch-ms'" primary --config "$tmp/vm3.conf"
out=$("$BIN" primary --config "$tmp/vm3.conf" 2>&1); echo "$out" | grep -q -- "--epoch-ms 'fast'" ||
	fail "the option's own complaint is missing: $out"
printf 'guest = counter\nmem = 3x\n' >"$tmp/vm4.conf"
expect2 "bad size" "$tmp/vm4.conf:2: bad value for 'mem'" run --config "$tmp/vm4.conf"
printf 'listen = 127.0.0.1:0\n' >"$tmp/vm5.conf"
expect2 "bad port" "$tmp/vm5.conf:1: bad value for 'listen'" secondary --config "$tmp/vm5.conf"
printf 'guest = counter\ninsecure = yes\n' >"$tmp/vm6.conf"
expect2 "flag not true/false" "$tmp/vm6.conf:2: 'insecure' is a flag" primary --config "$tmp/vm6.conf"
printf '[vm7]\nguest = counter\n' >"$tmp/vm7.conf"
expect2 "section" "$tmp/vm7.conf:1: \[vm7\] sections are not used" run --config "$tmp/vm7.conf"
printf 'guest = counter\ncounter\n' >"$tmp/vm8.conf"
expect2 "no '='" "$tmp/vm8.conf:2: expected 'key = value'" run --config "$tmp/vm8.conf"
printf 'guest = counter\ncontrol =\n' >"$tmp/vm9.conf"
expect2 "empty value" "$tmp/vm9.conf:2: 'control' needs a value" run --config "$tmp/vm9.conf"
expect2 "missing file" "$tmp/nosuch.conf: No such file" run --config "$tmp/nosuch.conf"
# the same bad value typed on the command line names no file
out=$("$BIN" run --guest counter --mem 3x 2>&1); [ $? = 2 ] || fail "--mem 3x not exit 2"
echo "$out" | grep -q "bad value for" && fail "a command-line value blamed on a file: $out"
ok "3. bad values: exit 2, FILE:LINE named; flags, sections, syntax, missing file"

# 4. The command line wins over the file.
fport=$(free_port); cport=$(free_port)
printf 'guest = counter\nconsole = tcp:127.0.0.1:%s\ncontrol = %s\n' $fport "$tmp/run.ctl" >"$tmp/run.conf"
"$BIN" run --config "$tmp/run.conf" --console tcp:127.0.0.1:$cport 2>"$tmp/run.log" &
rpid=$!
wait_port $cport 30 || fail "run did not serve the command line's console $cport: $(tail -3 "$tmp/run.log")"
wait_port $fport 1 && fail "run also listens on the file's console port $fport"
out=$(python3 tests/counter_client.py $cport incr get | cut -d' ' -f1 | tr '\n' ' ')
[ "$out" = "1 1 " ] || fail "counter on the overriding console: '$out'"
[ -S "$tmp/run.ctl" ] || fail "the file's other keys were lost (no control socket)"
kill -TERM $rpid; wait $rpid 2>/dev/null
# two files: the later one wins, the command line over both
printf 'guest = counter\nmem = 3x\ncpus = 1\n' >"$tmp/base.conf"
printf 'mem = 64M\n' >"$tmp/over.conf"
p2=$(free_port)
"$BIN" run --config "$tmp/base.conf" --config "$tmp/over.conf" --console tcp:127.0.0.1:$p2 2>"$tmp/run2.log" &
rpid=$!
wait_port $p2 30 || fail "two files: the second did not override mem = 3x: $(tail -3 "$tmp/run2.log")"
kill -TERM $rpid; wait $rpid 2>/dev/null
# a bad value in the file does not matter when the command line gives the option
p3=$(free_port)
"$BIN" run --config "$tmp/base.conf" --mem 64M --console tcp:127.0.0.1:$p3 2>"$tmp/run3.log" &
rpid=$!
wait_port $p3 30 || fail "--mem on the command line did not replace the file's: $(tail -3 "$tmp/run3.log")"
kill -TERM $rpid; wait $rpid 2>/dev/null
ok "4. the command line wins: console on $cport (file said $fport); later files win over earlier ones"

# 5. The shipped example is valid: every key, the commented ones too, is an
#    option of its command with a value it accepts (--help comes after the
#    file's words, so they are all parsed first).
ex=contrib/understudy.conf.example
sed -n '/^# ---- the standby/q;p' $ex | sed -E 's/^# ([a-z-]+ = )/\1/' >"$tmp/ex-primary.conf"
sed -n '/^# ---- the standby/,$p' $ex | sed -nE 's/^# ([a-z-]+ = )/\1/p' >"$tmp/ex-secondary.conf"
[ "$(grep -c ' = ' "$tmp/ex-secondary.conf")" -ge 10 ] || fail "the example's standby part was not found"
# The certificates it names are opened while the options are parsed: stand-ins
# at the same names under $tmp (a host running this test has none in /etc).
mkdir -p "$tmp/tls" && sed -i "s|/etc/understudy/tls/|$tmp/tls/|" "$tmp"/ex-*.conf
for f in $(sed -n "s|.* = $tmp/tls/||p" "$tmp"/ex-*.conf); do : >"$tmp/tls/$f"; done
out=$("$BIN" primary --config "$tmp/ex-primary.conf" --help 2>&1 >/dev/null) ||
	fail "the example's primary part is refused: $out"
out=$("$BIN" secondary --config "$tmp/ex-secondary.conf" --help 2>&1 >/dev/null) ||
	fail "the example's standby part is refused: $out"
ok "5. $ex: $(grep -c ' = ' "$tmp/ex-primary.conf") primary and $(grep -c ' = ' "$tmp/ex-secondary.conf") secondary keys accepted"
