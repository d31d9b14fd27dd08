#!/usr/bin/env python3
"""What disk replication costs: the blk guest's write log (`log`: per record
one 4 KiB write and two 4 KiB reads, synchronous, on a ring of 256 blocks;
a console line every 256 records, so that output commit is not what is
measured)
run unprotected (`understudy run --disk`) and protected (primary + secondary
with --disk, 127.0.0.1, --insecure, 25 ms epochs), in the same run:

  1. guest disk write throughput protected / unprotected (records/s, MiB/s of
     writes), with --disk-sync commit and ack;
  2. the disk copy's cost in the pause: blocks per epoch and microseconds of
     harvest + pread per epoch (the primary's status), beside the whole
     pause p50.

A benchmark, not a test: it prints figures and exits 0 unless a run could not
be made at all. usage: bench_disk.py [--quick]"""
import json, os, shutil, signal, socket, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_protect import free_port    # noqa: E402  (one copy)
from figures import figure, machine   # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BIN = os.environ.get("UNDERSTUDY_BIN", os.path.join(ROOT, "build", "understudy"))
HOST = "127.0.0.1"
DISK_BYTES = 64 << 20
LOG_CMD = b"log 2048 256 0 0 256\n"     # a console line every 256 records
WARMUP_S, WINDOW_S = 1.0, 4.0


class BenchError(Exception):
    pass




def connect(port, secs=10):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        try:
            return socket.create_connection((HOST, port), timeout=0.5)
        except OSError:
            time.sleep(0.05)
    raise BenchError("console on port %d never opened" % port)


def wait_log(path, text, secs):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        with open(path, errors="replace") as f:
            if text in f.read():
                return True
        time.sleep(0.05)
    return False


class Records(threading.Thread):
    """The newest "w s" record a console printed."""

    def __init__(self, sock):
        super().__init__(daemon=True)
        self.sock, self.top, self.bad, self.stop = sock, -1, None, False

    def run(self):
        buf = b""
        self.sock.settimeout(0.1)
        while not self.stop:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if not data:
                return
            buf += data
            lines = buf.split(b"\n")
            buf = lines.pop()
            for line in lines:
                if line.startswith(b"w "):
                    self.top = int(line[2:])
                elif line.startswith(b"bad") or line.startswith(b"error"):
                    self.bad = line.decode(errors="replace")


def rate(sock):
    """Records per second over WINDOW_S after WARMUP_S."""
    r = Records(sock)
    r.start()
    sock.sendall(LOG_CMD)
    time.sleep(WARMUP_S)
    n0, t0 = r.top, time.monotonic()
    time.sleep(WINDOW_S)
    n1, t1 = r.top, time.monotonic()
    r.stop = True
    if r.bad:
        raise BenchError("the guest said: " + r.bad)
    if n1 <= n0:
        raise BenchError("no records written")
    return (n1 - n0) / (t1 - t0)


def image(tmp, name):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.truncate(DISK_BYTES)
    return path


def unprotected(tmp):
    con = free_port()
    log = open(os.path.join(tmp, "run.log"), "w")
    vm = subprocess.Popen([BIN, "run", "--guest", "blk", "--disk", image(tmp, "u.img"), "--console",
                           "tcp:%s:%d" % (HOST, con)], stderr=log)
    try:
        return rate(connect(con))
    finally:
        vm.send_signal(signal.SIGKILL)
        vm.wait()
        log.close()


def status(ctl):
    out = subprocess.run([BIN, "status", "--control", ctl, "--json"], capture_output=True, timeout=10)
    if out.returncode:
        raise BenchError("status: %s" % out.stderr.decode().strip())
    return json.loads(out.stdout)


