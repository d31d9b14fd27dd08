#!/usr/bin/env bash
# --config FILE and the checks of option values, without a VM: everything
# here is refused (or accepted) while the command line is parsed, before
# any VM is built, so no KVM is needed (sys_config covers the running side).
#   1. lines of any length: a 300- and a 5000-character line are read whole
#      (inih's 200-byte buffer used to refuse anything over 197);
#   2. values that used to pass parsing and fail only once the VM ran
#      (exit 1, no FILE:LINE): --disk that is no image (primary, run),
#      --witness endpoints, --tls-*/--witness-ca files that cannot be read,
#      --control paths no socket can have, a bad --console for restore:
#      each exits 2 naming the option and FILE:LINE;
#   3. counts name their own unit: --bandwidth in MiB/s, --max-time in
#      seconds, --postcopy-after in rounds (they said "milliseconds").
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect2 NAME PATTERN CMD...: exit 2 and a message matching PATTERN
expect2() {
	local name=$1 pat=$2 out rc
	shift 2
	out=$(timeout 20 "$BIN" "$@" 2>&1 </dev/null); rc=$?
	[ $rc = 2 ] || fail "$name: exit $rc, expected 2: $(echo "$out" | head -3)"
	echo "$out" | grep -q -- "$pat" || fail "$name: message does not match '$pat': $out"
	echo "   $name -> $(echo "$out" | grep -- "$pat" | head -1 | cut -c1-150)"
}
# conf NAME LINE...: a file of those lines
conf() { local f=$tmp/$1; shift; printf '%s\n' "$@" >"$f"; }

# 1. Long lines. --help after the file's words: they are all parsed first,
#    exit 0 means every line was accepted.
long=$(head -c 300 /dev/zero | tr '\0' x)
conf long.conf "guest = counter" "listen = 127.0.0.1:7000" "insecure = true" \
	"fence-cmd = /bin/echo $long" "console = tcp:127.0.0.1:7001"
out=$("$BIN" secondary --config "$tmp/long.conf" --help 2>&1 >/dev/null) ||
	fail "a 300-character line is refused: $out"
huge=$(head -c 5000 /dev/zero | tr '\0' y)
conf huge.conf "guest = counter" "on-event = /bin/echo $huge ; a comment after it"
out=$("$BIN" run --config "$tmp/huge.conf" --help 2>&1 >/dev/null) ||
	fail "a 5000-character line is refused: $out"
# read whole, not cut: a bad value at the end of a long line is seen
conf longbad.conf "guest = counter" "mem = $(head -c 250 /dev/zero | tr '\0' 1)x"
expect2 "long line, bad value at its end" "$tmp/longbad.conf:2: bad value for 'mem'" \
	run --config "$tmp/longbad.conf"
ok "1. lines of 300 and 5000 characters are read whole"

# 1b. '#' after a space starts a comment, as ';' does (README says so).
conf hash.conf "guest = counter  # the built-in guest" "mem = 64M # the default" \
	"# a whole line" "cpus = 1	# a tab before it"
out=$("$BIN" run --config "$tmp/hash.conf" --help 2>&1 >/dev/null) ||
	fail "a ' # comment' after a value is taken as part of it: $out"
ok "1b. ' # comment' after a value is a comment"

# 2. Values found bad at parsing, FILE:LINE named.
base=("guest = counter" "peer = 127.0.0.1:7000" "insecure = true")
conf disk-p.conf "${base[@]}" "disk = $tmp/no-such.img"
expect2 "primary --disk missing" "$tmp/disk-p.conf:4: bad value for 'disk'" primary --config "$tmp/disk-p.conf"
expect2 "primary --disk missing (its reason)" "--disk $tmp/no-such.img: No such file" \
	primary --config "$tmp/disk-p.conf"
conf disk-r.conf "guest = counter" "disk = $tmp"
expect2 "run --disk a directory" "$tmp/disk-r.conf:2: bad value for 'disk'" run --config "$tmp/disk-r.conf"
conf wit1.conf "${base[@]}" "witness = etcd:not-an-endpoint"
expect2 "--witness without a port" "$tmp/wit1.conf:4: bad value for 'witness'" primary --config "$tmp/wit1.conf"
conf wit2.conf "${base[@]}" "witness = etcd:127.0.0.1:2379,127.0.0.1:0"
expect2 "--witness port 0" "$tmp/wit2.conf:4: bad value for 'witness'" primary --config "$tmp/wit2.conf"
conf wca.conf "${base[@]}" "witness = etcd:127.0.0.1:2379" "witness-ca = $tmp/no-ca.pem"
expect2 "--witness-ca missing" "$tmp/wca.conf:5: bad value for 'witness-ca'" primary --config "$tmp/wca.conf"
conf tls.conf "guest = counter" "peer = 127.0.0.1:7000" "tls-cert = $tmp/no-cert.pem"
expect2 "--tls-cert missing" "$tmp/tls.conf:3: bad value for 'tls-cert'" primary --config "$tmp/tls.conf"
conf tlsk.conf "guest = counter" "listen = 127.0.0.1:7000" "console = tcp:127.0.0.1:7001" \
	"tls-key = $tmp/no-key.pem"
expect2 "--tls-key missing" "$tmp/tlsk.conf:4: bad value for 'tls-key'" secondary --config "$tmp/tlsk.conf"
longctl=$tmp/$(head -c 120 /dev/zero | tr '\0' c).ctl
conf ctl.conf "guest = counter" "control = $longctl"
expect2 "--control too long (run)" "$tmp/ctl.conf:2: bad value for 'control'" run --config "$tmp/ctl.conf"
conf ctl2.conf "control = $longctl"
expect2 "--control too long (status)" "$tmp/ctl2.conf:1: bad value for 'control'" status --config "$tmp/ctl2.conf"
conf rcon.conf "console = tcp:127.0.0.1:0"
expect2 "restore --console port 0" "$tmp/rcon.conf:1: bad value for 'console'" \
	restore --config "$tmp/rcon.conf" "$tmp/any.snap"
ok "2. --disk, --witness, --witness-ca, --tls-*, --control, restore --console: exit 2 at parsing, FILE:LINE named"

# 3. Units.
mig=("control = $tmp/x.ctl" "to = 127.0.0.1:7000" "insecure = true")
conf bw.conf "${mig[@]}" "bandwidth = 0"
expect2 "--bandwidth 0" "--bandwidth '0': need MiB/s" migrate --config "$tmp/bw.conf"
expect2 "--bandwidth 0 (where)" "$tmp/bw.conf:4: bad value for 'bandwidth'" migrate --config "$tmp/bw.conf"
conf mt.conf "${mig[@]}" "max-time = soon"
expect2 "--max-time soon" "--max-time 'soon': need seconds" migrate --config "$tmp/mt.conf"
conf pc.conf "${mig[@]}" "postcopy-after = -1"
expect2 "--postcopy-after -1" "--postcopy-after '-1': need rounds" migrate --config "$tmp/pc.conf"
out=$("$BIN" migrate --control "$tmp/x.ctl" --to 127.0.0.1:7000 --insecure --bandwidth x 2>&1)
echo "$out" | grep -q milliseconds && fail "a count still named milliseconds: $out"
ok "3. --bandwidth, --max-time, --postcopy-after name MiB/s, seconds, rounds"
