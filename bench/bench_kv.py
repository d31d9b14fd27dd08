#!/usr/bin/env python3
"""The kv guest (virtio-net + a log on virtio-blk), protected against
unprotected in the same run:

  unprotected    `understudy run --guest kv --disk IMG --net tap:...` (the
                 reference);
  protected      a primary/secondary pair on loopback (--insecure), each with
                 its own image, 25 ms epochs, output-triggered epochs (the
                 default --min-epoch-ms): a reply waits in the primary until
                 the checkpoint holding the PUT (its log record among the
                 epoch's disk blocks) is acknowledged;
  protected-ack  the same with --disk-sync ack on the secondary (ACK(N)
                 only once the epoch's blocks are durable there).

Every PUT is written and flushed to the guest's disk before its reply
(fdatasync on the host at each flush). Network namespaces made here: the
agents' (a bridge with the taps) and the client's (a veth to the bridge).
The client sends one request at a time: GET round trip p50/p99 (of a key
that is there), PUT round trip p50/p99 (a new version of one of 16 keys);
then WINDOW PUTs in flight for SECONDS: PUTs/s. ROUNDS rounds of each mode
in turn; medians of the rounds. A benchmark, not a test: it prints figures
and exits 0 unless a run could not be made (it needs root).
usage: bench_kv.py [--rounds N] [--requests N] [--window N] [--seconds S]"""
import json, os, socket, statistics, subprocess, sys, tempfile, time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BIN = os.path.abspath(os.environ.get("UNDERSTUDY_BIN", os.path.join(ROOT, "build", "understudy")))
GUEST_IP = "10.79.0.2"
PORT = 7000
IMG_BYTES = 64 << 20
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_net_guest import Net, arg, ns_port, wait_for   # noqa: E402  (one copy)
from figures import figure, machine, pct   # noqa: E402


