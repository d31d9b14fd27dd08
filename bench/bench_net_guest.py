#!/usr/bin/env python3
"""UDP echo through virtio-net and a tap (the udpecho guest), protected
against unprotected in the same run:

  unprotected  `understudy run --guest udpecho --net tap:...` (the reference);
  protected    a primary/secondary pair on loopback (--insecure), 25 ms
               epochs, output-triggered epochs (the default --min-epoch-ms 2):
               every reply waits in the primary until its checkpoint is
               acknowledged (network output commit).

Network namespaces made here: the agents' (a bridge with the taps) and the
client's (a veth to the bridge). The client sends one datagram at a time and
waits for its reply: round trip p50/p99 and requests/s (closed loop); then
WINDOW datagrams in flight for SECONDS: requests/s. ROUNDS rounds of both
modes in turn; medians of the rounds. A benchmark, not a test: it prints
figures and exits 0 unless a run could not be made (it needs root).
usage: bench_net_guest.py [--rounds N] [--requests N] [--window N] [--seconds S]"""
import json, os, socket, statistics, subprocess, sys, tempfile, time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BIN = os.path.abspath(os.environ.get("UNDERSTUDY_BIN", os.path.join(ROOT, "build", "understudy")))
GUEST_IP = "10.78.0.2"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import figure, machine, pct   # noqa: E402




def client(n, window, seconds):
    """In the client's namespace: prints a JSON line of the measurements."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    rtt, lost = [], 0
    for i in range(n + 20):
        t = time.monotonic()
        s.sendto(b"r%d" % i, (GUEST_IP, 7))
        try:
            while not s.recv(2048).endswith(b" r%d" % i):
                pass
        except socket.timeout:
            lost += 1
            continue
        if i >= 20:
            rtt.append((time.monotonic() - t) * 1e3)
    seq_rps = len(rtt) / (sum(rtt) / 1e3) if rtt else 0
    s.settimeout(0.5)
    got, sent, end = 0, 0, time.monotonic() + seconds
    for _ in range(window):
        s.sendto(b"w%d" % sent, (GUEST_IP, 7))
        sent += 1
    while time.monotonic() < end:
        try:
            s.recv(2048)
            got += 1
        except socket.timeout:
            pass                       # a datagram lost: keep the window full
        s.sendto(b"w%d" % sent, (GUEST_IP, 7))
        sent += 1
    print(json.dumps({"rtt": rtt, "lost": lost, "seq_rps": seq_rps, "win_rps": got / seconds}))


class Net:
    """Two network namespaces: the agents' (a bridge with the taps tapa and
    tapb, and a veth to the client) and the client's, at SUBNET.1/24."""

    def __init__(self, tag="usb", subnet="10.78.0"):
        self.v, self.c = "%sv%d" % (tag, os.getpid()), "%sc%d" % (tag, os.getpid())
        cmds = [["ip", "netns", "add", self.v], ["ip", "netns", "add", self.c],
                ["ip", "-n", self.v, "link", "set", "lo", "up"],
                ["ip", "-n", self.v, "link", "add", "br0", "type", "bridge"],
                ["ip", "-n", self.v, "link", "set", "br0", "up"],
                ["ip", "link", "add", "bc", "netns", self.c, "type", "veth", "peer", "name", "bb",
                 "netns", self.v],
                ["ip", "-n", self.v, "link", "set", "bb", "master", "br0", "up"],
                ["ip", "-n", self.c, "addr", "add", subnet + ".1/24", "dev", "bc"],
                ["ip", "-n", self.c, "link", "set", "bc", "up"]]
        for t in ("tapa", "tapb"):
            cmds += [["ip", "-n", self.v, "tuntap", "add", t, "mode", "tap"],
                     ["ip", "-n", self.v, "link", "set", t, "master", "br0", "up"]]
        for c in cmds:
            subprocess.run(c, check=True, capture_output=True)

    def close(self):
        for n in (self.v, self.c):
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


def ns_port(net):
    out = subprocess.run(["ip", "netns", "exec", net.v, "python3", "-c",
                          "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); "
                          "print(s.getsockname()[1])"], capture_output=True, text=True)
    return int(out.stdout)


def wait_for(path, text, secs):
    end = time.time() + secs
    while time.time() < end:
        if os.path.exists(path) and text in open(path, errors="replace").read():
            return True
        time.sleep(0.05)
    return False


