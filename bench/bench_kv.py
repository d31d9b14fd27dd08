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
in turn; medians of the rounds.

Then the counts, which do not depend on the host's speed (bench/counts.py,
as bench_latency.py's), ROUNDS more rounds of each protected mode, the
sequential requests only, with the primary's event log on (not in the
timed rounds): per PUT and per GET reply, the epochs captured and the ACKs
received while it waited; over the requests, the epochs committed per
reply, the epochs the timer and waiting output started per reply, and per
epoch the bytes on the link, the pages and the disk blocks captured.
--counts runs only these (make bench-counts; the nested VM).

A benchmark, not a test: it prints figures and exits 0 unless a run could
not be made (it needs root; bad arguments: 2).
usage: bench_kv.py [--rounds N] [--requests N] [--window N] [--seconds S] [--counts]"""
import argparse, json, os, socket, statistics, subprocess, sys, tempfile, time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BIN = os.path.abspath(os.environ.get("UNDERSTUDY_BIN", os.path.join(ROOT, "build", "understudy")))
GUEST_IP = "10.79.0.2"
PORT = 7000
IMG_BYTES = 64 << 20
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_net_guest import Net, ns_port, wait_for   # noqa: E402  (one copy)
from bench_protect import status   # noqa: E402  (asked again when a slow agent misses its deadline)
from figures import figure, machine, pct   # noqa: E402
import counts                              # noqa: E402


def client(n, window, seconds, hold):
    """In the client's namespace: prints a JSON line of the measurements,
    with each request's span (sent, replied) in time.monotonic_ns(). With
    hold, after the warm-up it prints "warm" and waits for a line on stdin
    (the counts' first status reading)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5.0 if hold else 1.0)   # the counts' runs: a slow host (the nested VM) is no loss
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

    put_rtt, get_rtt, put_span, get_span = [], [], [], []
    for i in range(n + 20):          # the first 20 of each warm up
        if i == 20 and hold:
            print("warm", flush=True)
            sys.stdin.readline()
        rid = b"p%d" % i
        t = time.monotonic_ns()
        f = ask(b"PUT %s key%d value-%d" % (rid, i % 16, i), rid)
        if f[0] != b"OK":
            raise SystemExit("PUT answered %r" % f)
        if i >= 20:
            t1 = time.monotonic_ns()
            put_rtt.append((t1 - t) / 1e6)
            put_span.append((t, t1))
        rid = b"g%d" % i
        t = time.monotonic_ns()
        f = ask(b"GET %s key%d" % (rid, i % 16), rid)
        if f[0] != b"VAL":
            raise SystemExit("GET answered %r" % f)
        if i >= 20:
            t1 = time.monotonic_ns()
            get_rtt.append((t1 - t) / 1e6)
            get_span.append((t, t1))
    s.settimeout(0.5)
    got, sent, end = 0, 0, time.monotonic() + seconds
    for _ in range(window if seconds > 0 else 0):
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
    print(json.dumps({"put": put_rtt, "get": get_rtt, "put_span": put_span, "get_span": get_span,
                      "lost": lost, "win_ps": got / seconds if seconds > 0 else 0.0}))


def image(path):
    with open(path, "wb") as f:
        f.truncate(IMG_BYTES)
    return path


def run_client(net, n, window, seconds, ctl=None):
    """The client's measurements; with ctl, the primary's status after the
    warm-up and after the requests come back too."""
    cmd = ["ip", "netns", "exec", net.c, sys.executable, os.path.abspath(__file__), "--client", str(n),
           str(window), str(seconds)] + (["--hold"] if ctl else [])
    c = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        before = {}
        if ctl:
            if c.stdout.readline().strip() != "warm":
                c.kill()
                raise SystemExit("client failed in its warm-up: " + c.communicate()[1][-300:])
            before = status(ctl)
            c.stdin.write("go\n")
            c.stdin.flush()
        out, err = c.communicate(timeout=300 + 2 * n + seconds)
    except subprocess.TimeoutExpired:
        c.kill()
        c.wait()
        raise SystemExit("client: no answer in %d s" % (300 + 2 * n + seconds))
    if c.returncode:
        raise SystemExit("client failed: %s" % (err + out)[-300:])
    return json.loads(out), before, status(ctl) if ctl else {}


def run_mode(net, tmp, mode, n, window, seconds, events=None):
    """The client's measurements in mode; with events (a path: the counts'
    rounds, protected modes only), the primary logs its events there and
    the counts of the run come back instead."""
    ex = ["ip", "netns", "exec", net.v, BIN]
    guest = "kv:ip=%s/24,port=%d" % (GUEST_IP, PORT)
    procs = []
    log = os.path.join(tmp, mode + ".log")
    pimg = image(os.path.join(tmp, "pri.img"))
    ctl = events + ".ctl" if events else None
    try:
        if mode == "unprotected":
            procs.append(subprocess.Popen(ex + ["run", "--guest", guest, "--disk", pimg, "--net", "tap:tapa",
                                                "--console", "stdio"], stdin=subprocess.DEVNULL,
                                          stdout=open(log, "w"), stderr=subprocess.DEVNULL))
            if not wait_for(log, "kv ready", 60):
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
            if not wait_for(slog, "waiting for a primary", 60):
                raise SystemExit("secondary did not start")
            env = dict(os.environ, UNDERSTUDY_EVENT_LOG=events) if events else None
            plog = os.path.join(tmp, "pri.log")
            procs.append(subprocess.Popen(ex + ["primary", "--guest", guest, "--disk", pimg, "--net", "tap:tapa",
                                                "--peer", "127.0.0.1:%d" % sport, "--console",
                                                "tcp:127.0.0.1:%d" % pcon, "--insecure", "--epoch-ms",
                                                "25", "--timeout-ms", "3000"] +
                                          (["--control", ctl] if ctl else []),
                                          stderr=open(plog, "w"), env=env))
            if not wait_for(slog, "first checkpoint applied", 120):
                tail = lambda f: " | ".join(open(f, errors="replace").read().splitlines()[-3:])
                raise SystemExit("the pair did not protect the guest (%s): primary: %s; secondary: %s" %
                                 (mode, tail(plog), tail(slog)))
        r, before, after = run_client(net, n, window, seconds, ctl)
        if not events:
            return r
        return reply_counts(r, before, after, counts.read_events(events))
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def reply_counts(r, before, after, events):
    """The counts of one run: per PUT and per GET reply, the epochs and the
    ACKs it waited for (event log); per reply, the epochs committed and
    started by each trigger; per epoch, bytes, pages and disk blocks."""
    d = lambda k: after.get(k, 0) - before.get(k, 0)
    epochs, replies = d("epoch"), len(r["put_span"]) + len(r["get_span"])
    total = lambda st: st.get("dirty_pages_avg", 0) * st.get("epoch", 0)   # the average of all epochs
    put = counts.waits(events, [tuple(x) for x in r["put_span"]])
    get = counts.waits(events, [tuple(x) for x in r["get_span"]])
    mean = lambda xs: statistics.mean(xs) if xs else 0.0
    return {"put_epochs_waited": mean([c for c, _ in put]), "put_round_trips": mean([a for _, a in put]),
            "get_epochs_waited": mean([c for c, _ in get]), "get_round_trips": mean([a for _, a in get]),
            "epochs_per_reply": counts.per(d("acked"), replies),
            "timer_epochs_per_reply": counts.per(d("epochs_timer"), replies),
            "output_epochs_per_reply": counts.per(d("epochs_output"), replies),
            "bytes_per_epoch": counts.per(d("bytes_sent"), epochs),
            "pages_per_epoch": counts.per(total(after) - total(before), epochs),
            "blocks_per_epoch": counts.per(d("disk_blocks"), epochs),
            "epochs": epochs, "lost": r["lost"]}


COUNTS = [("put_epochs_waited", "epochs captured while a PUT reply waited", "epochs/reply"),
          ("put_round_trips", "round trips (ACKs) while a PUT reply waited", "ACKs/reply"),
          ("get_epochs_waited", "epochs captured while a GET reply waited", "epochs/reply"),
          ("get_round_trips", "round trips (ACKs) while a GET reply waited", "ACKs/reply"),
          ("epochs_per_reply", "epochs committed per reply", "epochs/reply"),
          ("timer_epochs_per_reply", "epochs the timer started per reply", "epochs/reply"),
          ("output_epochs_per_reply", "epochs waiting output started per reply", "epochs/reply"),
          ("bytes_per_epoch", "bytes on the link per epoch", "bytes/epoch"),
          ("pages_per_epoch", "pages captured per epoch", "pages/epoch"),
          ("blocks_per_epoch", "disk blocks captured per epoch", "blocks/epoch")]


def count_rounds(net, tmp, rounds, n):
    modes = ("protected", "protected-ack")
    res = {m: [] for m in modes}
    for r in range(rounds):
        for mode in modes:
            log = os.path.join(tmp, "%s-%d.events" % (mode, r))
            res[mode].append(run_mode(net, tmp, mode, n, 0, 0.0, events=log))
            print("  (counts round %d, %s: %d epochs)" % (r + 1, mode, res[mode][-1]["epochs"]), flush=True)
    print("counts (host-independent), kv guest, PUT then GET, %d rounds x %d of each, 25 ms epochs, "
          "output-triggered, primary's event log on (median of rounds, [min..max]):" % (rounds, n))
    for mode, rs in res.items():
        what = "protected" if mode == "protected" else "protected, --disk-sync ack"
        for k, name, unit in COUNTS:
            vals = [c[k] for c in rs]
            print("  %-13s %-45s %10.2f [%.2f..%.2f]" % (mode, name, statistics.median(vals), min(vals),
                                                         max(vals)))
            counts.count_figure("%s, kv guest, 25 ms epochs, %s" % (name, what), vals, unit)
        print("  %-13s (%d timeouts)" % (mode, sum(c["lost"] for c in rs)))


def timed(net, tmp, rounds, n, window, seconds):
    """The timed rounds of every mode, interleaved, and their figures."""
    print("MACHINE " + json.dumps(machine()))
    modes = ("unprotected", "protected", "protected-ack")
    keys = ("get50", "get99", "put50", "put99", "win")
    res = {m: {k: [] for k in keys} for m in modes}
    lost = {m: 0 for m in modes}
    for _ in range(rounds):
        for mode in modes:
            r = run_mode(net, tmp, mode, n, window, seconds)
            res[mode]["get50"].append(pct(r["get"], 50))
            res[mode]["get99"].append(pct(r["get"], 99))
            res[mode]["put50"].append(pct(r["put"], 50))
            res[mode]["put99"].append(pct(r["put"], 99))
            res[mode]["win"].append(r["win_ps"])
            lost[mode] += r["lost"]
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


def main():
    if sys.argv[1:2] == ["--client"]:
        client(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5:6] == ["--hold"])
        return 0
    ap = argparse.ArgumentParser(description="the kv guest, protected against unprotected")
    ap.add_argument("--rounds", type=counts.positive_int, default=3)
    ap.add_argument("--requests", type=counts.positive_int, default=300)
    ap.add_argument("--window", type=counts.positive_int, default=16)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--counts", action="store_true", help="only the host-independent counts")
    a = ap.parse_args()
    if not a.seconds > 0:
        ap.error("--seconds: must be above 0")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        print("bench_kv: SKIP: /dev/kvm not usable here")
        return 0
    if os.geteuid() != 0:
        print("bench_kv: SKIP: needs root (network namespaces and taps); not run")
        return 0
    tmp = tempfile.mkdtemp()
    net = Net("usk", "10.79.0")
    try:
        if not a.counts:
            timed(net, tmp, a.rounds, a.requests, a.window, a.seconds)
        count_rounds(net, tmp, a.rounds, min(a.requests, 100))
    finally:
        net.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
