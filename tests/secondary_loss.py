#!/usr/bin/env python3
"""The secondary is killed in the middle of an epoch (it had begun receiving
or applying it: proven by its log, "epoch N: begins" with no "epoch N:
output" after it). The primary must notice, run on unprotected with the
guest unharmed (the client's conversation goes on with the uninterrupted
run's replies, nothing lost or repeated), and report it in status. Then a
new secondary is started (another address: the primary's --peer is dead)
and `understudy protect` attaches it to the running primary, which must
become protected by it. Then the primary is killed -9: the new secondary
must take over with the guest's state intact (the counter goes on from the
last reply the client saw: nothing lost that a client saw, replays exact).

With --witness HOST:PORT (an etcd the caller started) all three agents name
that witness and one key. The etcd keys are read at each step: K/standby
names the first secondary's token while it protects, "none" once the
primary gave it up, then the token the primary vouched for when `protect`
attached the new secondary (the host lends its witness to that engine),
never the dead one's again; the new secondary takes over only by winning
K/owner, a transaction that requires K/standby to be its own token.

usage: secondary_loss.py [--seed S] [--witness HOST:PORT]"""
import argparse, os, random, re, signal, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import failover as fo  # noqa: E402
from commit_order import nested  # noqa: E402

# The silence bounds: the primary's 500 ms and the secondary's 800 ms on a
# host's KVM; in the nested VM, where QEMU's emulator stalls an agent for a
# second or more, a bound that short gives up a live peer before the kill.
PRI_TIMEOUT_MS, SEC_TIMEOUT_MS = nested((500, 800), (3000, 5000))
# The witness lease (--witness): as sys_migrate_handover_witness's, for the
# same reason (an agent stalled past a shorter lease is fenced).
LEASE_MS = nested(1000, 5000)
# How long one reply may take: an incr rewrites 16 MiB, a whole epoch to
# send and acknowledge, which in the nested VM (etcd beside it with a
# witness) took over 5 s once; the replies' values are the property.
REPLY_S = nested(5.0, 30.0)
VOUCHED = "the witness vouches for the standby (token "
TESTS = os.path.dirname(os.path.abspath(__file__))


def etcd_get(ep, key):
    """K's value at the witness ("" if absent), read by tests/lib.sh's etcd_get."""
    out = subprocess.run(["bash", "-c", '. "$1/lib.sh" && etcd_get "$2" "$3"', "-", TESTS, ep, key],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError("cannot read %s at etcd %s: %s" % (key, ep, out.stderr.strip()[-200:]))
    return out.stdout.strip()


def incr(c, k, where, slowest):
    """k increments, one at a time, each answered within REPLY_S; the
    replies checked; slowest[0] keeps the longest wait for one (s)."""
    for i in range(k):
        t0 = time.time()
        c.send(1)
        while c.pending:
            if not c.read_lines(REPLY_S):
                raise RuntimeError("no reply from %s within %.0f s (incr %d of %d, last reply %d)" % (
                    where, REPLY_S, i + 1, k, c.last()))
        slowest[0] = max(slowest[0], time.time() - t0)
    if c.errors:
        raise RuntimeError("; ".join(c.errors[:3]))


def vouched_tokens(plog):
    """The tokens the primary's log says the witness vouched for, in order."""
    return re.findall(re.escape(VOUCHED) + r"([^)]*)\)", plog.poll())


def wait_vouched(plog, count, seconds):
    end = time.time() + seconds
    while time.time() < end:
        toks = vouched_tokens(plog)
        if len(toks) >= count:
            return toks
        time.sleep(0.05)
    raise RuntimeError("the witness never vouched for standby %d: %s" % (count, plog.poll()[-300:]))


def show_tail(path, lines):
    """The end of an agent's log, for a failure's report."""
    try:
        tail = open(path, errors="replace").read().splitlines()[-lines:]
    except OSError:
        return
    print("  -- last lines of %s:" % os.path.basename(path))
    for line in tail:
        print("  | " + line[:300])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=int(os.environ.get("UNDERSTUDY_SEED", time.time())))
    ap.add_argument("--attempts", type=int, default=12)
    ap.add_argument("--witness", metavar="HOST:PORT", help="an etcd all the agents name as their witness")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    print("seed %d (--seed to replay)" % args.seed)
    fo.GUEST = "counter:area_mb=16,dense=1"   # 16 MiB epochs: long to receive and apply
    table = fo.oracle(200)
    tmp = tempfile.mkdtemp(prefix="understudy-secloss-")
    for attempt in range(args.attempts):
        r = run_attempt(args, rng, table, tmp, attempt)
        if r is not None:
            return r
    print("FAIL: no kill landed mid-epoch in %d attempts" % args.attempts)
    return 1


