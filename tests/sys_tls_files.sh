#!/usr/bin/env bash
# TLS files checked while the options are read (issue 30, item 1): a
# missing, unreadable or unparsable certificate, key or CA, a key that is
# not the certificate's, an expired certificate, or one without the
# extended key usage of the side's role (the secondary listens as the TLS
# server: serverAuth; a primary, and an engine that `protect` or `migrate`
# attaches, connect as the client: clientAuth) is refused with exit 2 and
# one line naming the option, the file and what is wrong, before any VM is
# built (they used to pass parsing and fail later with an OpenSSL error
# stack and "Invalid argument", exit 1). And --insecure on the command
# line wins over certificates from a config file (item 2). No KVM needed.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
[ -x "$BIN" ] || { echo "SKIP: $BIN not built"; exit 77; }
command -v openssl >/dev/null || { echo "SKIP: openssl not installed (certificates)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bash tests/mkcerts.sh "$tmp/c" >/dev/null 2>&1 || fail "mkcerts"
c=$tmp/c
printf 'not a certificate\n' >"$tmp/junk.pem"
port=$(free_port); con=$(free_port)

# expect2 NAME PATTERN CMD...: exit 2, one line matching PATTERN
expect2() {
	local name=$1 pat=$2 out rc
	shift 2
	out=$(timeout 20 "$BIN" "$@" 2>&1 </dev/null); rc=$?
	[ $rc = 2 ] || fail "$name: exit $rc, expected 2: $(echo "$out" | head -3)"
	echo "$out" | grep -q -- "$pat" || fail "$name: message does not match '$pat': $out"
	[ "$(echo "$out" | wc -l)" = 1 ] || fail "$name: more than one line: $out"
	echo "   $name -> $out"
}
sec() { expect2 "$1" "$2" secondary --listen 127.0.0.1:$port --console tcp:127.0.0.1:$con \
	--tls-cert "$3" --tls-key "$4" --tls-ca "$5"; }
pri() { expect2 "$1" "$2" primary --guest counter --peer 127.0.0.1:$port \
	--tls-cert "$3" --tls-key "$4" --tls-ca "$5"; }

sec "secondary, a client's certificate" "^understudy: --tls-cert $c/client.pem: its extended key usage lacks serverAuth" \
	"$c/client.pem" "$c/client.key" "$c/ca.pem"
pri "primary, a server's certificate" "^understudy: --tls-cert $c/server.pem: its extended key usage lacks clientAuth" \
	"$c/server.pem" "$c/server.key" "$c/ca.pem"
sec "no extended key usage" "--tls-cert $c/noeku.pem: no extended key usage" \
	"$c/noeku.pem" "$c/noeku.key" "$c/ca.pem"
pri "expired" "--tls-cert $c/expired.pem: expired on 20" \
	"$c/expired.pem" "$c/expired.key" "$c/ca.pem"
pri "another certificate's key" "--tls-key $c/server.key: not the key of --tls-cert $c/client.pem" \
	"$c/client.pem" "$c/server.key" "$c/ca.pem"
sec "a missing CA" "--tls-ca '$tmp/none.pem': No such file or directory" \
	"$c/server.pem" "$c/server.key" "$tmp/none.pem"
sec "a CA file with no certificate" "--tls-ca $tmp/junk.pem: no PEM certificate in it" \
	"$c/server.pem" "$c/server.key" "$tmp/junk.pem"
pri "a certificate file with none" "--tls-cert $tmp/junk.pem: no PEM certificate in it" \
	"$tmp/junk.pem" "$c/client.key" "$c/ca.pem"
pri "a key file with none" "--tls-key $tmp/junk.pem: no PEM private key in it" \
	"$c/client.pem" "$tmp/junk.pem" "$c/ca.pem"
expect2 "protect, a server's certificate" "--tls-cert $c/server.pem: its extended key usage lacks clientAuth" \
	protect --control "$tmp/none.sock" --peer 127.0.0.1:$port \
	--tls-cert "$c/server.pem" --tls-key "$c/server.key" --tls-ca "$c/ca.pem"
ok "bad TLS files refused with exit 2 and one line naming the file, before any VM"

# The right files pass the check: protect goes on to the control socket
# (there is none: exit 1, saying so), and a pair's certificate with both
# usages passes in both roles.
for cert in client hosta; do
	out=$(timeout 20 "$BIN" protect --control "$tmp/none.sock" --peer 127.0.0.1:$port \
		--tls-cert "$c/$cert.pem" --tls-key "$c/$cert.key" --tls-ca "$c/ca.pem" 2>&1); rc=$?
	[ $rc = 1 ] && echo "$out" | grep -q "none.sock" ||
		fail "protect with $cert.pem: exit $rc: $out"
done
ok "good files pass (protect then finds no control socket, exit 1)"

# --insecure on the command line wins over certificates from a config file
# (issue 30, item 2): the link is plaintext, said once, and the request the
# agent gets carries no certificate (it used to stay TLS without a word).
printf 'peer = 127.0.0.1:%s\ntls-cert = %s\ntls-key = %s\ntls-ca = %s\n' $port \
	"$c/client.pem" "$c/client.key" "$c/ca.pem" >"$tmp/link.conf"
python3 tests/slow_agent.py "$tmp/agent.ctl" protect 0 &
agent=$!
for _ in $(seq 1 100); do [ -S "$tmp/agent.ctl" ] && break; sleep 0.1; done
out=$(timeout 30 "$BIN" protect --config "$tmp/link.conf" --control "$tmp/agent.ctl" --insecure 2>&1); rc=$?
kill $agent 2>/dev/null; wait $agent 2>/dev/null
req=$(cat "$tmp/agent.ctl.requests" 2>/dev/null)
echo "   protect --config (certificates) --insecure -> exit $rc; request: $req"
[ "$(echo "$out" | grep -c "insecure: the link is plaintext TCP; the configured --tls-cert")" = 1 ] ||
	fail "no (or more than one) notice that --insecure overrides the configured certificates: $out"
echo "$req" | grep -q "transport=tcp" && echo "$req" | grep -q "insecure=true" ||
	fail "the agent was not asked for a plaintext link: $req"
echo "$req" | grep -q "tls-" && fail "the request still carries TLS files: $req"
ok "--insecure on the command line overrides certificates from --config, saying so once"
