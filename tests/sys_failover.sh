#!/usr/bin/env bash
# The heart of the project: a client of the counter guest sees nothing lost
# when the primary is killed (SIGKILL) or hangs (SIGSTOP). Kill moments are
# stratified over the protocol's phases (initial sync, mid-transfer of an
# epoch, epoch arrived but not yet applied, idle between epochs) and the
# secondary's log proves which phase each kill hit; every phase gets its
# minimum number of trials (failover.py prints the table). With
# UNDERSTUDY_VERIFY the standby, read back from KVM after every applied
# epoch, must equal the primary's RAM and complete machine state at that
# pause (checkpoint/digest.c). Also over TLS and RDMA (tcp;ofi_rxm), and with
# 16 requests in flight (several output lines per epoch). Verify adds a
# full-RAM CRC and a state read to every pause, so the SIGKILL and TLS sets
# run again without it, at production timing.
set -u
# The budgets (--max-seconds, --max-trials) are limits, not durations: a set
# stops as soon as every required phase has its minimum (a few minutes in
# all here). They are generous because aiming at a phase is luck on a busy
# machine, and a phase short of its minimum fails the test. Not the sync:
# failover.py stops the secondary at its "standby built" line so the sync
# cannot finish before the kill, and a sync already sent whole then (3
# aimed trials) is a stated SKIP with the times from the log.
cd "$(dirname "$0")/.." && . tests/lib.sh
need_host_kvm "a takeover soon after each kill: under the emulator the secondary's loop is busy for seconds applying an epoch, its beats are held back and the primary rightly gives it up before the kill"
seed=${UNDERSTUDY_SEED:-$(date +%s)}
min=${FAILOVER_MIN_PER_PHASE:-4}
# Phases the SIGKILL set with verify must reach. make SAN=1 check (tests/
# run.sh) leaves out apply: under ASan, verify makes the secondary lag an
# epoch or more behind the primary, so a kill aimed just after an epoch
# began arriving finds the next one already sent and lands "inflight"
# (checked all the same, only not counted as apply: 1 of 37 in a SAN run).
kill_require=${FAILOVER_KILL_REQUIRE:-sync,transfer,apply,idle}
fo() { python3 tests/failover.py --seed "$@"; }
fo "$seed" --min-per-phase "$min" --max-seconds 600 --signal KILL --require "$kill_require" ||
	fail "SIGKILL trials"
# A stopped primary's socket still drains what the kernel holds, so an epoch
# is torn only when the stop catches it queued in the process, and one that
# arrives whole is mostly applied before the stop lands: transfer and apply
# are counted, not required (the SIGKILL set requires every phase).
fo "$((seed + 1))" --min-per-phase 2 --max-seconds 480 --signal STOP --require "${FAILOVER_STOP_REQUIRE:-sync,idle}" ||
	fail "SIGSTOP trials"
fo "$((seed + 2))" --min-per-phase 1 --max-seconds 240 --transport tls || fail "TLS trials"
# Over tcp;ofi_rxm an epoch the primary captured often waits in libfabric's
# queues, so where a kill lands is less predictable than over TCP: only the
# initial sync is required here, the other phases are counted when hit (the
# TCP SIGKILL set above requires every phase).
fo "$((seed + 3))" --min-per-phase 1 --trials 12 --max-seconds 300 --transport rdma --require sync ||
	fail "RDMA (tcp;ofi_rxm) trials"
# 16 requests always in flight keep every epoch busy with incrs: no epoch is
# ever idle and nearly every kill tears one; sync and transfer are required.
fo "$((seed + 4))" --min-per-phase 2 --trials 6 --max-seconds 300 --pipeline 16 --require sync,transfer ||
	fail "pipelined trials"
export FAILOVER_VERIFY=0
# Without verify the initial sync takes milliseconds and applying an epoch
# well under one: kills there are counted, not required (the set with verify
# above requires both; here a loaded machine lands 1 in 80 on apply).
fo "$((seed + 5))" --min-per-phase 2 --max-trials 240 --max-seconds 400 --signal KILL \
	--require transfer,idle || fail "SIGKILL trials without verify"
fo "$((seed + 6))" --min-per-phase 1 --max-seconds 240 --transport tls || fail "TLS trials without verify"
# The sets above end epochs at the timer (--min-epoch-ms 25: their phase
# aiming needs a steady period); the default output-triggered epochs, where
# each reply ends its epoch at once, with verify: every kill consistent.
FAILOVER_VERIFY=1 fo "$((seed + 7))" --min-per-phase 1 --trials 20 --max-seconds 300 --signal KILL \
	--min-epoch-ms 2 --require sync,transfer || fail "SIGKILL trials with output-triggered epochs"
ok "failover consistency held in every phase, with and without verify (seed $seed)"
