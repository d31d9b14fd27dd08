#!/usr/bin/env python3
"""Failover false-alarm soak: fast failure detection under load, and the
failover it buys.

1. Soak: a real pair on 127.0.0.1 (--insecure TCP), the dirty guest at
   200 MiB/s over 64 MiB (128 MiB of RAM), 25 ms epochs, the secondary at
   --failover-timeout-ms 50 (the primary at --timeout-ms 100, whose stream
   heartbeat is then every 25 ms), and a CPU hog on every core (a shell busy
   loop each) for SOAK_SECONDS (default 600). Every takeover is spurious:
   the primary was alive. After one, the pair is started again and the soak
   goes on, so the count is over the whole time.
2. Kills: SOAK_KILLS times (default 10) the counter guest on a fresh pair
   with the same timeouts and the same hog; a client does incr through the
   primary's console, then with nothing pending holds a connection to the
   secondary's (bound but not served yet), SIGKILLs the primary and sends
   incr there at once: kill -> first reply is the time until the reply to
   that incr. It must be the next count with the uninterrupted run's digest
   (replayed lines before it must be ones already seen, exactly).

Figures: spurious takeovers (goal 0), kill -> first reply p50 and p99 (goal
<= 60 ms) beside the failover timeout and the beat interval.
Usage: bench_soak.py [--seconds N] [--kills N] [--check]
--check (tests/sys_fast_failover.sh): exit 1 on a spurious takeover, a kill
without a takeover or an inconsistent reply; a benchmark otherwise (exits 0
unless no run could be made)."""
import argparse, os, signal, socket, subprocess, sys, tempfile, time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BIN = os.environ.get("UNDERSTUDY_BIN", os.path.join(ROOT, "build", "understudy"))
HOST = "127.0.0.1"
FAILOVER_MS = 50
PRI_TIMEOUT_MS = 100
DIRTY = "dirty:mb=64,rate_mb=200"

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_protect import free_port, wait_port   # noqa: E402  (one copy of each)
from figures import figure, pct                   # noqa: E402




def wait_text(path, text, seconds):
    end = time.time() + seconds
    while time.time() < end:
        try:
            with open(path) as f:
                if text in f.read():
                    return True
        except OSError:
            pass
        time.sleep(0.02)
    return False


def grep(path, text):
    try:
        with open(path) as f:
            return [l for l in f if text in l]
    except OSError:
        return []


class Hog:
    """A busy loop per core, at the agents' own priority."""

    def __enter__(self):
        self.procs = [subprocess.Popen(["sh", "-c", "while :; do :; done"])
                      for _ in range(os.cpu_count() or 1)]
        return self

    def __exit__(self, *a):
        for p in self.procs:
            p.kill()
            p.wait()


class Pair:
    def __init__(self, tmp, guest, mem, tag):
        self.tmp, self.tag = tmp, tag
        self.sport, self.scon, self.pcon = free_port(), free_port(), free_port()
        self.slog, self.plog = os.path.join(tmp, tag + ".sec.log"), os.path.join(tmp, tag + ".pri.log")
        self.sec = subprocess.Popen([BIN, "secondary", "--listen", "%s:%d" % (HOST, self.sport),
                                     "--console", "tcp:%s:%d" % (HOST, self.scon), "--insecure",
                                     "--failover-timeout-ms", str(FAILOVER_MS)],
                                    stderr=open(self.slog, "w"), stdout=subprocess.DEVNULL)
        wait_port(self.sport)
        self.pri = subprocess.Popen([BIN, "primary", "--guest", guest, "--mem", mem, "--peer",
                                     "%s:%d" % (HOST, self.sport), "--console",
                                     "tcp:%s:%d" % (HOST, self.pcon), "--insecure",
                                     "--timeout-ms", str(PRI_TIMEOUT_MS)],
                                    stderr=open(self.plog, "w"), stdout=subprocess.DEVNULL)
        if not wait_text(self.plog, "protected: secondary holds", 60):
            self.close()
            raise RuntimeError("never protected: see %s" % self.plog)

    def took_over(self):
        return bool(grep(self.slog, "TOOK OVER"))

    def close(self):
        for p in (getattr(self, "pri", None), self.sec):
            if p and p.poll() is None:
                p.kill()
            if p:
                p.wait()


def soak(tmp, seconds):
    """Spurious takeovers over seconds of dirtying under the hog; the lines
    that say why, and the beat interval the primary logged."""
    spurious, why, end, n, beat = 0, [], time.time() + seconds, 0, None
    with Hog():
        while time.time() < end:
            pair = Pair(tmp, DIRTY, "128M", "soak%d" % n)
            n += 1
            try:
                while time.time() < end and not pair.took_over() and pair.pri.poll() is None:
                    time.sleep(0.2)
                if pair.took_over():
                    spurious += 1
                    why += [l.strip() for l in grep(pair.slog, "TOOK OVER")]
                elif pair.pri.poll() is not None:
                    why.append("the primary exited %s: %s" % (pair.pri.returncode,
                                                              open(pair.plog).read()[-300:]))
                for l in grep(pair.plog, "beat side channel"):
                    beat = l.split("every ")[1].split(" ms")[0]
            finally:
                pair.close()
    return spurious, why, beat


