#!/usr/bin/env bash
# The stress guest (2 vCPUs, LAPIC timer, AVX, memory history) protected by a
# real primary/secondary pair and taken over at random moments: its
# self-check passes after every takeover, the standby equals the primary at
# every acknowledged epoch, and the guest's clock moves forward by about the
# time that passed across the failover (never backward, never much more).
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
seed=${UNDERSTUDY_SEED:-$(date +%s)}
python3 tests/stress_failover.py --trials "${STRESS_FAILOVER_TRIALS:-5}" --seed "$seed" || fail "stress guest failover"
ok "stress guest: self-check and clock held over every takeover (seed $seed)"
