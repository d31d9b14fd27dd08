#!/usr/bin/env bash
# man/understudy.8 against the binary:
#   1. mandoc -T lint -W warning finds nothing;
#   2. every long option any command's --help prints is in the man page
#      (an option added without documenting it fails here), and so is
#      every command of the general usage;
#   3. `understudy help COMMAND` prints exactly `understudy COMMAND --help`,
#      both exit 0 (and `help drill KIND` `drill KIND --help`); `understudy help` alone is the general usage, exit 0;
#      `understudy help nosuch` exits 2.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
command -v mandoc >/dev/null || { echo "SKIP: mandoc not installed (make deps)"; exit 77; }
[ -x "$BIN" ] || fail "no binary at $BIN"
page=man/understudy.8
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# 1. lint
mandoc -T lint -W warning "$page" >"$tmp/lint" 2>&1 || fail "mandoc lint: $(cat "$tmp/lint")"
[ -s "$tmp/lint" ] && fail "mandoc lint said: $(cat "$tmp/lint")"
ok "1. mandoc -T lint -W warning: clean"

# The commands, from the general usage (indented names before their summary).
"$BIN" help >"$tmp/usage" || fail "understudy help exited $?"
"$BIN" --help | cmp -s - "$tmp/usage" || fail "understudy help differs from understudy --help"
cmds=$(sed -n '/^commands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p' "$tmp/usage")
[ "$(echo "$cmds" | wc -w)" -ge 9 ] || fail "found only these commands in the usage: $cmds"

# The page as a reader sees it, dashes and all.
mandoc -T ascii "$page" | col -b >"$tmp/page.txt"

# 2. every long option of every --help, every command
missing=() nopts=0
for c in $cmds; do
	grep -qE "^ +understudy $c( |$)" "$tmp/page.txt" || missing+=("command $c (no synopsis line)")
	"$BIN" "$c" --help >"$tmp/$c.help" 2>&1 || fail "understudy $c --help exited $?"
	for o in $(grep -oE -- '--[a-z][a-z0-9-]*' "$tmp/$c.help" | sort -u); do
		nopts=$((nopts + 1))
		grep -qE -- "(^|[^a-z0-9-])$o([^a-z0-9-]|$)" "$tmp/page.txt" || missing+=("$c: $o")
	done
done
[ ${#missing[@]} = 0 ] || fail "not in $page: ${missing[*]}"
ok "2. the page documents all $(echo "$cmds" | wc -w) commands and the long options of their --help ($nopts command/option pairs)"

# 3. help COMMAND == COMMAND --help
for c in $cmds; do
	"$BIN" help "$c" >"$tmp/$c.help2" 2>&1 || fail "understudy help $c exited $?"
	cmp -s "$tmp/$c.help" "$tmp/$c.help2" || fail "understudy help $c differs from understudy $c --help"
done
"$BIN" help nosuch >/dev/null 2>&1; rc=$?
[ $rc = 2 ] || fail "understudy help nosuch exited $rc, expected 2"
# ...and the drill's kinds: help drill KIND == drill KIND --help, exit 0
for k in test-failover switchover local history; do
	"$BIN" drill $k --help >"$tmp/drill-$k.help" 2>&1 || fail "understudy drill $k --help exited $?"
	grep -q "usage: understudy drill" "$tmp/drill-$k.help" || fail "understudy drill $k --help: $(head -2 "$tmp/drill-$k.help")"
	"$BIN" help drill $k >"$tmp/drill-$k.help2" 2>&1 || fail "understudy help drill $k exited $?"
	cmp -s "$tmp/drill-$k.help" "$tmp/drill-$k.help2" || fail "understudy help drill $k differs from understudy drill $k --help"
done
ok "3. understudy help COMMAND == understudy COMMAND --help for: $(echo $cmds); help drill KIND == drill KIND --help for its 4 kinds"
