#!/usr/bin/env python3
"""What a test-failover drill measures, beside what it stands for: real
pairs on 127.0.0.1 (--insecure), the counter guest (64 MiB), 25 ms epochs.

One trial: a protected pair, a client doing incr on the primary's console
every 20 ms all along, `understudy drill test-failover --seconds S --json`,
then SIGKILL of the primary and the secondary's real takeover.

  RTO: the drill's activation (digest arrival -> clone vCPUs running, less
  the digest) beside the real takeover's resume (its log line "TOOK OVER:
  ... guest resumed from epoch N in X ms": decision -> vCPUs running), the
  reference, measured on the same pair a moment later; the takeover's
  detection (the primary's silence, --failover-timeout-ms) is shown apart.
  Production: the primary's pause p99 during the drill beside the same
  number of pauses right before it (no drill: the reference), as the drill
  report gives them from the primary's own ring of pause times; and the
  longest pause, which holds the RAM digest the drill asked for; the
  standby's apply time and the clone's page copies before each apply (each
  ACK waits for both), before vs during.

A benchmark, not a test: it prints figures and exits 0 unless a run could
not be made at all. usage: bench_drill.py [--trials N] [--seconds S]"""
import argparse, json, os, re, shutil, signal, socket, subprocess, sys, tempfile, threading, time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BIN = os.environ.get("UNDERSTUDY_BIN", os.path.join(ROOT, "build", "understudy"))
HOST = "127.0.0.1"

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_protect import BenchError, free_port, wait_port   # noqa: E402  (one copy of each)
from figures import figure                                    # noqa: E402
TIMEOUT_MS = 300


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def wait_log(path, pattern, timeout_s):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pattern in read(path):
            return
        time.sleep(0.01)
    raise BenchError("%r not in %s after %d s; log ends: %s" % (pattern, path, timeout_s,
                                                               " | ".join(read(path).splitlines()[-3:])))


def median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def spread(v):
    return "%.2f..%.2f" % (min(v), max(v))


