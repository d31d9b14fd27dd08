#!/usr/bin/env bash
# Disk replication under failover (tests/disk_failover.py): the blk guest's
# write log, the primary SIGKILLed at seeded random moments and once in the
# middle of an epoch's disk blocks; after each takeover the guest goes on
# over the secondary's own image, which holds every acknowledged write and
# nothing of an uncommitted epoch; a secondary without --disk, with an image
# of another size or a missing one is refused.
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
seed=${UNDERSTUDY_SEED:-$(date +%s)}
python3 tests/disk_failover.py --seed "$seed" --kills "${DISK_KILLS:-3}" || fail "disk failover (seed $seed)"
ok "disk replication across failovers (seed $seed)"
