#!/usr/bin/env bash
# Every example command line of the man page and the README parses as typed:
#   - the examples: each `understudy ...` (or build/understudy) command of a
#     literal block (.Bd -literal) or .Dl line of man/understudy.8, and of
#     every ```sh block of README.md (those tests/sys_readme.sh does not run
#     included), continuation lines joined, shell comments dropped, a
#     pipeline or `&` cut into its commands;
#   - each runs with the built binary and `--help` appended: getopt reads
#     every option of the example, each value checked as it is read (a
#     file named by --tls-cert, --disk, --config must exist and be
#     readable), and --help, last, then prints the usage and exits 0
#     without starting anything. A typo'd option or command, or a bad
#     value, exits 2 instead and fails the test, naming FILE:LINE; so
#     does an option the usage does not name as typed (getopt_long would
#     take --consol for --console);
#   - the files an example names are the operator's; here they are made:
#     relative .pem/.key by tests/mkcerts.sh, relative .img empty, and
#     /etc/understudy/vm1.conf from contrib/understudy.conf.example (the
#     primary's part for `primary`, the standby's part for `secondary`), its
#     paths and the example's moved under a directory of the test's own;
#   - not checked: what a command checks after its options are read (a
#     required option missing, options that do not fit together);
#   - the check itself: the first example with its first long option typo'd
#     must fail, exit 2, naming the option.
# tests/sys_examples.sh [PAGE [README]] checks other copies (a typo'd page).
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
page=${1:-man/understudy.8}
readme=${2:-README.md}
[ -x "$BIN" ] || fail "no binary at $BIN"
command -v openssl >/dev/null || { echo "SKIP: openssl not installed (tests/mkcerts.sh needs it)"; exit 77; }
test_tmp

# The examples to $tmp/ex/N.args (NUL-separated words after `understudy`)
# and N.where (FILE:LINE).
python3 - "$page" "$readme" "$tmp/ex" <<'PY' || fail "could not read the examples"
import os, re, shlex, sys
page, readme, out = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(out)

def literal_lines(path):
    """(line number, text) of the man page's literal blocks and .Dl lines, roff escapes undone"""
    inside = False
    for n, ln in enumerate(open(path).read().split("\n"), 1):
        if ln.startswith(".Bd") and "-literal" in ln:
            inside = True
            continue
        if ln.startswith(".Ed"):
            inside = False
            continue
        text = ln[4:] if ln.startswith(".Dl ") else ln if inside else None
        if text is not None and not text.startswith("."):
            text = text.replace("\\e", "\\").replace("\\-", "-").replace("\\&", "").replace("\\(aq", "'")
            yield n, text

def sh_lines(path):
    """(line number, text) of the README's ```sh blocks"""
    inside = False
    for n, ln in enumerate(open(path).read().split("\n"), 1):
        if ln.strip().startswith("```"):
            inside = ln.strip() == "```sh"
            continue
        if inside:
            yield n, ln

