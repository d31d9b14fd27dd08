#!/usr/bin/env python3
"""Planned switchover (understudy switchover): downtime and bytes per swap,
beside an epoch's pause measured on the same pair in the same run (the
reference: a switchover costs one final epoch plus a round trip, so its
downtime should be within ~2 ms of one pause on loopback) and beside the
guest's RAM (the reference for bytes: a resync would send about that much).

A real pair on 127.0.0.1 (--insecure TCP), the counter guest (64 MiB), a
client doing incr every 10 ms through whichever side is primary. SWAPS
switchovers back and forth; for each: the downtime the old primary measured
(its pause -> the new primary's word), and the bytes the new primary sent
from the switch until its first acknowledged epoch and over the next 0.5 s.

A benchmark, not a test: it prints figures and exits 0 unless a run could not
be made at all. usage: bench_switchover.py [--swaps N]"""
import json, os, socket, statistics, subprocess, sys, tempfile, threading, time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BIN = os.environ.get("UNDERSTUDY_BIN", os.path.join(ROOT, "build", "understudy"))
HOST = "127.0.0.1"

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_protect import free_port, wait_port   # noqa: E402  (one copy of each)
from figures import figure, pct                   # noqa: E402

RAM = 64 << 20


def status(ctl):
    r = subprocess.run([BIN, "status", "--control", ctl, "--json"], capture_output=True, text=True)
    try:
        return json.loads(r.stdout)
    except ValueError:
        return {}




class Client(threading.Thread):
    """incr every 10 ms on whichever console answers; counts replies."""

    def __init__(self):
        super().__init__(daemon=True)
        self.port, self.replies, self.stop = None, 0, False

    def run(self):
        while not self.stop:
            try:
                with socket.create_connection((HOST, self.port), timeout=2) as s:
                    f = s.makefile("rwb", buffering=0)
                    while not self.stop:
                        f.write(b"incr\n")
                        if not f.readline():
                            break
                        self.replies += 1
                        time.sleep(0.01)
            except OSError:
                time.sleep(0.02)


def main():
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        print("bench_switchover: SKIP: /dev/kvm not usable here")
        return 0
    swaps = 20
    if "--swaps" in sys.argv:
        swaps = int(sys.argv[sys.argv.index("--swaps") + 1])
    tmp = tempfile.mkdtemp()
    side = {n: {"port": free_port(), "con": free_port(), "ctl": os.path.join(tmp, n + ".ctl")}
            for n in "ab"}
    procs = [subprocess.Popen([BIN, "secondary", "--listen", "%s:%d" % (HOST, side["b"]["port"]),
                               "--console", "tcp:%s:%d" % (HOST, side["b"]["con"]), "--insecure",
                               "--failover-timeout-ms", "1000", "--control", side["b"]["ctl"]],
                              stderr=open(os.path.join(tmp, "b.log"), "w"))]
    wait_port(side["b"]["port"])
    procs.append(subprocess.Popen([BIN, "primary", "--guest", "counter", "--mem", "64M", "--peer",
                                   "%s:%d" % (HOST, side["b"]["port"]), "--console",
                                   "tcp:%s:%d" % (HOST, side["a"]["con"]), "--insecure",
                                   "--timeout-ms", "1000", "--control", side["a"]["ctl"]],
                                  stderr=open(os.path.join(tmp, "a.log"), "w")))
    try:
        for _ in range(100):
            if status(side["a"]["ctl"]).get("state") == "protected":
                break
            time.sleep(0.1)
        else:
            raise SystemExit("the pair did not protect")
        client = Client()
        client.port = side["a"]["con"]
        client.start()
        cur, other = "a", "b"
        downs, pauses, first_bytes, half_s_bytes = [], [], [], []
        time.sleep(1)
        for _ in range(swaps):
            pauses.append(status(side[cur]["ctl"]).get("pause_p50_us", 0) / 1e3)
            out = subprocess.run([BIN, "switchover", "--control", side[cur]["ctl"], "--listen",
                                  "%s:%d" % (HOST, side[cur]["port"]), "--json"],
                                 capture_output=True, text=True)
            if out.returncode:
                raise SystemExit("switchover failed: " + out.stderr + out.stdout)
            downs.append(json.loads(out.stdout)["switch_downtime_ms"])
            client.port = side[other]["con"]
            for _ in range(200):
                st = status(side[other]["ctl"])
                if st.get("state") == "protected" and st.get("acked", 0) > 0:
                    break
                time.sleep(0.005)
            first_bytes.append(st.get("bytes_sent", 0))
            time.sleep(0.5)
            half_s_bytes.append(status(side[other]["ctl"]).get("bytes_sent", 0))
            cur, other = other, cur
        client.stop = True
        p50d, p99d, p50p = statistics.median(downs), pct(downs, 99), statistics.median(pauses)
        print("switchover downtime over %d swaps: p50 %.3f ms, p99 %.3f ms (min %.3f, max %.3f)"
              % (swaps, p50d, p99d, min(downs), max(downs)))
        print("  reference: epoch pause p50 on the same pair %.3f ms; downtime - pause = %.3f ms "
              "(goal <= 2 ms)" % (p50p, p50d - p50p))
        figure("switchover downtime p50", p50d, "ms", "epoch pause p50, same pair", p50p,
               goal="downtime - pause <= 2 ms", met=p50d - p50p <= 2, runs=swaps)
        figure("switchover bytes until the new primary's first ACK p50", statistics.median(first_bytes),
               "bytes", "guest RAM (what a resync sends)", 64 << 20)
        print("bytes sent by the new primary up to its first ACK: p50 %.0f KiB (max %.0f KiB); "
              "over its first 0.5 s: p50 %.0f KiB" % (statistics.median(first_bytes) / 1024,
                                                   max(first_bytes) / 1024,
                                                   statistics.median(half_s_bytes) / 1024))
        print("  reference: guest RAM %d KiB (a resync); ratio %.4f" %
              (RAM // 1024, statistics.median(first_bytes) / RAM))
        print("client replies during the run: %d" % client.replies)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


if __name__ == "__main__":
    main()
