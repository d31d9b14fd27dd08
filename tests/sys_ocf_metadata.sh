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

# validate-all on the derived ports' parameters and the name (no VM: it
# reads only them):
# OCF_ERR_CONFIGURED (6) for every value understudy would refuse at start.
va() {
	env OCF_ROOT=/usr/lib/ocf OCF_RESOURCE_INSTANCE=vm1 OCF_RESKEY_console=tcp:127.0.0.1:1 \
		OCF_RESKEY_listen=127.0.0.1 OCF_RESKEY_insecure=true OCF_RESKEY_binary="$BIN" "$@" \
		ocf/understudy validate-all >/dev/null 2>&1
}
for bad in "OCF_RESKEY_index=x" "OCF_RESKEY_index=99999" "OCF_RESKEY_index=-1" \
	"OCF_RESKEY_index=5 OCF_RESKEY_port_base=65535" "OCF_RESKEY_index=5 OCF_RESKEY_port_base=0" \
	"OCF_RESKEY_port_base=9000" "OCF_RESKEY_name=.x" "OCF_RESKEY_name=a/b" \
	"OCF_RESKEY_name=$(printf 'x%.0s' $(seq 64))"; do
	# shellcheck disable=SC2086
	va $bad; rc=$?
	[ $rc = 6 ] || fail "validate-all with $bad: $rc, want 6 (OCF_ERR_CONFIGURED)"
done
va OCF_RESKEY_index=5 OCF_RESKEY_port_base=9000 || fail "validate-all with index=5 port_base=9000: $?, want 0"
va OCF_RESKEY_index=0 || fail "validate-all with index=0: $?, want 0"
va OCF_RESKEY_name=web-1.a_b || fail "validate-all with name=web-1.a_b: $?, want 0"
va OCF_RESOURCE_INSTANCE=vm7:1 || fail "validate-all of clone instance vm7:1 (name vm7): $?, want 0"
ok "validate-all: index x, 99999, -1, port_base + index over 65535, port_base 0 or without index, name .x, a/b or of 64 characters: 6; index 5 with port_base 9000, index 0, name web-1.a_b, instance vm7:1: 0"
