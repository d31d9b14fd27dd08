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
 * migrate: refused without --with-disk and with post-copy (exit 2, the
   destination never contacted); cancelled at --max-time in the middle of
   the disk's copy (--bandwidth 1), the source's log goes on; with
   --with-disk the source exits, the guest's log goes on at the
   destination, and the destination's image is byte for byte the source's
   (the source's is not written after the final pause) but for ring blocks
   holding records newer than the source's newest.
 * switchover (a `primary --disk`), switchover-run (a `run --disk` VM
   protected): a pair with a disk swaps roles and back
   while the log runs; each new primary goes on on its own image (the log
   reads it back before every record) and sends far less than the 4 MiB of
   incompressible blocks a resync would; then the primary is killed and
   its standby (a former primary) takes over on its image.
 * snapshot: `snapshot --with-disk` of the running log guest; `restore
   --disk NEWIMG` writes the saved disk, and the guest goes on over it
   without a "bad"; a truncated file, a flipped byte in a saved block and a
   chain with a diff after a --with-disk snapshot are refused with nothing
   written; --incremental --with-disk exits 2.

usage: disk_lifecycle.py [--seed S] [--parts protect,...]; exit 0 when all hold."""
import argparse, json, os, re, shutil, random, signal, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import disk_failover as df  # noqa: E402
from disk_failover import BIN, Console, connect, free_port, wait_listen, wait_log  # noqa: E402
from commit_order import X, nested  # noqa: E402

errors = df.errors
TIMEOUT_MS = nested(500, 3000)   # 3 s against the nested VM's stalls of a second or more


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
    df.first_ack(con, label)
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
    time.sleep(1.5 * X)     # the guest goes on from the acknowledged state
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


def ring_top(img):
    """The newest record of the ring in an image's bytes (-1: none)."""
    top = -1
    for b in range(df.RING_N):
        blk = img[(256 + b) * 4096:(257 + b) * 4096]
        if blk.count(0) != 4096:
            try:
                top = max(top, int(blk[1:11]))
            except ValueError:
                pass
    return top


def compare_at_switch(simg, dimg, label):
    """The destination's image is the source's at the switch: every block
    equal, but ring blocks the guest rewrote on the destination afterwards
    (records newer than the source's newest). Returns the source's top."""
    with open(simg, "rb") as f:
        s = f.read()
    with open(dimg, "rb") as f:
        d = f.read()
    if len(s) != len(d):
        errors.append("%s: images of %d and %d bytes" % (label, len(s), len(d)))
        return -1
    stop, later = ring_top(s), 0
    for k in range(len(s) // 4096):
        a, b = s[k * 4096:(k + 1) * 4096], d[k * 4096:(k + 1) * 4096]
        if a == b:
            continue
        if 256 <= k < 256 + df.RING_N and b != bytes(4096):
            try:
                n = int(b[1:11])
            except ValueError:
                n = -1
            if n > stop and b == df.record(n, k - 256):
                later += 1
                continue
        errors.append("%s: block %d differs between the source's image and the destination's "
                      "(source's newest record %d)" % (label, k, stop))
        return stop
    print("%s: the destination's image is the source's at the switch (record %d), but for %d of %d ring "
          "blocks the guest wrote there afterwards" % (label, stop, later, df.RING_N))
    if later >= df.RING_N:
        errors.append("%s: every ring block was rewritten after the switch: nothing written "
                      "before it was compared" % label)
    return stop


def part_migrate(tmp, rng):
    """migrate of a VM with a disk: refused without --with-disk (and with
    post-copy), exit 2, nothing changed; cancelled at --max-time, the source
    runs on unharmed; with --with-disk the destination's image is the
    source's at the switch and the guest's log goes on there."""
    procs = Procs(tmp)
    # A ring of 512 blocks (256 .. 767, each record reads it all back first):
    # the guest does not rewrite all of it between the switch and the
    # comparison, so blocks written before the switch are compared too.
    ring_n, df.RING_N = df.RING_N, 512
    try:
        pimg, _, prefill = df.make_images(tmp, rng, "empty", range(1024, 2048))
        vm, con, ctl = run_vm(procs, "mig-run", pimg)
        con.sock.sendall(b"log %d %d 0 %d\n" % (df.RING_SECTOR, df.RING_N, 4000))
        d0, d0port, _, _ = secondary(procs, "mig-dst0", empty_image(tmp, "mig-d0.img"))
        for what, extra in (("without --with-disk", []),
                            ("with post-copy", ["--with-disk", "--postcopy-after", "1"])):
            rc, out = cli(["migrate", "--control", ctl, "--to", "127.0.0.1:%d" % d0port, "--insecure"] + extra)
            if rc != 2 or "disk" not in out:
                errors.append("migrate %s: exit %d, %r (want 2 and why)" % (what, rc, out[-300:]))
            else:
                print("migrate %s: refused (exit 2): %s" % (what, out.strip().splitlines()[-1]))
        time.sleep(0.5)
        with open(d0.log) as f:
            if re.search(r"primary \S+ connected$", f.read(), re.M):
                errors.append("migrate refused: the destination was contacted all the same")
        # Cancelled in the middle of the disk's copy: 4 MiB that does not
        # compress at 1 MiB/s, --max-time 2.
        rc, out = cli(["migrate", "--control", ctl, "--to", "127.0.0.1:%d" % d0port, "--insecure", "--with-disk",
                       "--timeout-ms", str(nested(2000, 6000)), "--bandwidth", "1", "--max-time", "2"])
        if rc == 0 or "cancelled" not in out:
            errors.append("migrate --bandwidth 1 --max-time 2: exit %d, %r (want cancelled)" % (rc, out[-300:]))
        elif wait_log(d0.log, "TOOK OVER", 0.1):
            errors.append("migrate cancelled: the destination took over")
        top = con.top
        time.sleep(1.0 * X)
        if vm.poll() is not None:
            errors.append("migrate cancelled: the source exited %d" % vm.returncode)
        elif con.bad or con.top <= top:
            errors.append("migrate cancelled: the source's guest is harmed (%s, top %d then %d)" %
                          (con.bad[:1], top, con.top))
        else:
            print("migrate cancelled at --max-time: the source's log goes on (%d -> %d records)" % (top + 1, con.top + 1))
        if not wait_log(d0.log, "stood down", 10):
            errors.append("migrate cancelled: the destination did not stand down")
        # The migration.
        dimg = empty_image(tmp, "mig-d1.img")
        d1, d1port, d1con, _ = secondary(procs, "mig-dst1", dimg)
        rc, out = cli(["migrate", "--control", ctl, "--to", "127.0.0.1:%d" % d1port, "--insecure", "--with-disk",
                       "--timeout-ms", str(nested(2000, 6000))], timeout=120)
        if rc != 0:
            raise RuntimeError("migrate --with-disk: exit %d: %s" % (rc, out[-400:]))
        sock = connect(d1con, 5)
        if sock is None:
            raise RuntimeError("the destination's console never opened")
        dc = Console(sock)
        dc.start()
        vm.wait(10)
        acked = con.top
        con.stop = True
        end = time.time() + 3 * X
        while dc.top <= acked + 2 and not dc.bad and time.time() < end:
            time.sleep(0.01)
        d1.send_signal(signal.SIGSTOP)        # its image holds still for the comparison
        dc.stop = True
        if dc.bad or con.bad:
            errors.append("migrate: the guest found its disk wrong: %s" % (dc.bad + con.bad)[0])
        elif dc.top <= acked:
            errors.append("migrate: no progress on the destination (top %d, source's %d)" % (dc.top, acked))
        stop = compare_at_switch(pimg, dimg, "migrate")
        if stop < acked:
            errors.append("migrate: the source's image (newest %d) lacks a record its console showed (%d)" % (stop, acked))
        df.check_image(dimg, prefill, acked, "migrate: the destination's image")
        dn = [l for l in out.splitlines() if "downtime" in l]
        print("migrate --with-disk: %s; the log went from %d to %d records on the destination" %
              (dn[-1].strip() if dn else out.strip().splitlines()[-1], acked + 1, dc.top + 1))
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        errors.append("migrate: %s (logs %s)" % (e, tmp))
    finally:
        df.RING_N = ring_n
        procs.close()


def status(ctl):
    rc, out = cli(["status", "--control", ctl, "--json"], timeout=10)
    try:
        return json.loads(out) if rc == 0 else {}
    except ValueError:
        return {}


def wait_protected(ctl, secs=10):
    end = time.time() + secs * X
    st = {}
    while time.time() < end:
        st = status(ctl)
        if st.get("role") == "primary" and st.get("state") == "protected" and st.get("acked", 0) > 0:
            return st
        time.sleep(0.05)
    raise RuntimeError("%s: not protected: %s" % (ctl, st))


def wait_progress(con, top, secs=5):
    end = time.time() + secs * X
    while con.top <= top + 2 and not con.bad and time.time() < end:
        time.sleep(0.02)
    return con.top > top


def part_switchover(tmp, rng, host="primary"):
    """switchover of a pair with a disk, there and back: each side goes on
    on its own image (no resync: the new primary sends far less than the
    image holds), the log checks itself on each; then the primary is
    killed and the other side takes over on its image too. host: the first
    primary is `primary --disk`, or `run --disk` then `protect`."""
    procs = Procs(tmp)
    tmp = os.path.join(tmp, "sw-" + host)
    os.mkdir(tmp)
    procs.tmp = tmp
    try:
        # 4 MiB that does not compress: a resync of the disk would send it.
        pimg, simg, prefill = df.make_images(tmp, rng, "empty", range(1024, 2048))
        side = {}
        for name in ("a", "b"):
            side[name] = {"port": free_port(), "con": free_port(), "ctl": os.path.join(tmp, "sw-%s.ctl" % name)}
        a, b = side["a"], side["b"]
        b["proc"] = procs.start("sw-b", ["secondary", "--listen", "127.0.0.1:%d" % b["port"], "--console",
                                         "tcp:127.0.0.1:%d" % b["con"], "--failover-timeout-ms", str(TIMEOUT_MS),
                                         "--insecure", "--disk", simg, "--control", b["ctl"]])
        if not wait_listen(b["port"]):
            raise RuntimeError("secondary did not listen")
        if host == "primary":
            a["proc"] = procs.start("sw-a", ["primary", "--guest", "blk", "--disk", pimg, "--console",
                                             "tcp:127.0.0.1:%d" % a["con"], "--peer", "127.0.0.1:%d" % b["port"],
                                             "--insecure", "--timeout-ms", str(TIMEOUT_MS), "--control", a["ctl"]])
        else:
            a["proc"] = procs.start("sw-a", ["run", "--guest", "blk", "--disk", pimg, "--console",
                                             "tcp:127.0.0.1:%d" % a["con"], "--control", a["ctl"]])
            end = time.time() + 10
            while not os.path.exists(a["ctl"]) and time.time() < end:
                time.sleep(0.05)
            protect(a["ctl"], b["port"], "switchover: protect")
        st = wait_protected(a["ctl"], 20)
        # The first protect syncs the disk: the counter the swaps are judged
        # by below sees the prefill here.
        if st.get("disk_sync_blocks", -1) < 1024:
            errors.append("switchover: the first protect synced %s disk blocks, not the 1024 of the prefill"
                          % st.get("disk_sync_blocks"))
        sock = connect(a["con"])
        if sock is None:
            raise RuntimeError("the primary's console never opened")
        con = Console(sock)
        con.start()
        con.sock.sendall(log_cmd(rng))
        if not wait_progress(con, -1):
            raise RuntimeError("the log did not start")
        cur, other = a, b
        for rnd in range(2):
            time.sleep(rng.uniform(0.3, 1.0))
            rc, out = cli(["switchover", "--control", cur["ctl"], "--listen", "127.0.0.1:%d" % cur["port"], "--json"])
            if rc != 0:
                raise RuntimeError("switchover %d: exit %d: %s" % (rnd + 1, rc, out[-300:]))
            acked = con.top
            con.stop = True
            st = wait_protected(other["ctl"])
            synced = st.get("disk_sync_blocks", -1)
            sock = connect(other["con"])
            if sock is None:
                raise RuntimeError("switchover %d: the new primary's console never opened" % (rnd + 1))
            con = Console(sock)
            con.start()
            if not wait_progress(con, acked):
                errors.append("switchover %d: the log did not go on (top %d, acked %d)" % (rnd + 1, con.top, acked))
            if con.bad:
                errors.append("switchover %d: the guest found its disk wrong: %s" % (rnd + 1, con.bad[0]))
            sent = status(other["ctl"]).get("bytes_sent", -1)
            # The swap hands over a standby that holds the disk: no block of it
            # goes again (a resync would send the 1024 of the prefill). Counted
            # by the agent, not judged from bytes, which grow with the guest's
            # own epochs, more the slower the host.
            if synced != 0:
                errors.append("switchover %d: the new primary synced %s disk blocks once protected (%d "
                              "bytes sent by now): a resync" % (rnd + 1, synced, sent))
            print("switchover %d (%s first): log %d -> %d records across the swap, the new primary sent %d bytes" %
                  (rnd + 1, host, acked + 1, con.top + 1, sent))
            cur, other = other, cur
        # cur is a again (primary on pimg), b its standby on simg.
        acked, sc = kill_and_take_over(cur["proc"], con, other["con"], "switchover: kill after the swaps", rng)
        sc.stop = True
        other["proc"].send_signal(signal.SIGTERM)
        other["proc"].wait(10)
        df.check_image(simg, prefill, acked, "switchover: the standby's image")
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        errors.append("switchover: %s (logs %s)" % (e, tmp))
    finally:
        procs.close()


def part_snapshot(tmp, rng):
    """snapshot --with-disk of the log guest; restore --disk NEWIMG writes the
    saved disk, then the guest goes on over it (its log reads the ring back
    before each record); a damaged or truncated file, a chain with diffs and
    --incremental --with-disk are refused and write nothing."""
    procs = Procs(tmp)
    try:
        pimg, _, prefill = df.make_images(tmp, rng, "empty")
        vm, con, ctl = run_vm(procs, "snap-run", pimg)
        con.sock.sendall(log_cmd(rng))
        if not wait_progress(con, 50):
            raise RuntimeError("the log did not start")
        snap, diff = os.path.join(tmp, "snap.full"), os.path.join(tmp, "snap.diff")
        rc, out = cli(["snapshot", "--control", ctl, "--out", snap, "--with-disk"])
        if rc != 0:
            raise RuntimeError("snapshot --with-disk: exit %d: %s" % (rc, out.strip()))
        at = con.top
        rc, out = cli(["snapshot", "--control", ctl, "--out", diff, "--incremental", "--with-disk"])
        if rc != 2:
            errors.append("snapshot --incremental --with-disk: exit %d (want 2): %s" % (rc, out.strip()))
        rc, out = cli(["snapshot", "--control", ctl, "--out", diff, "--incremental"])
        if rc != 0:
            errors.append("snapshot --incremental after --with-disk: exit %d: %s" % (rc, out.strip()))
        time.sleep(0.3)
        vm.send_signal(signal.SIGKILL)
        vm.wait()
        con.stop = True
        with open(snap, "rb") as f:
            data = f.read()
        # Refused, nothing written: truncated, a byte of a block flipped, a chain.
        keep = os.path.join(tmp, "keep.img")
        with open(keep, "wb") as f:
            f.write(b"\x5a" * 4096)
        bad_trunc, bad_flip = os.path.join(tmp, "snap.trunc"), os.path.join(tmp, "snap.flip")
        with open(bad_trunc, "wb") as f:
            f.write(data[:-5000])
        flipped = bytearray(data)
        flipped[len(data) - 32 - 2000] ^= 1          # inside the last block of the disk section
        with open(bad_flip, "wb") as f:
            f.write(bytes(flipped))
        for what, argv, img in (("truncated", [bad_trunc], os.path.join(tmp, "never1.img")),
                                ("a flipped disk byte", [bad_flip], keep),
                                ("a chain after --with-disk", [snap, diff], keep)):
            r = subprocess.run([BIN, "restore"] + argv + ["--disk", img, "--console", "tcp:127.0.0.1:%d" % free_port()],
                               capture_output=True, timeout=30)
            untouched = (not os.path.exists(img)) if img != keep else open(keep, "rb").read() == b"\x5a" * 4096
            if r.returncode == 0 or not untouched:
                errors.append("restore of %s: exit %d, image %s: %r" % (what, r.returncode,
                              "untouched" if untouched else "WRITTEN", r.stderr[-300:]))
            else:
                print("restore of %s: refused, nothing written: %s" % (what, r.stderr.decode().strip().splitlines()[-1]))
        # The restore.
        newimg = os.path.join(tmp, "restored.img")
        rcon = free_port()
        rv = procs.start("snap-restore", ["restore", snap, "--disk", newimg, "--console", "tcp:127.0.0.1:%d" % rcon])
        sock = connect(rcon, 10)
        if sock is None:
            raise RuntimeError("the restored VM's console never opened")
        rc_ = Console(sock)
        rc_.start()
        if not wait_progress(rc_, -1, 5):
            errors.append("restore --with-disk: the log did not go on")
        time.sleep(0.5)
        rc_.stop = True
        if rc_.bad:
            errors.append("restore --with-disk: the guest found its disk wrong: %s" % rc_.bad[0])
        rv.send_signal(signal.SIGKILL)
        rv.wait()
        if not wait_log(rv.log, "non-zero blocks of the saved disk written", 0.1):
            errors.append("restore --with-disk: did not say it wrote the disk")
        df.check_image(newimg, prefill, -1, "restore --with-disk: the restored image")
        print("snapshot --with-disk at record ~%d (%d bytes), restored: the log went on to %d" %
              (at, len(data), rc_.top + 1))
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        errors.append("snapshot: %s (logs %s)" % (e, tmp))
    finally:
        procs.close()


PARTS = {"protect": part_protect, "migrate": part_migrate, "switchover": part_switchover,
         "switchover-run": lambda tmp, rng: part_switchover(tmp, rng, "run"), "snapshot": part_snapshot}


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
    if errors:
        print("logs in", tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)   # a snapshot of 64 MiB among them
    for e in errors[:10]:
        print("FAIL:", e)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