class Client(threading.Thread):
    """incr every 20 ms on the primary's console until stopped or the console
    goes away; counts replies and the longest wait for one."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.stop, self.replies, self.max_ms, self.error = port, False, 0, 0.0, None

    def run(self):
        try:
            s = socket.create_connection((HOST, self.port), timeout=10)
            f = s.makefile("rwb", buffering=0)
            last = None
            while not self.stop:
                t = time.monotonic()
                f.write(b"incr\n")
                line = f.readline().decode()
                if not line:
                    return
                n = int(line.split()[0])
                if last is not None and n != last + 1:
                    self.error = "reply %d after %d" % (n, last)
                    return
                last = n
                self.replies += 1
                self.max_ms = max(self.max_ms, (time.monotonic() - t) * 1000)
                time.sleep(0.02)
        except (OSError, ValueError) as e:
            if not self.stop:
                self.error = str(e)


def trial(tmp, k, seconds):
    sport, scon, pcon = free_port(), free_port(), free_port()
    ctl = os.path.join(tmp, "sec%d.ctl" % k)
    slog, plog = os.path.join(tmp, "sec%d.log" % k), os.path.join(tmp, "pri%d.log" % k)
    sec = subprocess.Popen([BIN, "secondary", "--listen", "%s:%d" % (HOST, sport), "--console",
                            "tcp:%s:%d" % (HOST, scon), "--insecure", "--failover-timeout-ms",
                            str(TIMEOUT_MS), "--control", ctl], stderr=open(slog, "w"))
    pri = None
    try:
        wait_port(sport, 20)
        pri = subprocess.Popen([BIN, "primary", "--guest", "counter", "--console", "tcp:%s:%d" % (HOST, pcon),
                                "--peer", "%s:%d" % (HOST, sport), "--insecure", "--timeout-ms",
                                str(TIMEOUT_MS)], stderr=open(plog, "w"))
        wait_log(plog, "protected: secondary holds", 60)
        client = Client(pcon)
        client.start()
        time.sleep(seconds + 1.0)   # the "before" pauses are of the steady state, not the sync
        d = subprocess.run([BIN, "drill", "test-failover", "--control", ctl, "--seconds", str(seconds), "--json"],
                           capture_output=True, text=True, timeout=seconds + 120)
        lines = [l for l in d.stdout.splitlines() if l.strip()]
        if not lines:
            raise BenchError("drill printed nothing: %s" % d.stderr)
        rep = json.loads(lines[-1])
        if rep["verdict"] != "PASS":
            raise BenchError("drill FAIL: %s" % rep["reason"])
        time.sleep(0.3)
        client.stop = True
        client.join(5)
        if client.error:
            raise BenchError("the client saw: %s" % client.error)
        pri.send_signal(signal.SIGKILL)
        pri.wait()
        wait_log(slog, "TOOK OVER", 20)
        m = re.search(r"primary silent for (\d+) ms; guest resumed from epoch \d+ in ([0-9.]+) ms", read(slog))
        if not m:
            raise BenchError("no takeover timing in %s" % slog)
        p = rep["production"]
        return {"drill_rto": rep["rto_ms"], "takeover_resume": float(m.group(2)),
                "takeover_silent": float(m.group(1)), "p99_before": p["pause_p99_before_ms"],
                "p99_during": p["pause_p99_during_ms"], "p50_before": p["pause_p50_before_ms"],
                "p50_during": p["pause_p50_during_ms"], "max_before": p.get("pause_max_before_ms", 0),
                "max_during": p["pause_max_during_ms"], "digest": p["digest_in_pause_ms"],
                "lag_before": p["lag_before_ms"], "lag_max": p["lag_max_during_ms"],
                "apply_p99_before": p.get("apply_p99_before_ms", 0), "apply_p99_during": p.get("apply_p99_during_ms", 0),
                "copy_avg": p.get("clone_copy_avg_ms", 0), "copy_max": p.get("clone_copy_max_ms", 0),
                "mem": rep["memory"]["used_bytes"], "client_max": client.max_ms,
                "client_replies": client.replies, "epochs": rep["epochs"]["applied_during"]}
    finally:
        for proc in (pri, sec):
            if proc and proc.poll() is None:
                proc.kill()
                proc.wait()


def main():
    ap = argparse.ArgumentParser(description="test-failover drill beside a real takeover")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=3)
    args = ap.parse_args()
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        print("bench_drill: SKIP: /dev/kvm not usable here")
        return 0
    if not os.path.exists(BIN):
        print("bench_drill: %s not built" % BIN)
        return 1
    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="bench_drill.")
    runs = []
    for k in range(args.trials):
        try:
            r = trial(tmp, k, args.seconds)
        except (BenchError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
            print("trial %d: not measured: %s" % (k, e))
            continue
        runs.append(r)
        print("trial %d: drill RTO %.3f ms, takeover resume %.3f ms (after %.0f ms of silence); pause p99 "
              "%.3f -> %.3f ms, max %.3f -> %.3f ms (digest %.3f ms); lag %.3f -> max %.3f ms; clone memory "
              "%.2f MiB; client %d replies, longest %.0f ms" % (
                  k, r["drill_rto"], r["takeover_resume"], r["takeover_silent"], r["p99_before"], r["p99_during"],
                  r["max_before"], r["max_during"], r["digest"], r["lag_before"], r["lag_max"],
                  r["mem"] / 1048576.0, r["client_replies"], r["client_max"]))
    if not runs:
        print("bench_drill: could not measure (logs in %s)" % tmp)
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    col = lambda key: [r[key] for r in runs]
    print("== test-failover drill vs real takeover: %d trials, counter guest 64 MiB, 25 ms epochs, loopback, "
          "drill %d s" % (len(runs), args.seconds))
    dr, tr = col("drill_rto"), col("takeover_resume")
    print("RTO drill activation: median %.3f ms (%s) vs takeover resume (reference) median %.3f ms (%s) -> %.1fx, "
          "difference %.3f ms" % (median(dr), spread(dr), median(tr), spread(tr), median(dr) / max(median(tr), 1e-9),
                                 median(dr) - median(tr)))
    figure("drill test-failover RTO (activation) median", median(dr), "ms", "a real takeover's resume",
           median(tr), goal="within a few ms of a real takeover (<= 3 ms apart)",
           met=abs(median(dr) - median(tr)) <= 3, runs=len(dr))
    print("   the takeover also waited %.0f ms (median) of the primary's silence (--failover-timeout-ms %d)" %
          (median(col("takeover_silent")), TIMEOUT_MS))
    b, d = col("p99_before"), col("p99_during")
    print("primary pause p99 during a drill: median %.3f ms (%s) vs the same number of pauses before it "
          "(reference) %.3f ms (%s) -> %.2fx" % (median(d), spread(d), median(b), spread(b),
                                                median(d) / max(median(b), 1e-9)))
    print("   p50 %.3f -> %.3f ms; longest pause %.3f -> %.3f ms; the RAM digest in one pause %.3f ms (%s); "
          "lag %.3f -> max %.3f ms" % (median(col("p50_before")), median(col("p50_during")),
                                       median(col("max_before")), median(col("max_during")),
                                       median(col("digest")), spread(col("digest")), median(col("lag_before")),
                                       median(col("lag_max"))))
    print("standby (what each ACK waits for): apply p99 %.3f -> %.3f ms; the clone's page copies before an apply "
          "%.3f ms on average, %.3f ms at most (median over trials; the first incr after activation copies the "
          "counter's area)" % (median(col("apply_p99_before")), median(col("apply_p99_during")),
                               median(col("copy_avg")), median(col("copy_max"))))
    print("client of the primary: longest wait for a reply over a trial, median %.0f ms (%s)" % (
        median(col("client_max")), spread(col("client_max"))))
    print("clone memory (Private_Dirty of its RAM mapping): median %.2f MiB (%s) of 64 MiB guest RAM" % (
        median(col("mem")) / 1048576.0, spread([m / 1048576.0 for m in col("mem")])))
    print("note: the clone runs on the secondary; here both agents share 2 CPUs, so its vCPU competes with the "
          "primary's (on two hosts it would not)")
    print("bench_drill: %.0f s" % (time.monotonic() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
