#!/usr/bin/env bash
# The heart of the project: a client of the counter guest sees nothing lost
# when the primary is killed (SIGKILL) or hangs (SIGSTOP) at random moments,
# including during the initial sync and during checkpoint transfers; the
# standby equals the primary at every acknowledged epoch (UNDERSTUDY_VERIFY).
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
seed=${UNDERSTUDY_SEED:-$(date +%s)}
python3 tests/failover.py --trials "${FAILOVER_TRIALS:-50}" --seed "$seed" --signal KILL || fail "SIGKILL trials"
python3 tests/failover.py --trials "${FAILOVER_STOP_TRIALS:-8}" --seed "$((seed + 1))" --signal STOP || fail "SIGSTOP trials"
python3 tests/failover.py --trials "${FAILOVER_LINK_TRIALS:-5}" --seed "$((seed + 2))" --transport tls || fail "TLS trials"
python3 tests/failover.py --trials "${FAILOVER_LINK_TRIALS:-5}" --seed "$((seed + 3))" --transport rdma || fail "RDMA (tcp;ofi_rxm) trials"
ok "failover consistency held (seed $seed)"