def run_mode(net, tmp, mode, n, window, seconds):
    ex = ["ip", "netns", "exec", net.v, BIN]
    guest = "udpecho:ip=%s/24,port=7" % GUEST_IP
    procs = []
    log = os.path.join(tmp, mode + ".log")
    try:
        if mode == "unprotected":
            procs.append(subprocess.Popen(ex + ["run", "--guest", guest, "--net", "tap:tapa",
                                                "--console", "stdio"], stdin=subprocess.DEVNULL,
                                          stdout=open(log, "w"), stderr=subprocess.DEVNULL))
            if not wait_for(log, "udpecho ready", 10):
                raise SystemExit("unprotected udpecho did not start")
        else:
            sport, scon, pcon = ns_port(net), ns_port(net), ns_port(net)
            slog = os.path.join(tmp, "sec.log")
            procs.append(subprocess.Popen(ex + ["secondary", "--listen", "127.0.0.1:%d" % sport,
                                                "--console", "tcp:127.0.0.1:%d" % scon, "--insecure",
                                                "--failover-timeout-ms", "3000", "--net", "tap:tapb"],
                                          stderr=open(slog, "w")))
            if not wait_for(slog, "waiting for a primary", 10):
                raise SystemExit("secondary did not start")
            procs.append(subprocess.Popen(ex + ["primary", "--guest", guest, "--net", "tap:tapa",
                                                "--peer", "127.0.0.1:%d" % sport, "--console",
                                                "tcp:127.0.0.1:%d" % pcon, "--insecure", "--epoch-ms",
                                                "25", "--timeout-ms", "3000"],
                                          stderr=subprocess.DEVNULL))
            if not wait_for(slog, "first checkpoint applied", 20):
                raise SystemExit("the pair did not protect the guest")
        out = subprocess.run(["ip", "netns", "exec", net.c, sys.executable, os.path.abspath(__file__),
                              "--client", str(n), str(window), str(seconds)],
                             capture_output=True, text=True, timeout=120 + seconds)
        if out.returncode:
            raise SystemExit("client failed: " + out.stderr[-300:])
        return json.loads(out.stdout)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def main():
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        print("bench_net_guest: SKIP: /dev/kvm not usable here")
        return 0
    if sys.argv[1:2] == ["--client"]:
        client(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
        return 0
    if os.geteuid() != 0:
        print("bench_net_guest: needs root (network namespaces and taps); not run")
        return 0
    rounds, n, window, seconds = arg("--rounds", 3), arg("--requests", 500), arg("--window", 16), \
        arg("--seconds", 3.0)
    print("MACHINE " + json.dumps(machine()))
    tmp = tempfile.mkdtemp()
    net = Net()
    res = {m: {"p50": [], "p99": [], "seq": [], "win": [], "lost": 0} for m in ("unprotected", "protected")}
    try:
        for _ in range(rounds):
            for mode in res:
                r = run_mode(net, tmp, mode, n, window, seconds)
                res[mode]["p50"].append(pct(r["rtt"], 50))
                res[mode]["p99"].append(pct(r["rtt"], 99))
                res[mode]["seq"].append(r["seq_rps"])
                res[mode]["win"].append(r["win_rps"])
                res[mode]["lost"] += r["lost"]
    finally:
        net.close()
    med = {m: {k: statistics.median(v) for k, v in r.items() if k != "lost"} for m, r in res.items()}
    u, p = med["unprotected"], med["protected"]
    print("UDP echo through virtio-net + tap (udpecho), %d rounds x %d requests, window %d for %.0f s; "
          "protected: 25 ms epochs, output-triggered (median of rounds)" % (rounds, n, window, seconds))
    for m, r in med.items():
        print("  %-12s rtt p50 %6.2f ms  p99 %6.2f ms  closed loop %7.0f req/s  window %d: %7.0f req/s"
              "  (%d timeouts)" % (m, r["p50"], r["p99"], r["seq"], window, r["win"], res[m]["lost"]))
    print("  ratio protected/unprotected: p50 %.1fx, p99 %.1fx, closed-loop req/s %.2fx, windowed req/s "
          "%.2fx" % (p["p50"] / u["p50"], p["p99"] / u["p99"], p["seq"] / u["seq"], p["win"] / u["win"]))
    figure("UDP echo round trip p50, protected (25 ms epochs, output-triggered)", p["p50"], "ms",
           "unprotected run p50", u["p50"], runs=rounds,
           spread=[min(res["protected"]["p50"]), max(res["protected"]["p50"])])
    figure("UDP echo round trip p99, protected (25 ms epochs, output-triggered)", p["p99"], "ms",
           "unprotected run p99", u["p99"], runs=rounds,
           spread=[min(res["protected"]["p99"]), max(res["protected"]["p99"])])
    figure("UDP echo requests/s, %d in flight, protected" % window, p["win"], "req/s",
           "unprotected run", u["win"], runs=rounds,
           spread=[min(res["protected"]["win"]), max(res["protected"]["win"])])
    return 0


if __name__ == "__main__":
    sys.exit(main())
