#!/usr/bin/env python3
"""What one more protected VM costs: N idle VMs (the counter guest, 64 MiB
each) protected on one host pair, for N = 1, 4, 16 by default.

For each N: N secondaries and N primaries on 127.0.0.1 (--insecure), named
vm0..vm(N-1), each with its own ports and control sockets; once every pair
is protected, for --seconds (FLEET_SECONDS, default 600) each agent's CPU
time (utime + stime, /proc/PID/stat) and peak RSS (VmRSS, /proc/PID/status)
and each pair's status (the reply to "status json" on its control sockets,
what `understudy status --json` prints) are sampled. Per N it prints:

  - per-VM CPU of the primary and of the secondary, % of one core (median
    over the VMs, min..max), and the pair's sum: goal < 1 % for an idle guest;
  - per-VM peak RSS of each agent in MiB and as a multiple of guest RAM (the
    secondary's holds one copy of the guest: at most ~1x, less where the
    guest never touched its RAM, as an idle one does not);
  - epochs per second per VM against 1000 / --epoch-ms, and the primary's
    stretched epochs (status "stretched") and lag_ms;
  - spurious takeovers: a secondary whose status turned to role primary or
    state unprotected, or whose log says TOOK OVER (goal 0); a primary that
    left "protected" is counted apart;
  - the pair's CPU per committed epoch (ms), the fair comparison when a busy
    host stretches the epochs (fewer epochs, less CPU a second);
  - against N = 1 of the same run: per-VM CPU (a second and an epoch) and
    RSS at N over N = 1 (goal: no growth; "flat" here is within 1.5x for
    CPU, 1.1x for RSS).

A benchmark, not a test: it exits 0 once the runs are made, 1 when one could
not be (a pair never protected, an agent died), 2 on a bad argument, 77 where
there is no usable /dev/kvm. Inside the nested VM of tests/nested/run.sh
(QEMU's emulator) its CPU and time figures mean nothing and 500 ms timeouts
are too short for it: --timeout-ms 5000 there, and with more pairs than its
two vCPUs can run, --handshake-timeout-ms 60000 for the later ones to connect;
and BUILD=build/nested, the tree built for it (its guests with IOPL 3: the
host's build/ faults there, "guest exception 13", and the pair ends).
usage: bench_fleet.py [--n 1,4,16] [--seconds S] [--epoch-ms MS] [--mem SIZE]
                      [--timeout-ms MS] [--handshake-timeout-ms MS] [--interval S]"""
import argparse, json, os, socket, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_protect import HOST, BenchError, free_port, wait_port   # noqa: E402
from figures import figure                                           # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BIN = os.environ.get("UNDERSTUDY_BIN",
                     os.path.join(ROOT, os.environ.get("BUILD", "build"), "understudy"))
GUEST = "counter"
CPU_FLAT, RSS_FLAT = 1.5, 1.1     # "does not grow": N over N = 1 at most this
TICK = os.sysconf("SC_CLK_TCK")


def counts(text):
    """'1,4,16' -> [1, 4, 16]; ValueError names what is wrong."""
    ns = []
    for part in text.split(","):
        if not part.strip().isdigit() or int(part) < 1:
            raise ValueError("%r is not a count of VMs (1 or more)" % part)
        ns.append(int(part))
    return ns


def mib(size):
    """'64M' / '1G' / '65536K' -> MiB."""
    units = {"K": 1 / 1024, "M": 1, "G": 1024}
    if len(size) < 2 or size[-1].upper() not in units or not size[:-1].isdigit():
        raise ValueError("%r is not a size like 64M or 1G" % size)
    return int(size[:-1]) * units[size[-1].upper()]


def cpu_s(pid):
    """utime + stime of pid in seconds (fields 14 and 15 of /proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def status(ctl, timeout_s=30):
    """The agent's "status json" reply on its control socket, as a dict."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout_s)
    try:
        try:
            s.connect(ctl)
        except OSError as e:
            raise BenchError("no answer on %s: %s" % (ctl, e.strerror or e)) from e
        s.sendall(b"status json\n")
        buf = b""
        while not buf.endswith(b"\n"):
            data = s.recv(65536)
            if not data:
                break
            buf += data
    finally:
        s.close()
    return json.loads(buf.decode())


