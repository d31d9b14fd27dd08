#!/usr/bin/env bash
# More guest RAM than the host has free (issue 30, item 3): every command
# that builds a VM warns at once when --mem exceeds MemAvailable (it used to
# start without a word and meet the OOM killer when the guest touched it);
# a secondary, which must hold all of a primary's RAM in its standby,
# refuses such a primary at its Hello, saying how much it has, before the
# initial sync sends a page; the primary logs the reason. A smaller primary
# is then protected by the same secondary.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
tmp=$(mktemp -d)
W=$(nested 10 60)
FAIL_LOGS="$tmp/pri.log $tmp/sec.log"
cleanup() { kill -9 $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

avail_mib=$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)
big_mib=$(( (avail_mib + 1024) / 2 * 2 + 2 ))   # over it, a multiple of 2 MiB
[ $big_mib -le 61440 ] || { echo "SKIP: this host has more than 59 GiB free (--mem stops at 60G)"; exit 77; }

sport=$(free_port); scon=$(free_port); pcon=$(free_port)
"$BIN" secondary --listen 127.0.0.1:$sport --console tcp:127.0.0.1:$scon --insecure \
	--control "$tmp/sec.ctl" 2>"$tmp/sec.log" &
sp=$!
wait_port $sport $W || fail "secondary did not listen"
timeout $((W * 2)) "$BIN" primary --guest counter --mem ${big_mib}M --console tcp:127.0.0.1:$pcon \
	--peer 127.0.0.1:$sport --insecure --control "$tmp/pri.ctl" 2>"$tmp/pri.log"
rc=$?
grep -q "warning: --mem $big_mib MiB is more than this host's available memory (MemAvailable" \
	"$tmp/pri.log" || fail "no warning for --mem ${big_mib}M with $avail_mib MiB free: $(head -3 "$tmp/pri.log")"
ok "--mem ${big_mib}M over $avail_mib MiB available: warned at once"
grep -q "refusing primary: the primary's VM has $big_mib MiB of RAM and this host has [0-9]* MiB available" \
	"$tmp/sec.log" || fail "the secondary did not refuse the primary for its RAM: $(grep -i "refus\|standby" "$tmp/sec.log" | head -3)"
grep -q "standby built" "$tmp/sec.log" && fail "a standby was built for it"
grep -q "MiB available (MemAvailable): the standby must be able to hold all of it" "$tmp/pri.log" ||
	fail "the primary (exit $rc) does not say why: $(tail -3 "$tmp/pri.log")"
ok "the secondary refused it at the Hello, no standby built; the primary said why (exit $rc)"

"$BIN" primary --guest counter --console tcp:127.0.0.1:$pcon --peer 127.0.0.1:$sport \
	--insecure --control "$tmp/pri.ctl" 2>"$tmp/pri.log" &
wait_log "$tmp/pri.log" "protected: secondary holds" $W || fail "the next primary was not protected"
ok "the same secondary then protects a primary of the default size"
