#!/usr/bin/env bash
# The README as a new user types it: every ```sh block of README.md runs as
# it stands, from the top of the tree, after the build (the README says
# "after make demo"), except a block right after a line
# "<!-- not run: REASON -->" (shown here with its reason). In a block:
#   - each command runs in one shell per block, in order; one that exits
#     non-zero fails the test (`cmd &` starts a background job, as typed);
#   - lines "# => TEXT" after a command are its expected output, line by
#     line, exactly;
#   - every process a block started is stopped when it ends (the block runs
#     in a session of its own: SIGTERM, then SIGKILL, to that process group).
# A block whose 127.0.0.1 ports are taken by something else is skipped
# (SKIP line) rather than run against a stranger.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_host_kvm "the README's commands, which wait a second or two for the pair"
[ -x build/understudy ] || { echo "SKIP: build/understudy not built (make demo builds it)"; exit 77; }
command -v nc >/dev/null || { echo "SKIP: nc not installed (netcat-openbsd, make deps)"; exit 77; }
tmp=$(mktemp -d)
pgid=
made=()   # /tmp/understudy-* paths of the examples that were not there before
cleanup() {
	[ -n "$pgid" ] && kill -9 -- -"$pgid" 2>/dev/null
	[ ${#made[@]} -gt 0 ] && rm -rf "${made[@]}"
	rm -rf "$tmp"
}
trap cleanup EXIT

# Blocks to $tmp/block.N/{script,expect.I,ports,line}, notes on stdout.
python3 - README.md "$tmp" <<'PY' || fail "could not read the README's blocks"
import os, re, sys
readme, out = sys.argv[1], sys.argv[2]
lines = open(readme).read().split("\n")
n = 0
i = 0
while i < len(lines):
    if lines[i].strip() != "```sh":
        i += 1
        continue
    start = i + 1
    j = start
    while lines[j].strip() != "```":
        j += 1
    body = lines[start:j]
    k = i - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    note = re.match(r"\s*<!--\s*not run:\s*(.*?)\s*-->", lines[k]) if k >= 0 else None
    i = j + 1
    if note:
        print("not run (README.md:%d): %s" % (start, note.group(1)))
        continue
    n += 1
    d = os.path.join(out, "block.%d" % n)
    os.makedirs(d)
    cmds, expect = [], {}
    pending = ""
    for ln in body:
        m = re.match(r"# => ?(.*)$", ln)
        if m:
            if not cmds:
                sys.exit("README.md:%d: expected output before any command" % start)
            expect.setdefault(len(cmds), []).append(m.group(1))
            continue
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        if ln.endswith("\\"):
            pending += ln + "\n"
            continue
        cmds.append(pending + ln)
        pending = ""
    # Each command's stdout to its own file; the first failing one is named.
    s = ["exec 2>>%s/stderr" % d, "cd %s" % os.getcwd()]
    for c, cmd in enumerate(cmds, 1):
        s += ["exec >%s/out.%d" % (d, c), cmd,
              "__rc=$?; [ $__rc = 0 ] || { echo \"$__rc\" >%s/failed.%d; exit 1; }" % (d, c)]
    open(os.path.join(d, "script"), "w").write("\n".join(s) + "\n")
    for c, cmd in enumerate(cmds, 1):
        open(os.path.join(d, "cmd.%d" % c), "w").write(cmd + "\n")
        if c in expect:
            open(os.path.join(d, "expect.%d" % c), "w").write("\n".join(expect[c]) + "\n")
    open(os.path.join(d, "ports"), "w").write(" ".join(sorted(set(re.findall(r"127\.0\.0\.1:([0-9]+)",
                                                                          "\n".join(cmds))))))
    open(os.path.join(d, "line"), "w").write(str(start))
    open(os.path.join(d, "paths"), "w").write(" ".join(sorted(set(re.findall(r"/tmp/understudy-[A-Za-z0-9._-]+",
                                                                          "\n".join(cmds))))))
print("%d blocks to run" % n)
PY

port_taken() { python3 -c "import socket,sys; s=socket.socket(); sys.exit(0 if s.connect_ex(('127.0.0.1',$1)) == 0 else 1)"; }

ran=0 checked=0
nblocks=$(ls -d "$tmp"/block.* 2>/dev/null | wc -l)
for b in $(seq 1 "$nblocks"); do
	d=$tmp/block.$b
	line=$(cat "$d/line")
	for p in $(cat "$d/paths"); do [ -e "$p" ] || made+=("$p"); done
	busy=
	for p in $(cat "$d/ports"); do port_taken "$p" && busy="$busy $p"; done
	if [ -n "$busy" ]; then
		echo "SKIP: README.md:$line: port(s)$busy already in use here"
		continue
	fi
	setsid bash "$d/script" &
	spid=$!
	pgid=$spid
	for _ in $(seq 1 1200); do kill -0 $spid 2>/dev/null || break; sleep 0.1; done
	if kill -0 $spid 2>/dev/null; then
		kill -9 -- -"$pgid" 2>/dev/null
		fail "README.md:$line: the block did not end within 120 s: $(tail -5 "$d/stderr")"
	fi
	wait $spid
	# what the block left running (an agent started with &) is stopped here
	kill -TERM -- -"$pgid" 2>/dev/null
	for _ in $(seq 1 50); do kill -0 -- -"$pgid" 2>/dev/null || break; sleep 0.1; done
	kill -9 -- -"$pgid" 2>/dev/null
	pgid=
	for f in "$d"/failed.*; do
		[ -e "$f" ] || continue
		c=${f##*.}
		fail "README.md:$line: '$(cat "$d/cmd.$c")' exited $(cat "$f"): $(tail -5 "$d/stderr")"
	done
	n=0
	for e in "$d"/expect.*; do
		[ -e "$e" ] || continue
		c=${e##*.}
		cmp -s "$e" "$d/out.$c" || fail "README.md:$line: '$(cat "$d/cmd.$c")' printed
$(cat "$d/out.$c" 2>/dev/null)
where the README shows
$(cat "$e")"
		checked=$((checked + 1)); n=$((n + 1))
	done
	ran=$((ran + 1))
	ok "README.md:$line: $(ls "$d"/cmd.* | wc -l) commands ran, $n printed what the README shows"
done
[ "$ran" -ge 4 ] || fail "only $ran README blocks ran (expected at least 4: is the parser right?)"
[ "$checked" -ge 4 ] || fail "only $checked commands had their output checked"
ok "README: $ran blocks, $checked outputs as shown"
exit 0
