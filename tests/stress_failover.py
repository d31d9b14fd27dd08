#!/usr/bin/env python3
"""The stress guest (2 vCPUs, LAPIC timer ticks, live xmm/ymm values, memory
history, TSC and peer checks) protected by a real primary/secondary pair; the
primary is killed at seeded random moments; after the takeover the guest
checks itself ("check" must answer "ok cpus=2 ...") and its clock must have
moved forward by about the time that passed: never backward, never by much
more than the host's own clock (guest "time" before the kill and after the
takeover, against the host's monotonic clock around both requests).
On PVM the guest reads the host's TSC at CPL3, so the clock bound holds by
construction there; on a KVM that virtualizes the TSC it checks that the
restored TSC accounts for the outage.

usage: stress_failover.py [--trials N] [--seed S]"""
import argparse, os, random, re, signal, socket, subprocess, sys, tempfile, time

BIN = os.environ.get("UNDERSTUDY_BIN", os.path.join(os.path.dirname(__file__), "..", "build", "understudy"))
TIMEOUT_MS = 800
SLACK_MS = 50


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_log(path, pattern, seconds):
    end = time.time() + seconds
    while time.time() < end:
        try:
            if pattern in open(path).read():
                return True
        except OSError:
            pass
        time.sleep(0.01)
    return False


def connect(port, seconds):
    end = time.time() + seconds
    while time.time() < end:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=0.5)
        except OSError:
            time.sleep(0.01)
    return None


class Console:
    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def lines(self, seconds):
        """Complete lines arriving within seconds."""
        end, out = time.time() + seconds, []
        while time.time() < end:
            self.sock.settimeout(max(0.001, end - time.time()))
            try:
                d = self.sock.recv(4096)
            except socket.timeout:
                break
            if not d:
                break
            self.buf += d
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                out.append(line.decode())
        return out

    def ask(self, req, prefix, seen, seconds=20):
        """Sends req; returns (reply, host time sent, host time received): the
        first new line starting with prefix (replayed old lines are skipped)."""
        t_send = time.monotonic()
        self.sock.sendall(req.encode() + b"\n")
        end = time.time() + seconds
        while time.time() < end:
            for line in self.lines(0.2):
                if line in seen:
                    continue
                seen.add(line)
                if line.startswith(prefix) or line.startswith("FAIL"):
                    return line, t_send, time.monotonic()
        raise RuntimeError("no answer to %r" % req)


def trial(k, rng, tmp, expect_log):
    sport, scon, pcon = free_port(), free_port(), free_port()
    slog, plog = os.path.join(tmp, "sec%d.log" % k), os.path.join(tmp, "pri%d.log" % k)
    env = dict(os.environ, UNDERSTUDY_VERIFY="1")
    procs = []
    try:
        procs.append(subprocess.Popen([BIN, "secondary", "--listen", "127.0.0.1:%d" % sport, "--console",
                                       "tcp:127.0.0.1:%d" % scon, "--insecure", "--failover-timeout-ms",
                                       str(TIMEOUT_MS)], stderr=open(slog, "w"), env=env))
        if not wait_log(slog, "waiting for a primary", 10):
            raise RuntimeError("secondary never listened")
        pri = subprocess.Popen([BIN, "primary", "--guest", "stress", "--cpus", "2", "--mem", "16M", "--console",
                                "tcp:127.0.0.1:%d" % pcon, "--peer", "127.0.0.1:%d" % sport, "--insecure",
                                "--epoch-ms", "25", "--timeout-ms", "1500"], stderr=open(plog, "w"), env=env)
        procs.append(pri)
        s = connect(pcon, 10)
        if s is None or not wait_log(slog, "first checkpoint applied", 20):
            raise RuntimeError("never protected")
        c, seen = Console(s), set()
        before, _, _ = c.ask("check", "ok", seen)
        if not before.startswith("ok cpus=2"):
            raise RuntimeError("stress guest unhappy before the kill: %s" % before)
        t1, t1_send, t1_recv = c.ask("time", "time", seen)
        time.sleep(rng.uniform(0.0, 0.8))   # the guest runs on, epochs go by
        pri.send_signal(signal.SIGKILL)
        t_kill = time.monotonic()
        if not wait_log(slog, "TOOK OVER", TIMEOUT_MS / 1000 + 10):
            raise RuntimeError("no takeover")
        s2 = connect(scon, 10)
        if s2 is None:
            raise RuntimeError("secondary console never opened")
        c2 = Console(s2)
        c2.lines(0.3)   # acknowledged output replayed
        after, _, _ = c2.ask("check", "ok", seen)
        t2, t2_send, t2_recv = c2.ask("time", "time", seen)
        resumed = re.search(r"resumed from epoch (\d+)", open(slog).read()).group(1)
        verified = re.search(r"(\d+) epochs verified equal to the primary, (\d+) differed", open(slog).read())
        _, tsc1, per_ms = t1.split()
        _, tsc2, _ = t2.split()
        guest_ms = (int(tsc2) - int(tsc1)) / int(per_ms)
        host_min, host_max = (t2_send - t1_recv) * 1000, (t2_recv - t1_send) * 1000
        outage_ms = (t2_send - t_kill) * 1000
        errors = []
        if not after.startswith("ok cpus=2"):
            errors.append("self-check after takeover: %s" % after)
        if guest_ms < 0:
            errors.append("the guest's clock went backward by %.1f ms" % -guest_ms)
        if guest_ms > host_max + SLACK_MS:
            errors.append("the guest's clock moved %.1f ms, more than the %.1f ms that passed" % (guest_ms, host_max))
        if guest_ms < host_min - SLACK_MS:
            errors.append("the guest's clock moved %.1f ms, %.1f ms passed: the outage (%.0f ms) was not "
                          "accounted for" % (guest_ms, host_min, outage_ms))
        if expect_log and expect_log not in open(plog).read():
            errors.append("the primary's log never said %r" % expect_log)
        if not verified or int(verified.group(2)) or not int(verified.group(1)):
            errors.append("standby/primary verification: %s" % (verified.group(0) if verified else "none"))
        print("%s trial %d: resumed from epoch %s, %s; self-check after: %s; guest clock +%.1f ms, host "
              "%.1f..%.1f ms (outage %.0f ms)%s" % (
                  "ok  " if not errors else "FAIL", k, resumed, verified.group(0) if verified else "-",
                  after[:60], guest_ms, host_min, host_max, outage_ms,
                  "" if not errors else " | " + "; ".join(errors)))
        return not errors
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("UNDERSTUDY_SEED", time.time())))
    ap.add_argument("--expect-log", default="", help="a line the primary must log in every trial "
                    "(the mechanism under test was exercised)")
    args = ap.parse_args()
    print("seed %d (--seed to replay), %d trials" % (args.seed, args.trials))
    rng, tmp, bad = random.Random(args.seed), tempfile.mkdtemp(prefix="understudy-stress-"), 0
    for k in range(args.trials):
        try:
            ok = trial(k, rng, tmp, args.expect_log)
        except RuntimeError as e:
            print("FAIL trial %d: %s (logs in %s)" % (k, e, tmp))
            ok = False
        bad += not ok
    print("result: stress guest over failover: %d trials, %d failed" % (args.trials, bad))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
