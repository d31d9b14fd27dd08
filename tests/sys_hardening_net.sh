#!/usr/bin/env bash
# Hardening of net/ from the command line (issue 9): ports that used to wrap
# are refused with exit status 2.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
[ -n "${BUILD:-}" ] && BIN=${UNDERSTUDY_BIN:-$PWD/$BUILD/understudy}
[ -x "$BIN" ] || { echo "SKIP: $BIN not built"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null' EXIT

# ---- 8: HOST:PORT from the command line: 1..65535, else exit 2 and why -------
expect2() {
	local out rc
	out=$(timeout 10 "$BIN" "$@" 2>&1 </dev/null); rc=$?
	[ $rc = 2 ] || fail "'$*' exited $rc, expected 2: $out"
	echo "$out" | grep -q "bad port\|HOST:PORT" || fail "'$*' said: $out"
	echo "   '$*' -> $(echo "$out" | head -1)"
}
port=$(free_port)
expect2 secondary --insecure --listen 127.0.0.1:70000 --console tcp:127.0.0.1:$port
expect2 secondary --insecure --listen=127.0.0.1:0 --console tcp:127.0.0.1:$port
expect2 secondary --insecure --lis 127.0.0.1:-1 --console tcp:127.0.0.1:$port
expect2 secondary --insecure --listen 127.0.0.1 --console tcp:127.0.0.1:$port
expect2 secondary --insecure --listen 127.0.0.1:$port --console tcp:127.0.0.1:65536
expect2 primary --insecure --guest counter --peer 127.0.0.1:65536
expect2 primary --insecure --guest counter --peer=127.0.0.1:99999999999
expect2 run --guest counter --console tcp:127.0.0.1:0
ok "bad ports refused with exit 2"

exit 0