def run_attempt(args, rng, table, tmp, attempt):
    """One try: 0 or 1 (the verdict), None when the kill missed mid-epoch."""
    sport, scon, pcon = fo.free_port(), fo.free_port(), fo.free_port()
    spath, ppath = os.path.join(tmp, "sec%d.log" % attempt), os.path.join(tmp, "pri%d.log" % attempt)
    pctl, sctl = os.path.join(tmp, "pri%d.ctl" % attempt), os.path.join(tmp, "sec%d.ctl" % attempt)
    key = "secloss-%d-%d" % (args.seed, attempt)   # a key of its own per try
    wit = ["--witness", "etcd:" + args.witness, "--witness-key", key,
           "--lease-ms", str(LEASE_MS)] if args.witness else []
    takeover_s = 10 + 2 * SEC_TIMEOUT_MS / 1000 + (2 * LEASE_MS / 1000 if args.witness else 0)
    sec_args = [fo.BIN, "secondary", "--listen", "127.0.0.1:%d" % sport, "--console", "tcp:127.0.0.1:%d" % scon,
                "--insecure", "--failover-timeout-ms", str(SEC_TIMEOUT_MS), "--control", sctl] + wit
    env = dict(os.environ, UNDERSTUDY_LOG="debug")
    sec = subprocess.Popen(sec_args, stderr=open(spath, "w"), env=env)
    slog = fo.Log(spath)
    procs = [sec]
    try:
        if slog.wait(["waiting for a primary"], 10) is None:
            raise RuntimeError("secondary never listened")
        pri = subprocess.Popen([fo.BIN, "primary", "--guest", fo.GUEST, "--console", "tcp:127.0.0.1:%d" % pcon,
                                "--peer", "127.0.0.1:%d" % sport, "--insecure", "--epoch-ms", "25",
                                "--timeout-ms", str(PRI_TIMEOUT_MS), "--control", pctl] + wit,
                               stderr=open(ppath, "w"))
        procs.append(pri)
        plog = fo.Log(ppath)
        c = fo.Client(table)
        slowest = [0.0]
        c.attach(fo.connect(pcon, time.time() + 10))
        if slog.wait(["first checkpoint applied"], 20) is None:
            raise RuntimeError("never protected")
        tok1 = None
        if args.witness:
            tok1 = wait_vouched(plog, 1, 30)[0]
            owner, standby = etcd_get(args.witness, key + "/owner"), etcd_get(args.witness, key + "/standby")
            if not owner.startswith("primary ") or not owner.endswith("pid %d" % pri.pid):
                raise RuntimeError("%s/owner is %r, want the primary (pid %d)" % (key, owner, pri.pid))
            if standby != tok1:
                raise RuntimeError("%s/standby is %r while the first secondary protects, want its token %r" % (
                    key, standby, tok1))
        # Aim: the primary captured an epoch with an incr in it (4 MiB that
        # does not compress) and it is not acknowledged: the secondary is
        # receiving or applying it. Kill the secondary a few ms later.
        fire_at, end = None, time.time() + 10
        while time.time() < end:
            if fire_at is None and c.seen:
                st = fo.control(pctl)
                if st.get("dirty_pages_last", 0) >= 1000 and st["epoch"] > st["acked"]:
                    fire_at = time.time() + rng.uniform(0.0, 0.003)
            if fire_at and time.time() >= fire_at:
                break
            if c.pending < 1:
                c.send(1)
            c.read_lines(0.002)
        sec.send_signal(signal.SIGKILL)
        sec.wait()
        sl = fo.SecLog(slog.poll())
        nb, na = max(sl.begins), max(sl.applied_rel)
        where = "epoch %d begun, %d applied" % (nb, na)
        if nb == na:
            print("     attempt %d: the kill came after epoch %d was applied: not mid-epoch, again" % (
                attempt, na))
            return None
        # The primary notices and runs on unprotected.
        if plog.wait(["UNPROTECTED"], 5 + 2 * PRI_TIMEOUT_MS / 1000) is None:
            raise RuntimeError("the primary did not notice the secondary's death")
        st = fo.control(pctl)
        if st.get("state") != "unprotected":
            raise RuntimeError("primary status after the loss: %s" % st)
        if args.witness:
            # The dead one's vouch is withdrawn before held output leaves.
            if plog.wait(["the witness no longer vouches for the standby"], 30) is None:
                raise RuntimeError("the primary never withdrew the lost standby's vouch")
            standby = etcd_get(args.witness, key + "/standby")
            if standby != "none":
                raise RuntimeError("%s/standby is %r after the loss, want none" % (key, standby))
        before = c.last()
        incr(c, 5, "the unprotected primary", slowest)
        if c.last() != before + 5 and not (c.last() == before + 6):
            raise RuntimeError("counter went %d -> %d over 5 incr" % (before, c.last()))
        # A new secondary, on another address, comes up waiting.
        sport2, scon2 = fo.free_port(), fo.free_port()
        sctl2, spath2 = sctl + ".2", spath + ".2"
        sec2_args = [fo.BIN, "secondary", "--listen", "127.0.0.1:%d" % sport2,
                     "--console", "tcp:127.0.0.1:%d" % scon2, "--insecure",
                     "--failover-timeout-ms", str(SEC_TIMEOUT_MS), "--control", sctl2] + wit
        sec = subprocess.Popen(sec2_args, stderr=open(spath2, "w"))
        procs.append(sec)
        slog2 = fo.Log(spath2)
        if slog2.wait(["waiting for a primary"], 10) is None:
            raise RuntimeError("the new secondary did not listen")
        if fo.control(sctl2).get("state") != "waiting":
            raise RuntimeError("new secondary: %s" % fo.control(sctl2))
        # The running primary is protected again, by the new one.
        for _ in range(20):   # "not now" while the goodbye to the dead one is under way
            prot = subprocess.run([fo.BIN, "protect", "--control", pctl, "--peer", "127.0.0.1:%d" % sport2,
                                   "--insecure", "--epoch-ms", "25", "--timeout-ms", str(PRI_TIMEOUT_MS),
                                   "--handshake-timeout-ms", "10000"],
                                  capture_output=True, text=True, timeout=180)
            if prot.returncode == 0 or "not now" not in prot.stderr:
                break
            time.sleep(0.5)
        if prot.returncode != 0:
            raise RuntimeError("understudy protect on the primary exited %d: %s" % (
                prot.returncode, (prot.stderr or prot.stdout).strip()[-300:]))
        st2 = fo.control(pctl)
        if st2.get("state") != "protected" or st2.get("peer") != "127.0.0.1:%d" % sport2:
            raise RuntimeError("primary after protect: state %r peer %r" % (st2.get("state"), st2.get("peer")))
        if slog2.wait(["first checkpoint applied"], 20) is None:
            raise RuntimeError("the new secondary holds no checkpoint")
        vouch = ""
        if args.witness:
            tok2 = wait_vouched(plog, 2, 30)[1]
            standby = etcd_get(args.witness, key + "/standby")
            if standby != tok2 or tok2 in ("none", tok1):
                raise RuntimeError("%s/standby is %r after protect (vouched %r; the lost one's %r)" % (
                    key, standby, tok2, tok1))
            fencing = fo.control(pctl).get("fencing", "")
            if "key %s" % key not in fencing or "not vouched for" in fencing or "vouched for" not in fencing:
                raise RuntimeError("primary fencing after protect: %r" % fencing)
            vouch = "; %s/standby %s -> none -> %s" % (key, tok1, tok2)
        incr(c, 10, "the primary while the new secondary protects it", slowest)
        # The primary dies: the new secondary takes over from the last
        # epoch it holds, and every reply the client saw is in it.
        seen = c.last()
        pri.send_signal(signal.SIGKILL)
        pri.wait()
        if slog2.wait(["TOOK OVER"], takeover_s) is None:
            raise RuntimeError("the new secondary did not take over: %s" % slog2.poll()[-300:])
        if args.witness:
            if "won the witness key" not in slog2.poll():
                raise RuntimeError("the new secondary took over without winning the witness key")
            owner = etcd_get(args.witness, key + "/owner")
            if not owner.startswith("secondary ") or not owner.endswith("pid %d" % sec.pid):
                raise RuntimeError("%s/owner after the takeover is %r, want the new secondary (pid %d)" % (
                    key, owner, sec.pid))
            vouch += "; %s/owner %r" % (key, owner)
        s2 = fo.connect(scon2, time.time() + 10)
        if s2 is None:
            raise RuntimeError("the new secondary's console never opened after TOOK OVER")
        c.attach(s2)
        while c.read_lines(0.5):
            pass                      # what it replays (acknowledged output) first
        incr(c, 5, "the new secondary after its takeover", slowest)
        if c.last() != seen + 5:
            raise RuntimeError("the counter went %d -> %d over 5 incr after the takeover: the guest's "
                               "state is not what the client saw" % (seen, c.last()))
        print("ok   secondary killed mid-epoch (%s); the primary ran on unprotected, the counter went on "
              "consistently (%d -> %d); `protect` attached a new secondary (protected by %s); the primary "
              "killed -9 at %d: the new secondary took over and counts on to %d (%d replayed; slowest reply "
              "%.1f s)%s" % (where, before, before + 5, st2.get("peer"), seen, c.last(), c.replayed, slowest[0],
                            vouch))
        print("result: secondary loss mid-epoch after %d attempt(s)%s: primary unharmed, protected again "
              "by a new secondary, which took over" % (attempt + 1, " with a witness" if args.witness else ""))
        return 0
    except RuntimeError as e:
        print("FAIL attempt %d: %s (logs in %s)" % (attempt, e, tmp))
        for path, lines in ((ppath, 30), (spath, 8), (spath + ".2", 15)):
            show_tail(path, lines)
        return 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()


if __name__ == "__main__":
    sys.exit(main())
