#!/usr/bin/env bash
# The secondary killed in the middle of an epoch (proven by its log): the
# primary runs on unprotected with the guest unharmed and says so in status;
# a restarted secondary comes up waiting. Re-pairing a running primary with a
# new secondary is not supported by the product today: checked as such.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
seed=${UNDERSTUDY_SEED:-$(date +%s)}
python3 tests/secondary_loss.py --seed "$seed" || fail "secondary loss mid-epoch"
ok "secondary lost mid-epoch: primary unharmed, restarted secondary waits (seed $seed)"
