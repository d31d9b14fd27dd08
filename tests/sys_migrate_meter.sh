#!/usr/bin/env bash
# understudy migrate's progress output against a stand-in source agent
# (tests/fake_agent.py: a real control socket answering a scripted
# migration, 1.2 s at hello, 4.8 s of sync, 1.2 s protected; no VM, no KVM),
# so that every frame's figures are known:
#   1. on a pseudo-terminal of 80 columns (tests/pty_run.py; COLUMNS=300 in
#      the environment, which the terminal's size overrides) no line is
#      longer than 79 columns (split at \r and \n, escape codes stripped);
#      the bar is empty at hello (nothing of the guest sent yet) and then
#      shows the share sent; a summary line ends it;
#   2. on 40 columns the fields that do not fit are dropped from the right,
#      the state and the bar kept;
#   3. a terminal that reports no size: $COLUMNS (50) is the width;
#   4. stderr a file: one whole line per update, each ended by a newline,
#      no \r, every field there;
#   5. --json into a pipe: the first object within 1.5 s, each object in a
#      read of its own (flushed as it is made; the last two may share one).
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
[ -x "$BIN" ] || { echo "SKIP: $BIN not built"; exit 77; }
tmp=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
python3 - "$tmp/script.json" <<'PY'
import json, sys
MiB = 1 << 20
def st(state, sent, left, epoch, **kw):
    o = {"role": "primary", "state": state, "epoch": epoch, "bytes_sent": sent, "migration_downtime_ms": 0.0,
         "migration_total_ms": 0.0, "throttle_pct": 0, "predicted_downtime_ms": 0.0, "pause_p50_us": 120.0,
         "lag_ms": 0.5, "dirty_pages_last": 10, "left_bytes": left, "reason": ""}
    o.update(kw)
    return o
