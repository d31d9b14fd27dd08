#!/usr/bin/env bash
# The Debian package: `make deb` into a temporary BUILD (it builds in a copy
# of the tree there, so this tree's build/ is untouched); lintian on it
# reports nothing but what debian/understudy.lintian-overrides explains; it
# installs on this machine with dpkg -i, `understudy --version` runs from
# /usr/bin, the installed units pass systemd-analyze verify there (their
# ExecStart and man page now exist) and none is enabled; dpkg -r removes
# every file again and dpkg -P forgets the package. The machine is left as
# it was found: the test skips when the package or any of its files is
# already there, and removes what it installed even when it fails.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
[ "$(id -u)" = 0 ] || { echo "SKIP: dpkg -i needs root"; exit 77; }
for c in dpkg-buildpackage dh lintian; do
	command -v $c >/dev/null || { echo "SKIP: $c not installed (make deps)"; exit 77; }
done
version=$(sed -n 's/^VERSION *:= *//p' Makefile)
[ "$(dpkg-parsechangelog -l debian/changelog -S Version)" = "$version-1" ] ||
	fail "debian/changelog is at $(dpkg-parsechangelog -l debian/changelog -S Version), Makefile VERSION $version"
st=$(dpkg-query -W -f='${Status}' understudy 2>/dev/null)
case $st in *" installed"|*" config-files"|*unpacked*|*half*)
	echo "SKIP: the understudy package is already on this machine ($st): not touching it"; exit 77 ;;
esac
tmp=$(mktemp -d)
installed=0
cleanup() {
	[ $installed = 1 ] && dpkg -P understudy >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT
# dpkg -i/-r/-P, waiting out another dpkg or apt holding the lock
dpkg_do() {
	local i
	for i in $(seq 60); do
		dpkg "$@" >"$tmp/dpkg.log" 2>&1 && return 0
		grep -q "lock" "$tmp/dpkg.log" || return 1
		sleep 1
	done
	return 1
}

t0=$(date +%s)
timeout 240 make --no-print-directory deb BUILD="$tmp/build" >"$tmp/make.log" 2>&1 ||
	fail "make deb: $(tail -20 "$tmp/make.log")"
deb=$tmp/build/deb/understudy_${version}-1_amd64.deb
[ -f "$deb" ] || fail "no $deb: $(ls "$tmp/build/deb")"
ok "make deb: $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB) in $(( $(date +%s) - t0 )) s"

lintian -I --pedantic "$deb" >"$tmp/lintian.log" 2>&1
grep -v "^running with root" "$tmp/lintian.log" | grep -E '^[EWIP]:' && fail "lintian complains (above)"
grep -q "^E: \|^W: " "$tmp/lintian.log" && fail "lintian: $(cat "$tmp/lintian.log")"
ok "lintian -I --pedantic: nothing left but the $(grep -c '^understudy:' debian/understudy.lintian-overrides) explained overrides"

files=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $6 }')
for f in $files; do
	if [ -e "$f" ]; then
		echo "SKIP: $f is already on this machine (not from the package): installing would overwrite it"
		exit 77
	fi
done
installed=1
dpkg_do -i "$deb" || fail "dpkg -i: $(cat "$tmp/dpkg.log")"
[ "$(dpkg-query -W -f='${Status} ${Version}' understudy)" = "install ok installed $version-1" ] ||
	fail "dpkg status: $(dpkg-query -W -f='${Status} ${Version}' understudy)"
v=$(/usr/bin/understudy --version) || fail "/usr/bin/understudy --version failed"
[ "$v" = "understudy $version" ] || fail "--version: $v"
[ "$(dpkg -S /usr/bin/understudy | cut -d: -f1)" = understudy ] || fail "/usr/bin/understudy is not the package's"
for f in /usr/share/man/man8/understudy.8.gz /usr/lib/ocf/resource.d/understudy/understudy \
	 /usr/share/doc/understudy/examples/understudy.conf.example; do
	[ -e "$f" ] || fail "not installed: $f"
done
out=$(cd /lib/systemd/system && systemd-analyze verify understudy-primary@.service \
	understudy-secondary@.service understudy-run@.service 2>&1) || fail "installed units: $out"
[ -z "$out" ] || fail "installed units: $out"
ls /etc/systemd/system/*.wants/understudy-* >/dev/null 2>&1 && fail "a unit was enabled by the package"
ok "dpkg -i: '$v' from /usr/bin; $(echo "$files" | wc -w) files; the installed units verify" \
   "(ExecStart=/usr/bin/understudy, man:understudy(8)), none enabled"

dpkg_do -r understudy || fail "dpkg -r: $(cat "$tmp/dpkg.log")"
for f in $files; do
	[ -e "$f" ] && fail "left after dpkg -r: $f"
done
dpkg_do -P understudy || fail "dpkg -P: $(cat "$tmp/dpkg.log")"
installed=0
case $(dpkg-query -W -f='${Status}' understudy 2>/dev/null) in
*" installed"|*config-files) fail "dpkg still knows the package after -P" ;;
esac
ok "dpkg -r: every file gone; dpkg -P: the package forgotten"
echo PASS