def client(n, window, seconds):
    """In the client's namespace: prints a JSON line of the measurements."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    addr = (GUEST_IP, PORT)
    lost = 0

    def ask(req, reqid):
        nonlocal lost
        for _ in range(5):
            s.sendto(req, addr)
            try:
                while True:
                    f = s.recv(2048).split(b" ")
                    if f[1] == reqid:
                        return f
            except socket.timeout:
                lost += 1
        raise SystemExit("no reply to %r" % req)

    put_rtt, get_rtt = [], []
    for i in range(n + 20):          # the first 20 of each warm up
        rid = b"p%d" % i
        t = time.monotonic()
        f = ask(b"PUT %s key%d value-%d" % (rid, i % 16, i), rid)
        if f[0] != b"OK":
            raise SystemExit("PUT answered %r" % f)
        if i >= 20:
            put_rtt.append((time.monotonic() - t) * 1e3)
        rid = b"g%d" % i
        t = time.monotonic()
        f = ask(b"GET %s key%d" % (rid, i % 16), rid)
        if f[0] != b"VAL":
            raise SystemExit("GET answered %r" % f)
        if i >= 20:
            get_rtt.append((time.monotonic() - t) * 1e3)
    s.settimeout(0.5)
    got, sent, end = 0, 0, time.monotonic() + seconds
    for _ in range(window):
        s.sendto(b"PUT w%d key%d w-%d" % (sent, sent % 16, sent), addr)
        sent += 1
    while time.monotonic() < end:
        try:
            if s.recv(2048).startswith(b"OK "):
                got += 1
        except socket.timeout:
            pass                       # a datagram lost: keep the window full
        s.sendto(b"PUT w%d key%d w-%d" % (sent, sent % 16, sent), addr)
        sent += 1
    print(json.dumps({"put": put_rtt, "get": get_rtt, "lost": lost, "win_ps": got / seconds}))


def image(path):
    with open(path, "wb") as f:
        f.truncate(IMG_BYTES)
    return path


def run_mode(net, tmp, mode, n, window, seconds):
    ex = ["ip", "netns", "exec", net.v, BIN]
    guest = "kv:ip=%s/24,port=%d" % (GUEST_IP, PORT)
    procs = []
    log = os.path.join(tmp, mode + ".log")
    pimg = image(os.path.join(tmp, "pri.img"))
    try:
        if mode == "unprotected":
            procs.append(subprocess.Popen(ex + ["run", "--guest", guest, "--disk", pimg, "--net", "tap:tapa",
                                                "--console", "stdio"], stdin=subprocess.DEVNULL,
                                          stdout=open(log, "w"), stderr=subprocess.DEVNULL))
            if not wait_for(log, "kv ready", 10):
                raise SystemExit("unprotected kv did not start")
        else:
            sport, scon, pcon = ns_port(net), ns_port(net), ns_port(net)
            slog = os.path.join(tmp, "sec.log")
            simg = os.path.join(tmp, "sec.img")
            open(simg, "w").close()
            sync = ["--disk-sync", "ack"] if mode == "protected-ack" else []
            procs.append(subprocess.Popen(ex + ["secondary", "--listen", "127.0.0.1:%d" % sport,
                                                "--console", "tcp:127.0.0.1:%d" % scon, "--insecure",
                                                "--failover-timeout-ms", "3000", "--net", "tap:tapb",
                                                "--disk", simg] + sync,
                                          stderr=open(slog, "w")))
            if not wait_for(slog, "waiting for a primary", 10):
                raise SystemExit("secondary did not start")
            procs.append(subprocess.Popen(ex + ["primary", "--guest", guest, "--disk", pimg, "--net", "tap:tapa",
                                                "--peer", "127.0.0.1:%d" % sport, "--console",
                                                "tcp:127.0.0.1:%d" % pcon, "--insecure", "--epoch-ms",
                                                "25", "--timeout-ms", "3000"],
                                          stderr=subprocess.DEVNULL))
            if not wait_for(slog, "first checkpoint applied", 20):
                raise SystemExit("the pair did not protect the guest")
        out = subprocess.run(["ip", "netns", "exec", net.c, sys.executable, os.path.abspath(__file__),
                              "--client", str(n), str(window), str(seconds)],
                             capture_output=True, text=True, timeout=300 + seconds)
        if out.returncode:
            raise SystemExit("client failed (%s): %s" % (mode, (out.stderr + out.stdout)[-300:]))
        return json.loads(out.stdout)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def main():
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        print("bench_kv: SKIP: /dev/kvm not usable here")
        return 0
    if sys.argv[1:2] == ["--client"]:
        client(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
        return 0
    if os.geteuid() != 0:
        print("bench_kv: needs root (network namespaces and taps); not run")
        return 0
    rounds, n, window, seconds = arg("--rounds", 3), arg("--requests", 300), arg("--window", 16), \
        arg("--seconds", 3.0)
    print("MACHINE " + json.dumps(machine()))
    tmp = tempfile.mkdtemp()
    net = Net("usk", "10.79.0")
    modes = ("unprotected", "protected", "protected-ack")
    keys = ("get50", "get99", "put50", "put99", "win")
    res = {m: {k: [] for k in keys} for m in modes}
    lost = {m: 0 for m in modes}
    try:
        for _ in range(rounds):
            for mode in modes:
                r = run_mode(net, tmp, mode, n, window, seconds)
                res[mode]["get50"].append(pct(r["get"], 50))
                res[mode]["get99"].append(pct(r["get"], 99))
                res[mode]["put50"].append(pct(r["put"], 50))
                res[mode]["put99"].append(pct(r["put"], 99))
                res[mode]["win"].append(r["win_ps"])
                lost[mode] += r["lost"]
    finally:
        net.close()
    med = {m: {k: statistics.median(v) for k, v in r.items()} for m, r in res.items()}
    u = med["unprotected"]
    print("kv guest over virtio-net + tap, log on virtio-blk (write + flush before each reply), %d rounds x "
          "%d PUT+GET, then %d PUTs in flight for %.0f s; protected: 25 ms epochs, output-triggered "
          "(median of rounds)" % (rounds, n, window, seconds))
    for m, r in med.items():
        print("  %-13s GET p50 %6.2f ms p99 %6.2f ms   PUT p50 %6.2f ms p99 %6.2f ms   %d in flight: "
              "%6.0f PUT/s  (%d timeouts)" % (m, r["get50"], r["get99"], r["put50"], r["put99"], window,
                                              r["win"], lost[m]))
    for m in modes[1:]:
        p = med[m]
        print("  ratio %s/unprotected: GET p50 %.1fx p99 %.1fx, PUT p50 %.1fx p99 %.1fx, PUT/s %.2fx" %
              (m, p["get50"] / u["get50"], p["get99"] / u["get99"], p["put50"] / u["put50"],
               p["put99"] / u["put99"], p["win"] / u["win"]))
    for m in modes[1:]:
        p, sp = med[m], res[m]
        what = "protected" if m == "protected" else "protected, --disk-sync ack"
        for k, label in (("get50", "GET round trip p50"), ("get99", "GET round trip p99"),
                         ("put50", "PUT round trip p50"), ("put99", "PUT round trip p99")):
            figure("kv %s, %s (25 ms epochs, output-triggered)" % (label, what), p[k], "ms",
                   "unprotected run " + label.split()[-1], u[k], runs=rounds,
                   spread=[min(sp[k]), max(sp[k])])
        figure("kv PUTs/s, %d in flight, %s" % (window, what), p["win"], "PUT/s", "unprotected run",
               u["win"], runs=rounds, spread=[min(sp["win"]), max(sp["win"])])
    return 0


if __name__ == "__main__":
    sys.exit(main())
