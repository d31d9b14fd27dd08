#!/usr/bin/env bash
# Prints the names of the tests that need KVM, on one line: the system tests
# that call need_kvm or need_host_kvm (tests/lib.sh) and the unit tests that
# make a VM. tests/run.sh sends these to a nested VM where there is no
# /dev/kvm (tests/nested/run.sh); that runner takes them by default.
cd "$(dirname "$0")/.." || exit 1
{
	grep -lE '^need_(host_)?kvm\b' tests/sys_*.sh
	grep -lE 'REQUIRE_KVM|th_vmh?_new|th_kvm_available' tests/test_*.c
} | xargs -n1 basename | sed 's/\.[a-z]*$//' | tr '\n' ' ' | sed 's/ $//'
echo
