#!/usr/bin/env bash
# The resource agent's meta-data (ocf/understudy meta-data) is valid against
# resource-agents' own schema (/usr/share/resource-agents/metadata.rng,
# Debian resource-agents): the monitor actions' roles are the current
# Promoted/Unpromoted (Pacemaker 2.1 and later); the old Master/Slave
# failed it (issue 30, item 14). No KVM, no cluster needed.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
rng=/usr/share/resource-agents/metadata.rng
[ -f "$rng" ] || { echo "SKIP: no $rng (Debian resource-agents)"; exit 77; }
command -v xmllint >/dev/null || { echo "SKIP: xmllint not installed (libxml2-utils)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
OCF_ROOT=/usr/lib/ocf ocf/understudy meta-data >"$tmp/meta.xml" || fail "meta-data exited $?"
xmllint --noout --nonet --relaxng "$rng" "$tmp/meta.xml" >"$tmp/lint.log" 2>&1 ||
	fail "meta-data does not validate against $rng: $(grep -v 'failed to load external entity' "$tmp/lint.log" | head -5)"
grep -q 'role="Promoted"' "$tmp/meta.xml" && grep -q 'role="Unpromoted"' "$tmp/meta.xml" ||
	fail "no Promoted/Unpromoted monitor actions"
ok "ocf/understudy meta-data validates against $rng (roles Promoted/Unpromoted)"
