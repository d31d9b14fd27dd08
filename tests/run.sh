#!/usr/bin/env bash
# Runs every test of the project and ends with one line:
#   N passed, N failed, N skipped
# - $BUILD/tests/test_*     cmocka unit and KVM tests (one binary per module)
# - $BUILD/fuzz/*-replay     fuzz targets replaying their saved corpus
# - tests/sys_*.sh           system tests: real processes; exit 0 pass, 77 skip
# A skip is never silent: a whole test skips with exit 77 (cmocka: skip()),
# a part of a test that cannot run prints a line "SKIP: <reason>" and is
# counted as a skip besides the test's pass; every reason is listed at the end.
# Exit status is non-zero when anything failed.
# ONLY="test_machine sys_kv fuzz lint" runs those alone (names as listed
# below; "fuzz" is every fuzz replay): a subset, e.g. for tests/nested/.
# SAN=1 (make SAN=1 check, BUILD=build/san): everything, the agents the
# system tests start included, runs with ASan + UBSan and any report fails
# the test that was running (see san_reports below).
set -u
BUILD=${BUILD:-build}
cd "$(dirname "$0")/.." || exit 1
export UNDERSTUDY_BIN=$PWD/$BUILD/understudy
pass=0 fail=0 skip=0 failed_names=() skip_reasons=()
log_dir=$BUILD/test-logs
mkdir -p "$log_dir"