def protected(tmp, sync):
    sport, scon, pcon = free_port(), free_port(), free_port()
    ctl = os.path.join(tmp, "pri-%s.ctl" % sync)
    slog_path, plog_path = os.path.join(tmp, "sec-%s.log" % sync), os.path.join(tmp, "pri-%s.log" % sync)
    slog, plog = open(slog_path, "w"), open(plog_path, "w")
    sec = subprocess.Popen([BIN, "secondary", "--listen", "%s:%d" % (HOST, sport), "--console",
                            "tcp:%s:%d" % (HOST, scon), "--insecure", "--failover-timeout-ms", "3000",
                            "--disk", image(tmp, "s.img"), "--disk-sync", sync], stderr=slog)
    pri = None
    try:
        time.sleep(0.3)
        pri = subprocess.Popen([BIN, "primary", "--guest", "blk", "--disk", image(tmp, "p.img"), "--console",
                                "tcp:%s:%d" % (HOST, pcon), "--peer", "%s:%d" % (HOST, sport), "--insecure",
                                "--timeout-ms", "3000", "--epoch-ms", "25", "--control", ctl], stderr=plog)
        if not wait_log(plog_path, "protected: secondary holds", 20):
            raise BenchError("never protected (%s)" % plog_path)
        per_s = rate(connect(pcon))
        return per_s, status(ctl)
    finally:
        for p in (pri, sec):
            if p and p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        slog.close()
        plog.close()


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    global WINDOW_S
    rounds = 3
    if "--quick" in sys.argv:
        WINDOW_S, rounds = 2.0, 1
    if not os.access("/dev/kvm", os.W_OK):
        print("bench_disk: /dev/kvm not usable here: nothing measured")
        return 0
    print("MACHINE " + json.dumps(machine()), flush=True)
    tmp = tempfile.mkdtemp(prefix="understudy-bench-disk-")
    mib = lambda r: r * 4096 / (1 << 20)
    runs = {"none": [], "commit": [], "ack": []}
    stats = {"commit": [], "ack": []}
    try:
        # Interleaved rounds: the machine is shared, a single run moves by tens of percent.
        for k in range(rounds):
            runs["none"].append(unprotected(tmp))
            for sync in ("commit", "ack"):
                per_s, st = protected(tmp, sync)
                runs[sync].append(per_s)
                stats[sync].append(st)
            print("round %d: unprotected %.0f, --disk-sync commit %.0f, ack %.0f records/s" %
                  (k + 1, runs["none"][-1], runs["commit"][-1], runs["ack"][-1]))
    except (BenchError, subprocess.TimeoutExpired, OSError) as e:
        print("bench_disk: %s" % e)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ref = median(runs["none"])
    print("unprotected: median %.0f records/s (%.2f MiB/s of 4 KiB writes, each with two reads)" %
          (ref, mib(ref)))
    for sync in ("commit", "ack"):
        per_s = median(runs[sync])
        print("protected --disk-sync %s: median %.0f records/s (%.2f MiB/s), %.1f%% of unprotected" %
              (sync, per_s, mib(per_s), 100 * per_s / ref))
        figure("guest disk write throughput, protected (--disk-sync %s, 25 ms epochs)" % sync,
               mib(per_s), "MiB/s", reference="the same guest unprotected (understudy run --disk)",
               reference_value=mib(ref), runs=rounds,
               spread=[round(mib(min(runs[sync])), 2), round(mib(max(runs[sync])), 2)])
        sts = stats[sync]
        copy = median([st.get("disk_copy_us_per_epoch", 0) for st in sts])
        blocks = median([st.get("disk_blocks_per_epoch", 0) for st in sts])
        pause = median([st["pause_p50_us"] for st in sts])
        print("   primary: %.1f blocks and %.1f us of disk copy per epoch with blocks, in the pause; "
              "pause p50 %.0f us (medians of the rounds)" % (blocks, copy, pause))
        if sync == "commit":
            figure("disk copy in the pause per epoch (harvest + pread of the dirty blocks)", copy, "us",
                   reference="the whole pause, p50", reference_value=pause, runs=rounds)
            figure("disk blocks per epoch (4 KiB, coalesced)", blocks, "blocks", runs=rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
