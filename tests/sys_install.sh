#!/usr/bin/env bash
# make install / make uninstall into a temporary DESTDIR, for PREFIX=/usr/local
# and PREFIX=/usr: exactly the expected files (binary, man page, the three
# systemd units with ExecStart pointed at the installed binary, the OCF agent,
# the example configuration) with their modes; the installed binary runs;
# uninstall removes every one of them and nothing else.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
build=${BUILD:-build}
[ -x "$build/understudy" ] || fail "no binary in $build (make first)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
units="understudy-primary@.service understudy-secondary@.service understudy-run@.service"

# check PREFIX UNITDIR: install, compare, uninstall
check() {
	local prefix=$1 unitdir=$2 root=$tmp/root${1//\//_} want got u
	mkdir -p "$root$prefix/bin"
	echo keep >"$root$prefix/bin/other"     # not ours: uninstall must leave it
	make --no-print-directory -s install BUILD="$build" PREFIX="$prefix" DESTDIR="$root" \
		>"$tmp/install.log" 2>&1 || fail "make install PREFIX=$prefix: $(tail -5 "$tmp/install.log")"
	want=$( {
		echo "$prefix/bin/understudy 755"
		echo "$prefix/bin/other 644"
		echo "$prefix/share/man/man8/understudy.8 644"
		for u in $units; do echo "$unitdir/$u 644"; done
		echo "/usr/lib/ocf/resource.d/understudy/understudy 755"
		echo "$prefix/share/doc/understudy/examples/understudy.conf.example 644"
	} | sort)
	got=$(cd "$root" && find . -type f -printf '/%P %m\n' | sort)
	[ "$got" = "$want" ] || fail "PREFIX=$prefix: installed files differ:$(diff <(echo "$want") <(echo "$got") | sed 's/^/ /')"
	for u in $units; do
		grep -q "^ExecStart=$prefix/bin/understudy " "$root$unitdir/$u" ||
			fail "$u: ExecStart not at $prefix/bin: $(grep ^ExecStart "$root$unitdir/$u")"
	done
	cmp -s man/understudy.8 "$root$prefix/share/man/man8/understudy.8" || fail "the man page differs"
	v=$("$root$prefix/bin/understudy" --version) || fail "the installed binary does not run"
	[ "$v" = "understudy $(sed -n 's/^VERSION *:= *//p' Makefile)" ] || fail "installed --version: $v"
	ok "make install PREFIX=$prefix: $(echo "$want" | grep -vc /other) files as expected (units in $unitdir," \
	   "ExecStart=$prefix/bin/understudy), '$v'"

	make --no-print-directory -s uninstall PREFIX="$prefix" DESTDIR="$root" >"$tmp/uninstall.log" 2>&1 ||
		fail "make uninstall PREFIX=$prefix: $(tail -5 "$tmp/uninstall.log")"
	got=$(cd "$root" && find . -type f -printf '/%P\n')
	[ "$got" = "$prefix/bin/other" ] || fail "after uninstall PREFIX=$prefix: $got"
	for d in /usr/lib/ocf/resource.d/understudy "$prefix/share/doc/understudy"; do
		[ -e "$root$d" ] && fail "after uninstall: $d is still there"
	done
	ok "make uninstall PREFIX=$prefix: all gone, its directories too; a file not ours stays"
}
check /usr/local /usr/local/lib/systemd/system
check /usr /lib/systemd/system
echo PASS
