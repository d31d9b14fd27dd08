#!/usr/bin/env bash
# A restarted primary with a witness (issue 25, item 1): while K/standby
# names a standby (the witness vouches for it: it may hold the only
# up-to-date copy), `understudy primary` refuses before it builds anything,
# with its own exit status (REPL_EXIT_STANDBY_VOUCHED), naming the standby's
# token and what to do (`understudy takeover` on it); K/owner and K/standby
# stay as they were, so the standby can still win the key. The primary's
# unit does not restart on that status. No KVM needed: the refusal comes
# before the VM is built. A real etcd on loopback (Debian etcd-server).
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
[ -x "$BIN" ] || fail "no binary at $BIN (make first)"
test_tmp

vouched=$(sed -n 's/^#define REPL_EXIT_STANDBY_VOUCHED \([0-9]*\).*/\1/p' primary/primary.h)
[ -n "$vouched" ] || fail "REPL_EXIT_STANDBY_VOUCHED not found in primary/primary.h"
grep -Eq "^RestartPreventExitStatus=.*\\b$vouched\\b" contrib/systemd/understudy-primary@.service ||
	fail "understudy-primary@: RestartPreventExitStatus= lacks $vouched (a vouched standby)"
ok "understudy-primary@ does not restart on exit $vouched (a vouched standby)"

start_etcd "$tmp/etcd"
# etcd_put EP KEY VALUE (no lease), through the gateway as the agents use it
etcd_put() {
	python3 - "$1" "$2" "$3" <<'PY'
import base64, json, sys, urllib.request
b = lambda s: base64.b64encode(s.encode()).decode()
req = urllib.request.Request("http://%s/v3/kv/put" % sys.argv[1], method="POST",
    data=json.dumps({"key": b(sys.argv[2]), "value": b(sys.argv[3])}).encode())
urllib.request.urlopen(req, timeout=3).read()
PY
}
# What a crashed primary leaves: no K/owner (its lease ran out), K/standby
# naming the standby it vouched for.
etcd_put "$ETCD_EP" r1/standby standby-0123456789abcdef
pcon=$(free_port)
timeout 20 "$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon --peer 127.0.0.1:1 \
	--insecure --witness etcd:$ETCD_EP --witness-key r1 --lease-ms 1000 2>"$tmp/p.log"
rc=$?
[ $rc = "$vouched" ] || fail "a fresh primary with a vouched standby exited $rc, want $vouched: $(cat "$tmp/p.log")"
grep -q "standby-0123456789abcdef" "$tmp/p.log" || fail "the standby is not named: $(cat "$tmp/p.log")"
grep -q "understudy takeover" "$tmp/p.log" || fail "no advice to take over: $(cat "$tmp/p.log")"
grep -q "refusing to run the guest" "$tmp/p.log" || fail "no refusal: $(cat "$tmp/p.log")"
[ -z "$(etcd_get "$ETCD_EP" r1/owner)" ] || fail "r1/owner was taken: $(etcd_get "$ETCD_EP" r1/owner)"
[ "$(etcd_get "$ETCD_EP" r1/standby)" = standby-0123456789abcdef ] ||
	fail "r1/standby changed to '$(etcd_get "$ETCD_EP" r1/standby)'"
ok "a fresh primary refused (exit $rc): $(grep -o 'witness: .*' "$tmp/p.log" | head -1 | cut -c1-150)..."
