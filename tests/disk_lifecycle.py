#!/usr/bin/env python3
"""A VM with a disk through the lifecycle commands, with real processes and
the blk guest's self-checking write log (tests/disk_failover.py says how it
works: "w s" lines leave only after their epoch's ACK, "bad ..." when the
guest finds its image not exactly what it wrote).

Parts (seeded, the seed printed):
 * protect: a VM started by `run --disk` is protected onto a `secondary
   --disk` of its own image (initial sync + epochs), SIGKILLed; the
   secondary takes over and the log goes on without a "bad", past every
   acknowledged record. Then the survivor is protected again onto a third
   host with its own image, killed, and that one takes over too. Each
   standby's image, once stopped, holds the pre-filled blocks and a ring
   at or past every acknowledged record.

usage: disk_lifecycle.py [--seed S] [--parts protect,...]; exit 0 when all hold."""
import argparse, os, random, signal, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import disk_failover as df  # noqa: E402
from disk_failover import BIN, Console, connect, free_port, wait_listen, wait_log  # noqa: E402

errors = df.errors
TIMEOUT_MS = 500


class Procs:
    """Every process a part starts, killed at its end; logs in tmp."""

    def __init__(self, tmp):
        self.tmp, self.procs, self.files = tmp, [], []

    def start(self, label, argv, env=None):
        log = open(os.path.join(self.tmp, label + ".log"), "w")
        self.files.append(log)
        p = subprocess.Popen([BIN] + argv, stderr=log, env=env)
        p.log = log.name
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        for f in self.files:
            f.close()


def empty_image(tmp, name):
    path = os.path.join(tmp, name)
    open(path, "wb").close()
    return path


def secondary(procs, label, img, extra=()):
    """A standby with its own image; returns (proc, listen port, console port, control)."""
    sport, scon = free_port(), free_port()
    ctl = os.path.join(procs.tmp, label + ".ctl")
    p = procs.start(label, ["secondary", "--listen", "127.0.0.1:%d" % sport, "--console",
                            "tcp:127.0.0.1:%d" % scon, "--failover-timeout-ms", str(TIMEOUT_MS),
                            "--insecure", "--disk", img, "--control", ctl] + list(extra))
    if not wait_listen(sport):
        raise RuntimeError("%s did not listen" % label)
    return p, sport, scon, ctl


def run_vm(procs, label, img):
    """`understudy run` of the blk guest on img; returns (proc, console, control)."""
    con = free_port()
    ctl = os.path.join(procs.tmp, label + ".ctl")
    p = procs.start(label, ["run", "--guest", "blk", "--disk", img, "--console", "tcp:127.0.0.1:%d" % con,
                            "--control", ctl])
    end = time.time() + 10
    while not os.path.exists(ctl) and time.time() < end:
        time.sleep(0.05)
    sock = connect(con)
    if sock is None:
        raise RuntimeError("%s: console never opened" % label)
    c = Console(sock)
    c.start()
    return p, c, ctl


def cli(argv, timeout=60):
    r = subprocess.run([BIN] + argv, capture_output=True, timeout=timeout)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


def protect(ctl, port, label):
    rc, out = cli(["protect", "--control", ctl, "--peer", "127.0.0.1:%d" % port, "--insecure"])
    if rc != 0:
        raise RuntimeError("%s: protect exit %d: %s" % (label, rc, out.strip()))


def log_cmd(rng):
    return b"log %d %d 0 %d\n" % (df.RING_SECTOR, df.RING_N, rng.choice((0, 100, 500)))


def kill_and_take_over(victim, con, scon, label, rng):
    """SIGKILL the VM's host at a random moment; the standby's guest goes on.
    Returns (acknowledged top before the kill, the survivor's console)."""
    time.sleep(rng.uniform(0.5, 2.0))
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    acked = con.top
    con.stop = True
    if acked < 0:
        raise RuntimeError("%s: no acknowledged record before the kill" % label)
    sock = connect(scon, 5 + TIMEOUT_MS / 1000)
    if sock is None:
        raise RuntimeError("%s: the standby's console never opened (no takeover)" % label)
    sc = Console(sock)
    sc.start()
    time.sleep(1.5)
    if sc.bad or con.bad:
        errors.append("%s: the guest found its disk wrong after the takeover: %s" % (label, (sc.bad + con.bad)[0]))
    elif sc.top <= acked:
        errors.append("%s: the guest made no progress after the takeover (top %d, acked %d)" % (label, sc.top, acked))
    print("%s: %d records acknowledged before the kill, the guest went on to %d" % (label, acked + 1, sc.top + 1))
    return acked, sc


def part_protect(tmp, rng):
    """run --disk, protect, kill, takeover; then protect the survivor, kill, takeover."""
    procs = Procs(tmp)
    try:
        pimg, s1img, prefill = df.make_images(tmp, rng, rng.choice(("empty", "garbage")))
        s2img = empty_image(tmp, "s2.img")
        vm, con, ctl = run_vm(procs, "prot-run", pimg)
        con.sock.sendall(log_cmd(rng))        # writing before and through the sync
        s1, s1port, s1con, s1ctl = secondary(procs, "prot-sec1", s1img)
        protect(ctl, s1port, "protect")
        if not wait_log(vm.log, "disk: %d non-zero blocks" % len(prefill), 1) and \
           not wait_log(vm.log, "disk:", 0.1):
            errors.append("protect: the VM's log does not show the disk's initial sync")
        acked, sc = kill_and_take_over(vm, con, s1con, "protect: run -> secondary 1", rng)
        # The survivor is protected again, onto its own new standby.
        s2, s2port, s2con, _ = secondary(procs, "prot-sec2", s2img)
        protect(s1ctl, s2port, "re-protect")
        acked2, sc2 = kill_and_take_over(s1, sc, s2con, "protect: secondary 1 -> secondary 2", rng)
        sc2.stop = True
        s2.send_signal(signal.SIGTERM)
        s2.wait(10)
        df.check_image(s2img, prefill, max(acked, acked2), "protect: secondary 2's image")
        s1img_ok = len(errors)
        # secondary 1's image after it was killed: what it wrote as the
        # running VM's own image, at least everything acknowledged by 2.
        df.check_image(s1img, prefill, acked2, "protect: secondary 1's image")
        if len(errors) == s1img_ok:
            print("protect: both standbys' images hold the pre-filled blocks and every acknowledged record")
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        errors.append("protect: %s (logs %s)" % (e, tmp))
    finally:
        procs.close()


PARTS = {"protect": part_protect}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=int(os.environ.get("UNDERSTUDY_SEED", time.time())))
    ap.add_argument("--parts", default=",".join(PARTS))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    print("seed %d (--seed to replay)" % args.seed)
    tmp = tempfile.mkdtemp(prefix="understudy-disklc-")
    for name in args.parts.split(","):
        PARTS[name](tmp, rng)
    print("logs in", tmp)
    for e in errors[:10]:
        print("FAIL:", e)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