# one status a poll (the command asks every 0.1 s or so): the Hello's bytes
# sent and nothing known to be left at hello, then 16 MiB of sync
seq = [{"role": "primary", "state": "unprotected"}]
seq += [st("hello", 2000, 0, 0)] * 12
seq += [st("syncing", i * MiB // 3, 16 * MiB - i * MiB // 3, 0) for i in range(48)]
seq += [st("protected", 17 * MiB, 40960, 5)] * 12
seq += [st("migrated", 17 * MiB, 0, 6, migration_downtime_ms=1.5, migration_total_ms=7200.0)]
json.dump({"status json": seq, "migrate": ["ok migrating to the destination\n"]}, open(sys.argv[1], "w"))
PY
agent() {   # NAME: a stand-in source at $tmp/NAME.ctl
	python3 tests/fake_agent.py "$tmp/$1.ctl" "$tmp/script.json" "$tmp/$1.requests" &
	for _ in $(seq 100); do [ -S "$tmp/$1.ctl" ] && return; sleep 0.05; done
	fail "the stand-in agent did not start"
}
# on_tty NAME COLS: migrate from the stand-in NAME on a terminal of COLS columns
on_tty() {
	agent "$1"
	python3 tests/pty_run.py "$2" "$tmp/$1.raw" "$BIN" migrate --control "$tmp/$1.ctl" --to 127.0.0.1:1 \
		--insecure || fail "migrate on a $2-column terminal: exit $?: $(tr '\r' '\n' <"$tmp/$1.raw" | tail -3)"
}
# frames RAW WIDTH: checks the lines drawn (python; prints what it saw)
frames() {
	python3 - "$@" <<'PY'
import re, sys
raw = open(sys.argv[1], "rb").read().decode(errors="replace")
width = int(sys.argv[2])
lines = [l for l in re.split(r"[\r\n]", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)) if l.strip()]
long = [l for l in lines if len(l) > width]
assert not long, "%d lines longer than %d columns, e.g. %d: %r" % (len(long), width, len(long[0]), long[0])
frames = [l for l in lines if re.match(r"[a-z-]+ +\[[#.]{20}\]", l)]
assert len(frames) >= 6, "the progress line was drawn %d times: %r" % (len(frames), lines)
hello = [l for l in frames if l.startswith("hello")]
assert hello and not any("#" in l for l in hello), "the bar at hello: %r" % hello
if width >= 79:
    for l in frames:
        m = re.search(r"\[([#.]{20})\] round \S+ +([0-9.]+) / ([0-9.]+) MiB +([0-9]+) %", l)
        assert m, "a frame without its share: %r" % l
        pct = int(m.group(4))
        assert abs(m.group(1).count("#") - pct / 5) <= 1, "bar and share disagree: %r" % l
        if l.startswith("hello"):
            assert pct == 0, l
    assert any(re.search(r"\[#{3,}\.{3,}\]", l) for l in frames if l.startswith("syncing")), \
        "no part-filled bar in the sync: %r" % frames
elif width < 40:
    assert all(" round " not in l for l in frames), "a field beyond the width kept: %r" % frames
summary = [l for l in lines if l.startswith("migrated in ")]
assert summary and re.search(r"downtime 1.500 ms", summary[0]), "no summary: %r" % lines[-3:]
print("   %d frames, longest line %d; e.g. %r" % (len(frames), max(map(len, lines)), frames[len(frames) // 2]))
PY
}

# 1.
export COLUMNS=300
on_tty wide 80
frames "$tmp/wide.raw" 79 || fail "80 columns: $(tr '\r' '\n' <"$tmp/wide.raw" | head -c 1200)"
ok "1. 80 columns: every line within 79, an empty bar at hello, the share after, a summary"

# 2.
on_tty narrow 40
frames "$tmp/narrow.raw" 39 || fail "40 columns: $(tr '\r' '\n' <"$tmp/narrow.raw" | head -c 1200)"
ok "2. 40 columns: fields dropped from the right, the state and the bar kept"

# 3.
COLUMNS=50 on_tty nosize 0
frames "$tmp/nosize.raw" 49 || fail "no size, COLUMNS=50: $(tr '\r' '\n' <"$tmp/nosize.raw" | head -c 1200)"
ok "3. a terminal without a size: COLUMNS=50 taken"

# 4.
agent file
"$BIN" migrate --control "$tmp/file.ctl" --to 127.0.0.1:1 --insecure 2>"$tmp/file.err" ||
	fail "migrate, stderr a file: exit $?: $(tail -3 "$tmp/file.err")"
! grep -q $'\r' "$tmp/file.err" || fail "a carriage return in a file: $(cat -A "$tmp/file.err" | head -3)"
[ "$(tail -c 1 "$tmp/file.err" | od -An -c | tr -d ' ')" = '\n' ] || fail "the last line is not ended"
nprog=$(grep -cE '^(hello|syncing|protected) +\[[#.]{20}\] round [0-9]+ +[0-9.]+ / [0-9.]+ MiB +[0-9]+ % +[0-9.]+ MiB/s dirty +[0-9.]+ MiB/s predicted +[0-9.]+ ms throttle +[0-9]+ % [0-9]+ s$' "$tmp/file.err")
[ "$nprog" -ge 6 ] || fail "$nprog whole progress lines in the file: $(head -c 800 "$tmp/file.err")"
grep -q '^migrated in 7.200 s: downtime 1.500 ms, 17.0 MiB sent, 6 epochs' "$tmp/file.err" ||
	fail "no summary in the file: $(tail -2 "$tmp/file.err")"
[ "$(grep -c . "$tmp/file.err")" = $((nprog + 1)) ] || fail "other lines in the file: $(cat "$tmp/file.err")"
ok "4. stderr a file: $nprog progress lines, whole and ended, then the summary"

# 5.
agent pipe
python3 - "$BIN" migrate --control "$tmp/pipe.ctl" --to 127.0.0.1:1 --insecure --json <<'PY' ||
import json, os, subprocess, sys, time
t0 = time.monotonic()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
buf, objs, reads = b"", [], 0
while True:
    data = os.read(p.stdout.fileno(), 65536)
    if not data:
        break
    buf += data
    *done, buf = buf.split(b"\n")
    reads += bool(done)
    objs += [(time.monotonic() - t0, json.loads(l)) for l in done]
assert p.wait() == 0, p.returncode
assert len(objs) >= 7 and objs[-1][1]["summary"], objs[-1:]
assert objs[0][0] <= 1.5, "the first object after %.2f s" % objs[0][0]
# the last progress object and the summary may come together
assert reads >= len(objs) - 1, "%d objects in %d reads" % (len(objs), reads)
print("   %d objects in %d reads, the first after %.2f s" % (len(objs), reads, objs[0][0]))
PY
	fail "migrate --json into a pipe"
ok "5. --json into a pipe: the first object within 1.5 s, each in a read of its own"
exit 0
