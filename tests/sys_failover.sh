#!/usr/bin/env bash
# The heart of the project: a client of the counter guest sees nothing lost
# when the primary is killed (SIGKILL) or hangs (SIGSTOP) at random moments,
# including during the initial sync and during checkpoint transfers.
# Trials run twice: with UNDERSTUDY_VERIFY (the standby, read back from KVM
# after every applied epoch, equals the primary's RAM and complete machine
# state at that pause: checkpoint/digest.c), and without it, because verify
# adds a full-RAM CRC and a state read to every pause and so runs with other
# timing than production.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
seed=${UNDERSTUDY_SEED:-$(date +%s)}
for verify in 1 0; do
	mode=$([ $verify = 1 ] && echo "with verify" || echo "without verify")
	s=$((seed + 10 * (1 - verify)))
	export FAILOVER_VERIFY=$verify
	python3 tests/failover.py --trials "${FAILOVER_TRIALS:-25}" --seed "$s" --signal KILL || fail "SIGKILL trials $mode"
	python3 tests/failover.py --trials "${FAILOVER_STOP_TRIALS:-4}" --seed "$((s + 1))" --signal STOP || fail "SIGSTOP trials $mode"
	python3 tests/failover.py --trials "${FAILOVER_LINK_TRIALS:-3}" --seed "$((s + 2))" --transport tls || fail "TLS trials $mode"
	python3 tests/failover.py --trials "${FAILOVER_LINK_TRIALS:-3}" --seed "$((s + 3))" --transport rdma || fail "RDMA (tcp;ofi_rxm) trials $mode"
	ok "failover consistency held $mode (seed $seed)"
done