class Pair:
    """Secondary and primary of one named VM; start() returns at once, the
    protection is waited for by the fleet."""

    def __init__(self, tmp, i, a):
        self.name = "vm%d" % i
        self.sctl, self.pctl = (os.path.join(tmp, self.name + s) for s in (".sec.sock", ".pri.sock"))
        self.slog, self.plog = (os.path.join(tmp, self.name + s) for s in (".sec.log", ".pri.log"))
        self.sport, self.scon, self.pcon = free_port(), free_port(), free_port()
        self.a, self.sec, self.pri = a, None, None

    def start_secondary(self):
        self.sec = subprocess.Popen(
            [BIN, "secondary", "--name", self.name, "--listen", "%s:%d" % (HOST, self.sport),
             "--console", "tcp:%s:%d" % (HOST, self.scon), "--insecure", "--control", self.sctl,
             "--failover-timeout-ms", str(self.a.timeout_ms),
             "--handshake-timeout-ms", str(self.a.handshake_ms)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(self.slog, "w"))

    def start_primary(self):
        self.pri = subprocess.Popen(
            [BIN, "primary", "--name", self.name, "--guest", GUEST, "--mem", self.a.mem,
             "--peer", "%s:%d" % (HOST, self.sport), "--console", "tcp:%s:%d" % (HOST, self.pcon),
             "--insecure", "--control", self.pctl, "--epoch-ms", str(self.a.epoch_ms),
             "--timeout-ms", str(self.a.timeout_ms), "--handshake-timeout-ms", str(self.a.handshake_ms)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(self.plog, "w"))

    def protected(self):
        with open(self.plog) as f:
            return "protected: secondary holds" in f.read()

    def took_over(self):
        with open(self.slog) as f:
            return [l.strip() for l in f if "TOOK OVER" in l]

    def tails(self, n=3):
        """The last n lines of each agent's log, for a message."""
        out = []
        for who, log in (("secondary", self.slog), ("primary", self.plog)):
            with open(log) as f:
                out.append("%s log ends: %s" % (who, " | ".join(f.read().strip().splitlines()[-n:])))
        return "; ".join(out)

    def dead(self):
        for who, p, log in (("secondary", self.sec, self.slog), ("primary", self.pri, self.plog)):
            if p is not None and p.poll() is not None:
                with open(log) as f:
                    tail = " | ".join(f.read().strip().splitlines()[-2:])
                return "%s %s exited %d: %s" % (self.name, who, p.returncode, tail)
        return None

    def close(self):
        for p in (self.pri, self.sec):
            if p is not None and p.poll() is None:
                p.kill()
            if p is not None:
                p.wait()


def run_fleet(n, a, tmp):
    """Start n pairs, wait until all are protected, sample for a.seconds;
    per VM: cpu % and peak RSS of each agent, epochs, stretched, takeovers."""
    pairs = [Pair(tmp, i, a) for i in range(n)]
    try:
        for p in pairs:
            p.start_secondary()
        for p in pairs:
            wait_port(p.sport, 30)
        # One primary at a time: N initial syncs at once on two cores can
        # starve a handshake phase past its deadline, which measures the
        # start, not the steady state this is about.
        for p in pairs:
            p.start_primary()
            t0 = time.monotonic()
            end = t0 + a.protect_s
            while not p.protected():
                bad = p.dead()
                if bad:
                    raise BenchError(bad)
                if time.monotonic() > end:
                    raise BenchError("%s not protected after %.0f s; %s" % (p.name, a.protect_s,
                                                                          p.tails()))
                time.sleep(0.1)
            if n > 1:
                print("  %s protected after %.1f s" % (p.name, time.monotonic() - t0), flush=True)
        print("  N=%d: all %d protected; settling %.0f s, then %.0f s of samples"
              % (n, n, a.settle_s, a.seconds), flush=True)
        time.sleep(a.settle_s)
        return sample(pairs, a)
    finally:
        for p in pairs:
            p.close()


def sample(pairs, a):
    procs = [(p, side, proc) for p in pairs for side, proc in (("pri", p.pri), ("sec", p.sec))]
    t0 = time.monotonic()
    cpu0 = {(p.name, side): cpu_s(proc.pid) for p, side, proc in procs}
    st0 = {p.name: status(p.pctl) for p in pairs}
    sec0 = {p.name: status(p.sctl) for p in pairs}
    peak = {(p.name, side): rss_mib(proc.pid) for p, side, proc in procs}
    flips, pri_left = {}, {}
    end = t0 + a.seconds
    while True:
        now = time.monotonic()
        if now >= end:
            break
        time.sleep(min(a.interval, end - now))
        for p in pairs:
            bad = p.dead()
            if bad:
                raise BenchError(bad)
        for p, side, proc in procs:
            peak[(p.name, side)] = max(peak[(p.name, side)], rss_mib(proc.pid))
        for p in pairs:
            s = status(p.sctl)
            if s.get("role") != "secondary" or s.get("state") == "unprotected":
                flips.setdefault(p.name, "secondary turned %s/%s" % (s.get("role"), s.get("state")))
            q = status(p.pctl)
            if q.get("state") != "protected":
                pri_left.setdefault(p.name, "primary %s: %s" % (q.get("state"), q.get("reason")))
    wall = time.monotonic() - t0
    cpu1 = {(p.name, side): cpu_s(proc.pid) for p, side, proc in procs}
    st1 = {p.name: status(p.pctl) for p in pairs}
    sec1 = {p.name: status(p.sctl) for p in pairs}
    vms = []
    for p in pairs:
        took = p.took_over()
        if took:
            flips.setdefault(p.name, took[0])
        vms.append({
            "name": p.name,
            "pri_cpu": 100 * (cpu1[(p.name, "pri")] - cpu0[(p.name, "pri")]) / wall,
            "sec_cpu": 100 * (cpu1[(p.name, "sec")] - cpu0[(p.name, "sec")]) / wall,
            "pri_rss": peak[(p.name, "pri")], "sec_rss": peak[(p.name, "sec")],
            "epochs_s": (st1[p.name]["epoch"] - st0[p.name]["epoch"]) / wall,
            "applied_s": (sec1[p.name]["epoch"] - sec0[p.name]["epoch"]) / wall,
            "stretched": st1[p.name].get("stretched", 0) - st0[p.name].get("stretched", 0),
            "lag_ms": st1[p.name].get("lag_ms", 0.0),
            "link_Bps": (st1[p.name].get("bytes_sent", 0) - st0[p.name].get("bytes_sent", 0)) / wall,
            "B_epoch": (st1[p.name].get("bytes_sent", 0) - st0[p.name].get("bytes_sent", 0)) /
                       max(st1[p.name]["epoch"] - st0[p.name]["epoch"], 1),
        })
    return vms, flips, pri_left, wall


def med(vms, key):
    xs = [v[key] for v in vms]
    return statistics.median(xs), min(xs), max(xs)


def report(n, vms, flips, pri_left, wall, a, base):
    """Print the figures for one N; base: N = 1's per-VM medians (None at N = 1)."""
    ram = mib(a.mem)
    want = 1000.0 / a.epoch_ms
    pc, sc = med(vms, "pri_cpu"), med(vms, "sec_cpu")
    pair = med([dict(v, pair=v["pri_cpu"] + v["sec_cpu"]) for v in vms], "pair")
    pr, sr = med(vms, "pri_rss"), med(vms, "sec_rss")
    ep, ap = med(vms, "epochs_s"), med(vms, "applied_s")
    # CPU per committed epoch: the cost of one more VM when the host is too
    # busy to keep every epoch on time (fewer epochs, less CPU a second).
    per_ep = med([dict(v, c=10 * (v["pri_cpu"] + v["sec_cpu"]) / max(v["epochs_s"], 1e-9))
                  for v in vms], "c")
    stretched = sum(v["stretched"] for v in vms)
    lag = max(v["lag_ms"] for v in vms)
    print("N=%d over %.0f s:" % (n, wall))
    print("  CPU %% of one core per VM, median (min..max): primary %.3f (%.3f..%.3f), "
          "secondary %.3f (%.3f..%.3f), pair %.3f (%.3f..%.3f)" % (pc + sc + pair))
    print("  peak RSS per VM, MiB: primary %.1f (%.1f..%.1f) = %.2fx guest RAM, secondary %.1f "
          "(%.1f..%.1f) = %.2fx guest RAM (%.0f MiB)"
          % (pr + (pr[0] / ram,) + sr + (sr[0] / ram, ram)))
    print("  epochs/s per VM: committed %.2f (%.2f..%.2f), applied %.2f, at --epoch-ms %d: %.0f/s; "
          "stretched %d in all, largest lag_ms %.3f" % (ep + (ap[0], a.epoch_ms, want, stretched, lag)))
    print("  pair CPU per committed epoch: %.3f ms (%.3f..%.3f)" % per_ep)
    bpe, bps = med(vms, "B_epoch"), med(vms, "link_Bps")
    print("  replication link per VM: %.0f bytes per committed epoch (%.0f..%.0f), %.1f KiB/s "
          "(%.1f..%.1f)" % (bpe + tuple(x / 1024 for x in bps)))
    print("  spurious takeovers: %d%s; primaries that left protected: %d%s"
          % (len(flips), "".join("\n    %s: %s" % kv for kv in sorted(flips.items())),
             len(pri_left), "".join("\n    %s: %s" % kv for kv in sorted(pri_left.items()))),
          flush=True)
    what = "N=%d idle %s guests (%s each) on one host pair, %d ms epochs" % (n, GUEST, a.mem,
                                                                                   a.epoch_ms)
    ref = lambda k: ("the same per-VM figure at N=1, same run", base[k] if base else None)
    for key, label, m in (("pair", "pair (primary + secondary) CPU per VM", pair),
                          ("pri", "primary CPU per VM", pc), ("sec", "secondary CPU per VM", sc)):
        r, rv = ref(key)
        goal = met = None
        if key == "pair":
            goal, met = "< 1 % of a core", m[0] < 1.0
        if base and base[key] > 0:
            goal = (goal + "; " if goal else "") + "<= %.1fx N=1" % CPU_FLAT
            met = (met is not False) and m[0] / base[key] <= CPU_FLAT
        figure("%s, %s" % (label, what), m[0], "% of a core", r if base else None, rv,
               goal=goal, met=met, runs=n, spread=[round(m[1], 4), round(m[2], 4)])
    r, rv = ref("per_ep")
    figure("pair CPU per committed epoch, %s" % what, per_ep[0], "ms", r if base else None, rv,
           goal="<= %.1fx N=1" % CPU_FLAT if base else None,
           met=per_ep[0] / rv <= CPU_FLAT if base else None, runs=n,
           spread=[round(per_ep[1], 4), round(per_ep[2], 4)])
    for key, label, m in (("pri_rss", "primary peak RSS per VM", pr),
                          ("sec_rss", "secondary peak RSS per VM", sr)):
        r, rv = ref(key)
        if base:
            figure("%s, %s" % (label, what), m[0], "MiB", r, rv, goal="<= %.1fx N=1" % RSS_FLAT,
                   met=m[0] / rv <= RSS_FLAT, runs=n, spread=[round(m[1], 1), round(m[2], 1)])
        else:
            figure("%s, %s" % (label, what), m[0], "MiB", "guest RAM (MiB)", ram,
                   goal="<= ~1x guest RAM (1.25x)" if key == "sec_rss" else None,
                   met=(m[0] / ram <= 1.25) if key == "sec_rss" else None, runs=n,
                   spread=[round(m[1], 1), round(m[2], 1)])
    figure("epochs per second per VM, %s" % what, ep[0], "epochs/s", "1000 / epoch_ms", want,
           runs=n, spread=[round(ep[1], 2), round(ep[2], 2)])
    figure("replication bytes per committed epoch per VM, %s" % what, bpe[0], "bytes",
           runs=n, spread=[round(bpe[1]), round(bpe[2])])
    figure("replication link per VM, %s" % what, bps[0] / 1024, "KiB/s",
           runs=n, spread=[round(bps[1] / 1024, 1), round(bps[2] / 1024, 1)])
    figure("stretched epochs, all VMs, %s, %.0f s" % (what, wall), stretched, "epochs")
    figure("spurious takeovers, %s, %.0f s" % (what, wall), len(flips), "takeovers",
           goal="0", met=not flips)
    return {"pair": pair[0], "pri": pc[0], "sec": sc[0], "pri_rss": pr[0], "sec_rss": sr[0],
            "per_ep": per_ep[0]}


def main():
    ap = argparse.ArgumentParser(description="per-VM cost of N protected idle VMs on one pair")
    ap.add_argument("--n", default="1,4,16", help="counts of VMs, e.g. 1,4,16")
    ap.add_argument("--seconds", type=float, default=None,
                    help="sampling time per N (default FLEET_SECONDS, else 600)")
    ap.add_argument("--epoch-ms", type=int, default=25)
    ap.add_argument("--mem", default="64M", help="guest RAM of each VM")
    ap.add_argument("--timeout-ms", type=int, default=500,
                    help="the primary's --timeout-ms and the secondary's --failover-timeout-ms")
    ap.add_argument("--handshake-timeout-ms", dest="handshake_ms", type=int, default=5000,
                    help="both agents' --handshake-timeout-ms")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    a = ap.parse_args()
    try:
        a.ns = counts(a.n)
    except ValueError as e:
        ap.error("--n: %s" % e)
    try:
        mib(a.mem)
    except ValueError as e:
        ap.error("--mem: %s" % e)
    if a.seconds is None:
        env = os.environ.get("FLEET_SECONDS", "600")
        try:
            a.seconds = float(env)
        except ValueError:
            ap.error("FLEET_SECONDS: %r is not a number of seconds" % env)
    for opt, v in (("--seconds", a.seconds), ("--epoch-ms", a.epoch_ms),
                   ("--timeout-ms", a.timeout_ms), ("--handshake-timeout-ms", a.handshake_ms),
                   ("--interval", a.interval)):
        if v <= 0:
            ap.error("%s: must be above 0, not %s" % (opt, v))
    # Inside the nested VM of tests/nested/run.sh everything is many times
    # slower: more time for a pair to become protected.
    a.protect_s = 180.0 if os.environ.get("UNDERSTUDY_NESTED") == "1" else 60.0
    a.settle_s = 3.0
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        print("bench_fleet: SKIP: /dev/kvm not usable here (the agents run KVM guests)")
        return 77
    if not os.access(BIN, os.X_OK):
        print("bench_fleet: %s is not built (make, or UNDERSTUDY_BIN=...)" % BIN)
        return 1
    print("fleet: N = %s idle %s guests (%s each), %d ms epochs, timeouts %d ms, %.0f s per N, "
          "%d cores" % (",".join(map(str, a.ns)), GUEST, a.mem, a.epoch_ms, a.timeout_ms, a.seconds,
                        os.cpu_count()), flush=True)
    base, growth, failed = None, {}, []
    for n in a.ns:
        tmp = tempfile.mkdtemp(prefix="understudy-fleet%d-" % n)
        try:
            vms, flips, pri_left, wall = run_fleet(n, a, tmp)
        except (BenchError, OSError, ValueError) as e:
            print("N=%d could not run: %s (logs in %s)" % (n, e, tmp), flush=True)
            failed.append(n)
            continue
        got = report(n, vms, flips, pri_left, wall, a, base)
        if base is None and n == 1:
            base = got
        elif base:
            growth[n] = {k: got[k] / base[k] for k in base if base[k] > 0}
        if flips or pri_left:
            print("  logs kept in %s" % tmp)
        else:
            subprocess.run(["rm", "-rf", tmp])
    for n, g in sorted(growth.items()):
        cpu = max(g.get("pair", 0), g.get("per_ep", 0))
        print("per-VM cost at N=%d over N=1: pair CPU %.2fx a second, %.2fx an epoch, primary RSS "
              "%.2fx, secondary RSS %.2fx (flat: CPU <= %.1fx, RSS <= %.1fx: %s)"
              % (n, g.get("pair", float("nan")), g.get("per_ep", float("nan")), g["pri_rss"],
                 g["sec_rss"], CPU_FLAT, RSS_FLAT, "yes" if cpu <= CPU_FLAT and
                 g["pri_rss"] <= RSS_FLAT and g["sec_rss"] <= RSS_FLAT else "no"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