# A sanitizer report stops the process (halt_on_error, abort_on_error) and
# goes to a file of its own, $san_dir/{asan,ubsan}.<exe>.<pid>, not stderr:
# an agent's stderr often ends in a temporary file its test deletes, and a
# test may kill the agent or not look at how it ended. So after every test
# run.sh looks in $san_dir itself; a report there fails that test.
# detect_leaks=1: the agents free what they hold when they exit normally
# (killed ones are not checked: LSan runs at exit).
san_dir=$PWD/$log_dir/san
if [ "${SAN:-}" = 1 ]; then
	rm -rf "$san_dir" "$log_dir"/*.san && mkdir -p "$san_dir" || exit 1
	export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:log_path=$san_dir/asan:log_exe_name=1"
	export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:log_path=$san_dir/ubsan:log_exe_name=1"
	# Slack for timing the sanitizers change (each knob says why where it is read).
	export FAILOVER_KILL_REQUIRE=${FAILOVER_KILL_REQUIRE:-sync,transfer,idle}   # sys_failover.sh
	# Under ASan a stopped primary's last epoch is mostly still in flight:
	# SIGSTOP kills aimed at idle land "inflight" (0 of 36 once); counted, not required.
	export FAILOVER_STOP_REQUIRE=${FAILOVER_STOP_REQUIRE:-sync}
fi
# $1 test name: 0 when no sanitizer report appeared since the last call,
# else 1, with the reports moved to $log_dir/$1.san and their start shown.
san_reports() {
	local f found=1
	[ "${SAN:-}" = 1 ] || return 0
	for f in "$san_dir"/*; do
		[ -f "$f" ] || continue
		found=0
		{ echo "== $f"; cat "$f"; } >>"$log_dir/$1.san"
		rm -f "$f"
	done
	[ $found = 1 ] && return 0
	echo "    sanitizer report(s), in $log_dir/$1.san:"
	grep -E 'ERROR: |runtime error|SUMMARY' "$log_dir/$1.san" | head -10 | sed 's/^/    | /'
	return 1
}

# No usable /dev/kvm here (a kernel that is itself a guest, a container):
# the tests that need KVM (tests/kvm_tests.sh) run after the others inside
# a Linux VM under QEMU's emulator, whose nested KVM gives them one
# (tests/nested/run.sh), and their counts join these. Not inside that VM
# itself, not under SAN=1 (its build is not sanitized), not with NESTED=0
# (then they skip here, each saying why).
# A /dev/kvm that cannot boot Linux (PVM: no vmx/svm): the tests that boot
# Linux (need_linux_kvm) go there all the same.
nested=
if [ -z "${UNDERSTUDY_NESTED:-}" ] && [ "${NESTED:-1}" != 0 ] && [ "${SAN:-}" != 1 ]; then
	if ! { [ -r /dev/kvm ] && [ -w /dev/kvm ]; }; then
		nested=" $(tests/kvm_tests.sh) "
	elif ! grep -qwE 'vmx|svm' /proc/cpuinfo; then
		nested=" $(tests/kvm_tests.sh linux) "
	fi
fi

# wanted NAME: the test is in $ONLY (or there is no $ONLY)
wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
# here NAME: wanted, and runs on this host, not in the nested VM
here() { wanted "$1" && [[ "$nested" != *" $1 "* ]]; }

count_cmocka() {   # $1 name, $2 log, $3 exit status
	local p f s
	p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$2" | tail -1)
	f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$2" | tail -1)
	s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$2" | tail -1)
	if [ -z "$p" ] && [ -z "$f" ]; then   # crashed before its summary
		fail=$((fail + 1)); failed_names+=("$1 (exit $3, no summary)"); return
	fi
	pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0})); skip=$((skip + ${s:-0}))
	[ "${f:-0}" -gt 0 ] && failed_names+=("$1")
	grep -E '^\[  (FAILED|SKIPPED) \] [a-z_]' "$2" | sed 's/^/    /'
	# a skipped cmocka test prints its reason on a SKIP line before skip()
	while IFS= read -r line; do skip_reasons+=("$1: $line"); done < <(grep -E 'SKIP' "$2" | grep -v '^\[')
	if [ "${s:-0}" -gt 0 ] && ! grep -E 'SKIP' "$2" | grep -qv '^\['; then
		skip_reasons+=("$1: $s test(s) skipped without a reason")
	fi
	if [ "$3" != 0 ] && [ "${f:-0}" = 0 ]; then
		fail=$((fail + 1)); failed_names+=("$1 (exit $3)")
	fi
	return 0
}

for t in "$BUILD"/tests/test_*; do
	[ -x "$t" ] || continue
	n=$(basename "$t")
	here "$n" || continue
	echo "== $n"
	fail0=$fail
	CMOCKA_MESSAGE_OUTPUT=stdout timeout "${TEST_TIMEOUT:-900}" "$t" >"$log_dir/$n.log" 2>&1
	rc=$?
	if [ "$rc" = 77 ]; then   # the whole binary cannot run here
		skip=$((skip + 1))
		skip_reasons+=("$n: $(grep -m1 SKIP "$log_dir/$n.log" || echo "exit 77 without a reason")")
		continue
	fi
	count_cmocka "$n" "$log_dir/$n.log" "$rc"
	[ "$rc" != 0 ] && tail -30 "$log_dir/$n.log" | sed 's/^/    | /'
	san_reports "$n" || [ $fail != "$fail0" ] || { fail=$((fail + 1)); failed_names+=("$n (sanitizer)"); }
done

for t in "$BUILD"/fuzz/*-replay; do
	[ -x "$t" ] || continue
	n=$(basename "$t" -replay)
	wanted fuzz || continue
	echo "== fuzz replay $n"
	fail0=$fail
	if timeout 300 "$t" "tests/fuzz/corpus/${n#fuzz_}" >"$log_dir/$n.log" 2>&1; then
		pass=$((pass + 1)); tail -1 "$log_dir/$n.log" | sed 's/^/    /'
	else
		fail=$((fail + 1)); failed_names+=("$n"); tail -20 "$log_dir/$n.log" | sed 's/^/    | /'
	fi
	san_reports "$n" || [ $fail != "$fail0" ] || { fail=$((fail + 1)); failed_names+=("$n (sanitizer)"); }
done

if wanted lint; then
	echo "== lint (layering, include and call cycles)"
	if python3 tests/lint_deps.py "$BUILD" >"$log_dir/lint.log" 2>&1; then
		pass=$((pass + 1)); tail -1 "$log_dir/lint.log" | sed 's/^/    /'
	else
		fail=$((fail + 1)); failed_names+=("lint"); sed 's/^/    | /' "$log_dir/lint.log"
	fi
fi

for t in tests/sys_*.sh; do
	[ -f "$t" ] || continue
	n=$(basename "$t" .sh)
	here "$n" || continue
	echo "== $n"
	start=$(date +%s)
	# The control sockets of agents started without --control go to a
	# directory of the test's own (UNDERSTUDY_RUN_DIR), not /run/understudy:
	# a test never meets another's VMs, nor the host's.
	run_dir=$(mktemp -d /tmp/understudy-run.XXXXXX)
	UNDERSTUDY_RUN_DIR=$run_dir timeout "${TEST_TIMEOUT:-3000}" bash "$t" >"$log_dir/$n.log" 2>&1
	rc=$?
	rm -rf "$run_dir"
	# a sanitizer report from any process the test started fails it
	san_reports "$n" || rc="$rc, sanitizer report"
	case $rc in
	0)
		pass=$((pass + 1)); grep -E '^(ok|PASS|result)' "$log_dir/$n.log" | tail -8 | sed 's/^/    /'
		while IFS= read -r line; do   # parts that could not run
			skip=$((skip + 1)); skip_reasons+=("$n: $line")
		done < <(grep -E '^SKIP' "$log_dir/$n.log")
		;;
	77)
		skip=$((skip + 1))
		skip_reasons+=("$n: $(grep -m1 SKIP "$log_dir/$n.log" || echo "exit 77 without a reason")")
		;;
	*) fail=$((fail + 1)); failed_names+=("$n (exit $rc)"); tail -40 "$log_dir/$n.log" | sed 's/^/    | /' ;;
	esac
	echo "    ($(( $(date +%s) - start )) s)"
done

# The nested VM: its runner prints the inner tests/run.sh's report; its
# closing line's counts, skip reasons and failed names join ours.
# nested_start LIST VMDIR ACCEL TIMEOUT [CPU [NCPUS]]: runs LIST in a nested VM
# whose files are in VMDIR (NESTED_ACCEL=ACCEL if not empty,
# NESTED_TIMEOUT=TIMEOUT, NESTED_CPU=CPU and NESTED_CPUS=NCPUS if given), its
# log in $log_dir/VMDIR's name.log, what it says of the VM in .say and its
# exit status in .rc beside: nested_report reads them.
nested_log() { echo "$log_dir/$(basename "$1" | sed 's/^nested-vm/nested/').log"; }
nested_start() {
	local list=$1 vm=$2 nlog rc try
	nlog=$(nested_log "$2")
	rm -f "$nlog.rc" "$nlog.say"
	{
		echo "== nested KVM (no /dev/kvm that can run these here): $(echo $list | wc -w) tests in a VM under QEMU's emulator${3:+ (-accel $3)}"
		# A VM that froze or whose kernel died (exit 75 or 76,
		# tests/nested/run.sh) gets one successor. If that one dies too,
		# the emulator could not run the list here: each of its tests is
		# skipped, saying so.
		for try in 1 2; do
			env ONLY="$list" BUILD="$BUILD/nested" NESTED_VM="$vm" NESTED_TIMEOUT="$4" NESTED_BUILT=1 \
				${3:+NESTED_ACCEL=$3} ${5:+NESTED_CPU=$5} ${6:+NESTED_CPUS=$6} tests/nested/run.sh >"$nlog" 2>&1
			rc=$?
			[ "$rc" = 75 ] || [ "$rc" = 76 ] || break
			grep -E '^(FROZE|CRASHED|== )' "$nlog" | tail -2 | sed 's/^/    /'
			cp "$nlog" "${nlog%.log}-died$try.log"
			[ "$try" = 1 ] && echo "    once more, in a fresh VM (the dead one's log: ${nlog%.log}-died$try.log)"
		done
		echo "$rc" >"$nlog.rc"
	} >"$nlog.say" 2>&1
}
# nested_report LIST VMDIR: the counts, skips and failures of nested_start's run.
nested_report() {
	local list=$1 vm=$2 nlog rc last why np nf ns f n line
	nlog=$(nested_log "$2")
	cat "$nlog.say"
	rc=$(cat "$nlog.rc" 2>/dev/null || echo "no status")
	if [ "$rc" = 75 ] || [ "$rc" = 76 ]; then
		why=$(grep -m1 -E '^(FROZE|CRASHED)' "$nlog" | cut -d: -f1)
		for n in $list; do
			skip=$((skip + 1))
			skip_reasons+=("$n: QEMU's emulator failed twice under it ($why both times; logs ${nlog%.log}-died1.log, -died2.log), no verdict")
		done
		echo "    (nested VM's logs: $vm/out/test-logs, console: $vm/console.log)"
		return
	fi
	awk '/^(skipped:|why |failed: |[0-9]+ passed, )/ { exit } on; /^nested: / { on = 1; print }' "$nlog" |
		sed 's/^/    /'
	last=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$nlog" | tail -1)
	if [ "$rc" = 77 ]; then   # no VM can be made here: each test skips
		why=$(grep -m1 '^SKIP' "$nlog")
		for n in $list; do
			skip=$((skip + 1)); skip_reasons+=("$n: no /dev/kvm here, and no nested VM: ${why#SKIP: }")
		done
	elif [ -z "$last" ]; then
		fail=$((fail + 1)); failed_names+=("nested (exit $rc, no summary)")
		tail -20 "$nlog" | sed 's/^/    | /'
	else
		read -r np _ nf _ ns _ <<<"${last//,/}"
		pass=$((pass + np)); fail=$((fail + nf)); skip=$((skip + ns))
		while IFS= read -r line; do skip_reasons+=("(nested) ${line#    }"); done < <(
			sed -n '/^skipped:$/,/^[^ ]/p' "$nlog" | grep '^    ')
		f=$(sed -n 's/^failed: //p' "$nlog" | tail -1)
		[ -n "$f" ] && failed_names+=("(nested) $f")
		[ "$nf" -gt 0 ] && sed -n '/^why /,/^failed: /p' "$nlog" | grep -v '^failed: '
		[ "$rc" != 0 ] && [ "$nf" = 0 ] && { fail=$((fail + 1)); failed_names+=("nested (exit $rc)"); }
	fi
	echo "    (nested VM's logs: $vm/out/test-logs, console: $vm/console.log)"
}
# The tests that boot Linux run in a VM of their own with a TCG thread per
# vCPU (NESTED_LINUX_ACCEL, default tcg): under the default single thread a
# Linux guest of QEMU there did not reach its init in 15 minutes, with a
# thread per vCPU it powered off after 50 s (tests/linux_qemu.sh).
list=$(for n in $nested; do wanted "$n" && echo "$n"; done | tr '\n' ' ')
linux=" $(tests/kvm_tests.sh linux) " plain= lin=
# When both VMs run, a few plain tests run in the Linux VM too
# (NESTED_BALANCE): its own six were done 15 minutes before the plain VM's
# 57 (CI on 2026-12-06: Linux VM 11:12, plain 11:28), and these two long
# ones (sys_kv 226 s, sys_ocf 168 s there) even the two out: about 26
# minutes each. Each VM's emulator takes one host core, so a test runs no
# slower there. (With sys_hooks too, a CI beside three other nested VMs ran
# the Linux VM into its 40-minute bound.)
balance=" ${NESTED_BALANCE-sys_kv sys_ocf} "
for n in $list; do
	if [[ "$linux" == *" $n "* ]]; then lin="$lin $n"; else plain="$plain $n"; fi
done
if [ -n "${lin// /}" ] && [ -n "${plain// /}" ]; then
	for n in $plain; do
		[[ "$balance" == *" $n "* ]] || continue
		lin="$lin $n" plain=$(echo " $plain " | sed "s/ $n / /")
	done
fi
# Their time bounds (NESTED_TIMEOUT, NESTED_LINUX_TIMEOUT, seconds): 45 and
# 40 minutes, well over what a run takes here (about 30 and 25 minutes side
# by side), so that even with a frozen VM's successor make check ends
# within 90 minutes.
# The two VMs run side by side: the plain one's emulator is one thread
# (thread=single), the Linux one has one vCPU, so each takes one of the two
# host cores (one after the other, they made CI 52 minutes; side by side
# the plain one's 30 minutes bound it). The tree is built for them once,
# first (tests/nested/run.sh builds nothing then: NESTED_BUILT=1).
if [ -n "${list// /}" ]; then
	echo "== build ($BUILD/nested, guests with IOPL 3, for the nested VMs)"
	if ! make -s -j"$(nproc)" BUILD="$BUILD/nested" GUEST_IOPL=3 check-build >"$log_dir/nested-build.log" 2>&1; then
		sed 's/^/    | /' "$log_dir/nested-build.log" | tail -20
		echo "failed: nested build"; exit 1
	fi
fi
# The Linux VM has one vCPU (NESTED_LINUX_CPUS): with two, its own kernel
# died under the emulator's SVM in 3 of some 12 runs on 2026-12-05 (CI's
# among them) and a Linux guest triple-faulted once early in a boot; with
# one there is no second emulated CPU to race, the tests took no longer
# (boot 143 s, failover 257 s) and used one host core.
lin_pid=
if [ -n "${lin// /}" ]; then
	nested_start "${lin# }" "$BUILD/nested/nested-vm-linux" "${NESTED_LINUX_ACCEL:-tcg}" \
		"${NESTED_LINUX_TIMEOUT:-2400}" "${NESTED_LINUX_CPU:-}" "${NESTED_LINUX_CPUS:-1}" &
	lin_pid=$!
fi
[ -n "${plain// /}" ] && nested_start "${plain# }" "$BUILD/nested/nested-vm" "" "${NESTED_TIMEOUT:-2700}"
[ -n "$lin_pid" ] && wait "$lin_pid"
[ -n "${plain// /}" ] && nested_report "${plain# }" "$BUILD/nested/nested-vm"
[ -n "${lin// /}" ] && nested_report "${lin# }" "$BUILD/nested/nested-vm-linux"

if [ ${#skip_reasons[@]} -gt 0 ]; then
	echo "skipped:"
	printf '    %s\n' "${skip_reasons[@]}"
fi
if [ ${#failed_names[@]} -gt 0 ]; then
	# The lines that say why, again at the end: a CI log is often read
	# from its tail only.
	for n in "${failed_names[@]}"; do
		n=${n%% *}
		[ -f "$log_dir/$n.log" ] || continue
		echo "why $n failed (whole log: $log_dir/$n.log):"
		grep -E '^(FAIL|not ok)|BELOW MINIMUM|^result|^[A-Za-z_]+: |^\[  (FAILED|ERROR)|: error: ' \
			"$log_dir/$n.log" | tail -12 | cut -c1-300 | sed 's/^/    | /'
	done
	echo "failed: ${failed_names[*]}"
fi
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
