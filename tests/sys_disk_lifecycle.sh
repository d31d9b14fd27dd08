#!/usr/bin/env bash
# A VM with a disk through protect, migrate, switchover and snapshot
# (tests/disk_lifecycle.py): the blk guest's self-checking write log goes on
# across each, and the images end up equal where they must.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
seed=${UNDERSTUDY_SEED:-$(date +%s)}
python3 tests/disk_lifecycle.py --seed "$seed" || fail "disk lifecycle (seed $seed)"
ok "disk lifecycle: protect, migrate --with-disk, switchover, snapshot --with-disk (seed $seed)"
