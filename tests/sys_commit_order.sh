#!/usr/bin/env bash
# Output commit by the order of events (tests/commit_order.py): no output of
# epoch N leaves before ACK(N), none of a later epoch while the secondary is
# stopped, every reply's n and digest right; a torn epoch leaves the standby
# at the last acknowledged checkpoint.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
seed=${UNDERSTUDY_SEED:-$(date +%s)}
python3 tests/commit_order.py --seed "$seed" --stops "${COMMIT_STOPS:-3}" || fail "commit order (seed $seed)"
ok "output commit held by order of events (seed $seed)"
