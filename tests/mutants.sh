#!/usr/bin/env bash
# make check-mutants: proof that the suite notices when the product breaks an
# invariant. Each mutant is a hook, `if (MUTANT(<name>)) ...` (kmod/mutant.h),
# at the exact place the invariant is kept (grep for it): 0 in every build but
# the one made with MUTANT=<name>, where it breaks the invariant. For each one this
# builds the product with it (build/mutant-<name>), runs the tests that guard
# that invariant, and counts the mutant caught when one of them fails. The
# guards must first pass on the unmutated build, else they prove nothing.
# Passes only when every mutant is caught. MUTANTS="a b" runs a subset.
set -u
cd "$(dirname "$0")/.." || exit 1
root=build/mutant
logs=$root-logs
mkdir -p "$logs"

# name | invariant | guarding tests
table="release_early|1 output leaves only after ACK(N)|sys_commit_order
clear_after_copy|3 dirty bit cleared before the copy|test_capture_race test_checkpoint test_snapshot
apply_partial|2 an epoch applies whole or not at all|test_staging sys_commit_order
drop_state_section|4 standby = primary, every piece of state|test_digest sys_commit_order
ack_before_staged|4 standby = last acknowledged checkpoint|sys_commit_order
takeover_while_alive|5 one live copy (no takeover after goodbye)|sys_commit_order sys_protect
console_at_takeover|6 takeover resources acquired at start|sys_takeover_resources
ignore_lease|8 output leaves only while the witness lease is provably valid|sys_witness
takeover_without_key|8 a takeover only after winning the witness key|sys_witness
keep_vouch|8 a standby given up is withdrawn at the witness before output leaves|sys_witness sys_secondary_loss_witness
net_release_early|1 a frame of epoch N leaves only after ACK(N)|sys_virtio_net sys_kv
disk_apply_early|13 disk blocks of epoch N reach the standby's image only at commit of N|sys_disk_failover
silence_wraps|5 no takeover while the peer is heard (a beat newer than the clock read is no silence)|test_beat
precopy_keep_delta|4 a page pre-copied and sent again in one epoch decodes against the last complete checkpoint|sys_stress_failover
resume_forgets_kicks|4 a virtio kick in no checkpoint (read from an ioeventfd, not served) is served when a loaded machine resumes|test_ioevent
serve_while_missing|14 no thread waits on a missing post-copy page holding machine.lock (the I/O thread serves nothing until every page is in)|test_ioevent
refuse_reprotect|11 a primary that lost its secondary is protected again in place (protect), and a later failover keeps every reply|sys_secondary_loss sys_secondary_loss_witness
notify_while_missing|14 no thread waits on a missing post-copy page holding machine.lock (a notify that exits is left to the I/O thread)|test_ioevent
rx_while_missing|14 the loop that places post-copy pages never touches a missing one (a tap frame is dropped meanwhile)|test_ioevent
day_alarm_ignored|the RTC's alarm matches the day of the month in register D (the FADT's DAY_ALRM)|test_platform
divider_reset_runs|the RTC's divider in reset holds the clock; its restart brings the first update half a second later|test_platform"
only=${MUTANTS:-}

# run_test BUILD_DIR TEST LOG: 0 when the test passes
run_test() {
	local b=$1 t=$2 log=$3
	case $t in
	test_*) CMOCKA_MESSAGE_OUTPUT=stdout timeout 600 "$b/tests/$t" >"$log" 2>&1 ;;
	sys_*) UNDERSTUDY_BIN=$PWD/$b/understudy BUILD=$b timeout 900 bash "tests/$t.sh" >"$log" 2>&1 ;;
	esac
}

# why LOG: the first line saying what failed
why() {
	{ grep -m1 -E '^FAIL' "$1" || grep -m1 -E '^ERROR|^\[  ERROR|differs|VERIFY FAILED|Assertion' "$1"; } |
		cut -c1-110
}

tests_of() { echo "$table" | awk -F'|' -v m="$1" '$1 == m { print $3 }'; }
wanted() { [ -z "$only" ] || [[ " $only " == *" $1 "* ]]; }

all_tests=$(echo "$table" | while IFS='|' read -r m _ t; do wanted "$m" && echo "$t"; done | tr ' ' '\n' | sort -u)
bins() {   # make targets for a build dir
	local b=$1 t out="$1/understudy"
	for t in $all_tests; do [[ $t == test_* ]] && out="$out $b/tests/$t"; done
	echo "$out"
}

echo "== baseline: the guards pass without a mutant"
base=$root-none
make -s -j2 BUILD=$base $(bins $base) >"$logs/build-none.log" 2>&1 || { tail -20 "$logs/build-none.log"; exit 1; }
for t in $all_tests; do
	if ! run_test $base "$t" "$logs/none-$t.log" && ! run_test $base "$t" "$logs/none-$t.log"; then
		echo "FAIL: $t fails on the unmutated build (twice): $(why "$logs/none-$t.log")"
		exit 1
	fi
	echo "   $t passes"
done

results=()
missed=0
while IFS='|' read -r m inv guards; do
	wanted "$m" || continue
	b=$root-$m
	echo "== mutant $m"
	files=$(grep -rlF --include='*.c' "MUTANT($m)" kmod machine checkpoint replication net proto primary secondary host)
	if [ -z "$files" ]; then
		echo "FAIL: no MUTANT($m) hook in the product"
		exit 1
	fi
	# Start from the baseline objects; rebuild only what the mutant touches.
	# (the library and binaries are left behind: under .SECONDARY a missing
	# object is remade only for a target that has to be made anyway)
	rm -rf "$b" && mkdir -p "$b" && cp -a "$base/obj" "$base/gen" "$base/guest" "$b/"
	for f in $files; do rm -f "$b/obj/${f%.c}.o"; done
	make -s -j2 BUILD=$b MUTANT=$m $(bins $b) >"$logs/build-$m.log" 2>&1 || { tail -20 "$logs/build-$m.log"; exit 1; }
	caught=no how=""
	for t in $guards; do
		if run_test $b "$t" "$logs/$m-$t.log"; then
			echo "   $t passes: mutant NOT caught by it"
		else
			caught=yes
			[ -n "$how" ] || how="$t: $(why "$logs/$m-$t.log")"
			echo "   $t fails: $(why "$logs/$m-$t.log")"
		fi
	done
	[ $caught = yes ] || missed=$((missed + 1))
	results+=("$(printf '%-21s| %-44s| %-34s| %-6s| %s' "$m" "$inv" "$guards" "$caught" "$how")")
	rm -rf "$b"
done <<<"$table"

echo
printf '%-21s| %-44s| %-34s| %-6s| %s\n' mutant invariant "guarding tests" "caught" "first failure"
for r in "${results[@]}"; do echo "$r"; done
echo
if [ $missed -gt 0 ]; then
	echo "check-mutants: $missed mutant(s) NOT caught: a hole in the suite (logs in $logs)"
	exit 1
fi
echo "check-mutants: all ${#results[@]} mutants caught (logs in $logs)"
