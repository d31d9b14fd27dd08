#!/bin/sh
# make fuzz-run SECONDS=N: runs every libFuzzer build in $BUILD/fuzz (make
# fuzz) for N seconds over a copy of its saved corpus, $JOBS targets at a
# time, and prints per target the executions and the crashes (inputs
# libFuzzer saved as crash-*, leak-*, timeout-* or oom-*), then the totals.
# What a run found stays in $BUILD/fuzz/run/<name>/ (corpus/, the log and
# any crash file) for sorting into tests/fuzz/corpus by hand.
# Exit status: 1 if any target crashed or did not run.
BUILD=${BUILD:-build}
SECS=${SECS:-60}
JOBS=${JOBS:-$(nproc)}
out="$BUILD/fuzz/run"

run_one() {
	n=$1
	d="$out/$n"
	rm -rf "$d" && mkdir -p "$d/corpus" "$d/crashes" || exit 1
	cp "tests/fuzz/corpus/${n#fuzz_}"/ok-* "tests/fuzz/corpus/${n#fuzz_}"/bad-* "$d/corpus/" 2>/dev/null
	"$BUILD/fuzz/$n" -max_total_time="$SECS" -print_final_stats=1 -timeout=10 \
		-artifact_prefix="$d/crashes/" "$d/corpus" >"$d/log" 2>&1
	echo $? >"$d/rc"
}

if [ "$1" = one ]; then
	run_one "$2"
	exit 0
fi

names=$(for f in "$BUILD"/fuzz/fuzz_*; do
	case $f in *-replay) continue ;; esac
	[ -x "$f" ] && basename "$f"
done)
[ -n "$names" ] || { echo "fuzz-run: no libFuzzer builds in $BUILD/fuzz (make fuzz)"; exit 1; }
echo "fuzz-run: $(echo $names | wc -w) targets, ${SECS}s each, $JOBS at a time"
echo $names | tr ' ' '\n' | BUILD=$BUILD SECS=$SECS xargs -P "$JOBS" -n 1 sh "$0" one

fail=0 total=0 total_crash=0
printf '%-16s %14s %8s %8s\n' target execs crashes corpus
for n in $names; do
	d="$out/$n"
	# "#N DONE ..." when the time ran out; the final stats line otherwise.
	execs=$(sed -n 's/^#\([0-9]*\)[[:space:]]*DONE.*/\1/p' "$d/log" | tail -1)
	[ -n "$execs" ] || execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$d/log" | tail -1)
	[ -n "$execs" ] || execs=0
	crashes=$(ls "$d/crashes" | wc -l)
	printf '%-16s %14s %8s %8s\n' "$n" "$execs" "$crashes" "$(ls "$d/corpus" | wc -l)"
	total=$((total + execs))
	total_crash=$((total_crash + crashes))
	if [ "$crashes" -gt 0 ] || [ "$execs" = 0 ]; then
		fail=1
		grep -m1 -E 'ERROR: (AddressSanitizer|libFuzzer|UndefinedBehavior)|runtime error' "$d/log" | sed "s/^/  $n: /"
	fi
done
printf '%-16s %14s %8s\n' total "$total" "$total_crash"
exit $fail
