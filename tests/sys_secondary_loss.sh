#!/usr/bin/env bash
# The secondary killed in the middle of an epoch (proven by its log): the
# primary runs on unprotected with the guest unharmed and says so in status;
# a new secondary attached with `understudy protect` protects it again, and
# takes over with the guest intact when the primary is then killed -9
# (failed on the code before issue 27's host layer: the one-step primary
# took no protect; make check-mutants: refuse_reprotect).
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
seed=${UNDERSTUDY_SEED:-$(date +%s)}
python3 tests/secondary_loss.py --seed "$seed" || fail "secondary loss mid-epoch"
ok "secondary lost mid-epoch: primary unharmed, protected again by a new secondary, which took over (seed $seed)"
