#!/usr/bin/env bash
# Prints the names of the tests that need KVM, on one line: the system tests
# that call need_kvm, need_host_kvm or need_linux_kvm (tests/lib.sh) and the unit tests that
# make a VM. tests/run.sh sends these to a nested VM where there is no
# /dev/kvm (tests/nested/run.sh); that runner takes them by default.
# With "linux": only the tests that boot Linux (need_linux_kvm), which go
# there also where /dev/kvm cannot boot Linux (PVM).
cd "$(dirname "$0")/.." || exit 1
if [ "${1:-}" = linux ]; then
	grep -lE '^need_linux_kvm\b' tests/sys_*.sh | xargs -rn1 basename | sed 's/\.sh$//' | tr '\n' ' ' | sed 's/ $//'
	echo
	exit 0
fi
{
	grep -lE '^need_(host_|linux_)?kvm\b' tests/sys_*.sh
	grep -lE 'REQUIRE_KVM|th_vmh?_new|th_kvm_available' tests/test_*.c
} | xargs -n1 basename | sed 's/\.[a-z]*$//' | tr '\n' ' ' | sed 's/ $//'
echo