def commands(lines):
    """(line number, argv) of each command of the logical lines"""
    start, pending = None, ""
    for n, text in lines:
        if pending == "":
            start = n
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        text, pending = pending + text, ""
        lex = shlex.shlex(text, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        cmd = []
        for w in list(lex) + [";"]:
            if w and all(c in "|&;()<>" for c in w):
                if cmd:
                    yield start, cmd
                cmd = []
            else:
                cmd.append(w)

n = 0
for path, lines in ((page, literal_lines(page)), (readme, sh_lines(readme))):
    found = 0
    for line, argv in commands(lines):
        if os.path.basename(argv[0]) != "understudy" or len(argv) < 2:
            continue
        n += 1
        found += 1
        open(os.path.join(out, "%d.args" % n), "w").write("\0".join(argv[1:]) + "\0")
        open(os.path.join(out, "%d.where" % n), "w").write("%s:%d" % (path, line))
    print("%s: %d example command lines" % (path, found))
PY
nex=$(ls "$tmp/ex"/*.args 2>/dev/null | wc -l)
nman=$(grep -l "^$page:" "$tmp"/ex/*.where 2>/dev/null | wc -l)
nreadme=$(grep -l "^$readme:" "$tmp"/ex/*.where 2>/dev/null | wc -l)
[ "$nman" -ge 12 ] || fail "only $nman examples found in $page (expected at least 12: is the parser right?)"
[ "$nreadme" -ge 6 ] || fail "only $nreadme examples found in $readme (expected at least 6)"

# The options of every command (--config, --version), from the general usage.
"$BIN" --help >"$tmp/usage" || fail "understudy --help exited $?"

# The operator's files: certificates and disk images in the directory the
# examples run in; each role's /etc/understudy under $tmp/ROLE.
mkdir -p "$tmp/cwd"
tests/mkcerts.sh "$tmp/cwd" >"$tmp/mkcerts.out" 2>&1 || fail "tests/mkcerts.sh: $(tail -3 "$tmp/mkcerts.out")"
for img in $(cat "$tmp"/ex/*.args | tr '\0' '\n' | grep -E '^[^/-][^/]*\.img$' | sort -u); do
	: >"$tmp/cwd/$img"
done
conf=contrib/understudy.conf.example
for role in primary secondary; do
	etc=$tmp/$role/etc/understudy
	mkdir -p "$etc/tls"
	cp "$tmp"/cwd/*.pem "$tmp"/cwd/*.key "$etc/tls/"
	if [ $role = primary ]; then   # the file as it stands, the standby's part commented out
		sed "s|/etc/understudy/|$etc/|g" "$conf"
	else                           # the standby's part, uncommented
		sed -n "/^# ---- the standby's/,\$ { /^# ----/d; s/^# //; s|/etc/understudy/|$etc/|g; p }" "$conf"
	fi >"$etc/vm1.conf"
done
grep -q '^listen = ' "$tmp/secondary/etc/understudy/vm1.conf" ||
	fail "no standby part (listen = ...) at the end of $conf"

# check WHERE WORDS...: understudy WORDS --help, in $tmp/cwd, with
# /etc/understudy/ of WORDS moved to the command's own; 0 when it printed
# the command's usage and exited 0, else 1 after saying why.
check() {
	local where=$1 cmd=$2 rc w words=()
	shift
	for w in "$@"; do words+=("${w//\/etc\/understudy\//$tmp/$cmd/etc/understudy/}"); done
	(cd "$tmp/cwd" && timeout 10 "$BIN" "${words[@]}" --help) >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ $rc != 0 ] || ! head -1 "$tmp/out" | grep -q "^usage: understudy $cmd"; then
		echo "$where: understudy $*: exit $rc: $(head -1 "$tmp/err")"
		return 1
	fi
	if [ -s "$tmp/err" ]; then
		echo "$where: understudy $*: said on stderr: $(head -1 "$tmp/err")"
		return 1
	fi
	# getopt_long takes an option's unambiguous prefix (--consol): each
	# --option of the example is to be spelled out as the usage names it
	for w in "$@"; do
		[[ $w == --[a-z]* ]] || continue
		grep -qE -- "(^|[^a-z0-9-])${w%%=*}([^a-z0-9-]|\$)" "$tmp/out" "$tmp/usage" && continue
		echo "$where: understudy $*: ${w%%=*} is not an option that understudy $cmd --help (or understudy --help) names"
		return 1
	done
	return 0
}

bad=0 cmds=()
for i in $(seq 1 "$nex"); do
	mapfile -d '' words <"$tmp/ex/$i.args"
	check "$(cat "$tmp/ex/$i.where")" "${words[@]}" || bad=$((bad + 1))
	[[ " ${cmds[*]} " == *" ${words[0]} "* ]] || cmds+=("${words[0]}")
done
[ $bad = 0 ] || fail "$bad of $nex example command lines do not parse as typed"
ok "all $nex example command lines parse as typed ($nman in $page, $nreadme in $readme; commands: ${cmds[*]})"

# The check itself: the first example with a long option, that option typo'd.
for i in $(seq 1 "$nex"); do
	mapfile -d '' words <"$tmp/ex/$i.args"
	for j in "${!words[@]}"; do
		[[ ${words[$j]} == --[a-z]* ]] || continue
		opt=${words[$j]%%=*}
		words[$j]=${words[$j]/#$opt/${opt}x}
		out=$(check "typo'd $(cat "$tmp/ex/$i.where")" "${words[@]}") &&
			fail "with ${opt}x for $opt, $(cat "$tmp/ex/$i.where") still passed"
		echo "$out" | grep -q -- "exit 2: .*${opt}x" || fail "a typo'd $opt: not exit 2 naming ${opt}x: $out"
		ok "the check catches a typo: $out"
		exit 0
	done
done
fail "no example has a long option to typo"
