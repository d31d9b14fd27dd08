#!/usr/bin/env bash
# sys_secondary_loss with a witness (issues 25 and 27): a one-step primary
# with --witness and its secondary under the same key; the secondary killed
# mid-epoch, the primary withdraws its vouch (K/standby none) and runs on
# unprotected; `understudy protect` attaches a new secondary, lent the
# host's witness: K/standby names the new standby's token (never the dead
# one's), and when the primary is killed -9 the new secondary wins K/owner
# and counts on from the last reply the client saw. A real etcd on loopback
# (tests/lib.sh start_etcd).
set -u
cd "$(dirname "$0")/.." && . tests/lib.sh
need_kvm
test_tmp
start_etcd "$tmp/etcd"
seed=${UNDERSTUDY_SEED:-$(date +%s)}
python3 tests/secondary_loss.py --seed "$seed" --witness "$ETCD_EP" || fail "secondary loss mid-epoch with a witness"
ok "secondary lost mid-epoch with a witness: vouch withdrawn, a new secondary protected and vouched for, which won the key and took over (seed $seed)"
