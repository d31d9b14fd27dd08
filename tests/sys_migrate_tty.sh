#!/usr/bin/env bash
# understudy migrate the way a person and a script use it, between two real
# agents:
#   1. on a pseudo-terminal of 80 columns (tests/pty_run.py; COLUMNS=300 in
#      the environment, which the terminal's own size overrides): no line it
#      draws is longer than 79 columns (split at \r and \n, escape codes
#      stripped), the progress line was redrawn, no frame before the sync
#      shows a filled bar, and a summary line ends it (time, downtime, MiB);
#   2. --json into a pipe, as `migrate --json | ...` does: the first object
#      arrives within 1.5 s of the start (6 s in the nested VM), and the
#      objects come as they are made, not in blocks at the end: nearly each
#      in a read of its own, each within the same bound of its elapsed_s.
# The migration is made to last by construction: the counter guest's area
# of 16 MiB rewritten with data no encoding shrinks (dense=1, one incr)
# copied at --bandwidth 4 MiB/s (2 in the nested VM) takes 4 s (8 s) at
# least, on any host; then the idle guest hands over at once.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
test_tmp
count() { python3 tests/counter_client.py "$@" | tail -1 | cut -d' ' -f1; }
bw=$(nested 4 2)
bound=$(nested 1.5 6)
n=0
start_pair() {   # a destination waiting and a source with 16 MiB written
	n=$((n + 1)); dport=$(free_port); dcon=$(free_port); scon=$(free_port)
	"$BIN" secondary --listen 127.0.0.1:$dport --console tcp:127.0.0.1:$dcon --insecure \
		--failover-timeout-ms $(nested 2000 8000) --control "$tmp/$n.dst.ctl" 2>"$tmp/$n.dst.log" &
	dp=$!
	wait_port $dport || fail "destination did not listen"
	"$BIN" run --guest counter:area_mb=16,dense=1 --console tcp:127.0.0.1:$scon \
		--control "$tmp/$n.src.ctl" 2>"$tmp/$n.src.log" &
	sp=$!
	wait_port $scon 20 || fail "source did not start"
	[ "$(count $scon incr)" = 1 ] || fail "source counter"
}
migrate_args() {
	echo --timeout-ms $(nested 2000 8000) --control "$tmp/$n.src.ctl" --to 127.0.0.1:$dport --insecure \
		--bandwidth $bw --max-time 120
}

# 1.
start_pair
COLUMNS=300 python3 tests/pty_run.py 80 "$tmp/tty.raw" "$BIN" migrate $(migrate_args) ||
	fail "migrate on a terminal: exit $?: $(tr '\r' '\n' <"$tmp/tty.raw" | tail -3)"
wait $sp; rc=$?
[ $rc = 0 ] || fail "the source exited $rc after the migration"
[ "$(count $dcon incr)" = 2 ] || fail "the destination does not go on from 1"
python3 - "$tmp/tty.raw" 79 <<'PY' || fail "the terminal output: $(tr '\r' '\n' <"$tmp/tty.raw" | cat -A | head -c 1500)"
import re, sys
raw = open(sys.argv[1], "rb").read().decode(errors="replace")
width = int(sys.argv[2])
text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
lines = [l for l in re.split(r"[\r\n]", text) if l.strip()]
long = [l for l in lines if len(l) > width]
assert not long, "%d lines longer than %d columns, e.g. %d: %r" % (len(long), width, len(long[0]), long[0])
frames = [l for l in lines if re.match(r"[a-z-]+ +\[[#.]{20}\]", l)]
assert len(frames) >= 3, "the progress line was drawn %d times: %r" % (len(frames), lines)
early = [l for l in frames if l.split()[0] in ("connecting", "hello") and "#" in l]
assert not early, "a filled bar before the sync: %r" % early
summary = [l for l in lines if l.startswith("migrated in ")]
assert summary and re.search(r"downtime [0-9.]+ ms", summary[0]) and "MiB sent" in "".join(lines[-3:]), \
    "no summary line at the end: %r" % lines[-4:]
print("   %d frames, longest line %d columns; first frame %r; %s" % (
    len(frames), max(len(l) for l in lines), frames[0], summary[0]))
PY
ok "1. on an 80-column terminal: every line within 79 columns, a summary at the end"
kill $dp; wait $dp 2>/dev/null

# 2.
start_pair
python3 - "$bound" "$BIN" migrate $(migrate_args) --json 2>"$tmp/json.err" <<'PY' ||
import json, os, subprocess, sys, time
bound, cmd = float(sys.argv[1]), sys.argv[2:]
t0 = time.monotonic()
p = subprocess.Popen(cmd, stdout=subprocess.PIPE)
buf, objs, reads = b"", [], 0
while True:
    data = os.read(p.stdout.fileno(), 65536)
    if not data:
        break
    now = time.monotonic() - t0
    buf += data
    *done, buf = buf.split(b"\n")
    if done:
        reads += 1
    for line in done:
        objs.append((now, json.loads(line)))
assert p.wait() == 0, "migrate --json exit %d" % p.returncode
assert objs and objs[-1][1].get("summary") and objs[-1][1]["result"] == "migrated", objs[-1:]
prog = [(t, o["elapsed_s"]) for t, o in objs if "elapsed_s" in o]
assert len(prog) >= 4, "only %d progress objects: the migration did not last" % len(prog)
assert prog[0][0] <= bound, "the first object came %.2f s after the start (bound %.1f s)" % (prog[0][0], bound)
late = [(round(t, 2), e) for t, e in prog if t - e > bound]
assert not late, "objects held back more than %.1f s after they were made: %r" % (bound, late)
assert reads >= 0.75 * len(objs), "%d objects came in only %d reads: in blocks" % (len(objs), reads)
print("   %d objects in %d reads; the first after %.2f s, the last progress one at %.2f s (elapsed_s %.1f)"
      % (len(objs), reads, prog[0][0], prog[-1][0], prog[-1][1]))
PY
	fail "migrate --json into a pipe: $(tail -3 "$tmp/json.err")"
wait $sp; rc=$?
[ $rc = 0 ] || fail "the source exited $rc after the migration"
ok "2. migrate --json into a pipe: the first object within $bound s, each as it was made"
kill $dp; wait $dp 2>/dev/null
exit 0