def oracle(count):
    out = subprocess.run([BIN, "run", "--guest", "counter", "--console", "stdio"],
                         input=("incr\n" * count + "halt\n").encode(), capture_output=True,
                         timeout=120, check=True).stdout.decode()
    return {int(l.split()[0]): l.split()[1] for l in out.splitlines()}


def lines(sock, deadline):
    buf = b""
    while time.time() < deadline:
        sock.settimeout(max(0.001, deadline - time.time()))
        try:
            data = sock.recv(4096)
        except socket.timeout:
            break
        if not data:
            break
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode(), time.monotonic()


def kill_trial(tmp, k, table, incrs):
    """(kill -> first reply ms, None) or (None, what went wrong)."""
    pair = Pair(tmp, "counter", "64M", "kill%d" % k)
    try:
        with socket.create_connection((HOST, pair.pcon), timeout=10) as c:
            f = c.makefile("rwb", buffering=0)
            last = None
            for _ in range(incrs):
                f.write(b"incr\n")
                last = f.readline().decode().split()
            n = int(last[0])
            if table.get(n) != last[1]:
                return None, "primary: reply %s differs from the uninterrupted run" % last
            s = socket.create_connection((HOST, pair.scon), timeout=5)   # in the backlog
            time.sleep(0.1)      # the epoch of the last reply is long acknowledged
            t0 = time.monotonic()
            os.kill(pair.pri.pid, signal.SIGKILL)
            s.sendall(b"incr\n")
            for line, t in lines(s, time.time() + 10):
                m, d = int(line.split()[0]), line.split()[1]
                if table.get(m) != d:
                    return None, "secondary: reply %r differs from the uninterrupted run" % line
                if m == n + 1:
                    s.close()
                    if not pair.took_over():
                        return None, "a reply without a takeover in the log"
                    took = grep(pair.slog, "TOOK OVER")[0]
                    return (t - t0) * 1e3, took.split("TOOK OVER: ")[1].split(";")[0:2]
                if m > n + 1:
                    return None, "secondary: after %d came %d (lost)" % (n, m)
            s.close()
            return None, "no reply from the secondary within 10 s (took over: %s)" % pair.took_over()
    finally:
        pair.close()


def main():
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        print("bench_soak: SKIP: /dev/kvm not usable here")
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 600)))
    ap.add_argument("--kills", type=int, default=int(os.environ.get("SOAK_KILLS", 10)))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="understudy-soak-")
    print("soak: %s, %.0f s, secondary --failover-timeout-ms %d, primary --timeout-ms %d "
          "(stream heartbeat %d ms), %d-core CPU hog" % (DIRTY, a.seconds, FAILOVER_MS,
                                                          PRI_TIMEOUT_MS, PRI_TIMEOUT_MS // 4,
                                                          os.cpu_count()), flush=True)
    try:
        spurious, why, beat = soak(tmp, a.seconds)
    except RuntimeError as e:
        print("soak could not run: %s" % e)
        return 1 if a.check else 0
    for w in why:
        print("  spurious: %s" % w)
    print("spurious takeovers: %d in %.0f s (beat interval %s ms)" % (spurious, a.seconds, beat),
          flush=True)
    figure("spurious takeovers, %s, %d ms failover timeout, CPU hog, %.0f s" % (DIRTY, FAILOVER_MS,
                                                                                a.seconds),
           spurious, "takeovers", "beat interval %s ms, failover timeout %d ms" % (beat, FAILOVER_MS),
           goal="0", met=spurious == 0)
    table = oracle(40)
    lat, bad = [], []
    with Hog():
        for k in range(a.kills):
            try:
                ms, err = kill_trial(tmp, k, table, 20)
            except (RuntimeError, OSError) as e:
                ms, err = None, str(e)
            if ms is None:
                bad.append(err)
                print("  kill %d: %s" % (k, err), flush=True)
            else:
                lat.append(ms)
                print("  kill %d: first reply %.1f ms after the kill (%s)" % (k, ms, ";".join(err)),
                      flush=True)
    if lat:
        print("kill -> first reply: p50 %.1f ms, p99 %.1f ms over %d kills (failover timeout %d "
              "ms, stream heartbeat %d ms, beat %s ms)" % (pct(lat, 50), pct(lat, 99), len(lat),
                                                          FAILOVER_MS, PRI_TIMEOUT_MS // 4, beat))
        for p in (50, 99):
            figure("kill -> first reply p%d, counter, %d ms failover timeout, CPU hog" % (p, FAILOVER_MS),
                   pct(lat, p), "ms", "failover timeout (ms)", float(FAILOVER_MS), goal="<= 60 ms",
                   met=pct(lat, p) <= 60)
    if a.check and (spurious or bad or not lat):
        print("FAIL: %d spurious takeover(s), %d bad kill(s)%s" % (spurious, len(bad),
              "; logs kept in " + tmp))
        return 1
    if bad or spurious:
        print("logs kept in %s" % tmp)
    else:
        subprocess.run(["rm", "-rf", tmp])
    return 0


if __name__ == "__main__":
    sys.exit(main())
