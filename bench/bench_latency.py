#!/usr/bin/env python3
"""Output-commit latency of the counter guest (`incr` request -> reply) with
the two mechanisms of the performance work switched on one at a time, beside
the same guest unprotected (the reference), all in one run, interleaved:

  timer   --min-epoch-ms 25 and no hot pages: a reply waits for the 25 ms
          epoch timer, and every rewrite of the counter's 1024 pages pays a
          write fault after each re-protection (UNDERSTUDY_HOT_PAUSE_US=0);
  output  output-triggered epochs (default --min-epoch-ms 2), no hot pages;
  both    output-triggered epochs and hot pages (the defaults).

A real pair on 127.0.0.1 (--insecure), 25 ms epochs. ROUNDS rounds of every
mode in turn, REQUESTS requests each; medians of the per-round p50 and p99
with their spread. A benchmark, not a test: it prints figures and exits 0
unless a run could not be made. usage: bench_latency.py [--rounds N] [--requests N]"""
import json, os, socket, statistics, subprocess, sys, tempfile, time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BIN = os.environ.get("UNDERSTUDY_BIN", os.path.join(ROOT, "build", "understudy"))
HOST = "127.0.0.1"

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_protect import free_port, wait_port   # noqa: E402  (one copy of each)
from figures import figure, pct                   # noqa: E402
MODES = {
    "timer": (["--min-epoch-ms", "25"], {"UNDERSTUDY_HOT_PAUSE_US": "0"}),
    "output": ([], {"UNDERSTUDY_HOT_PAUSE_US": "0"}),
    "both": ([], {}),
}




def rtts(port, n):
    s = socket.create_connection((HOST, port), timeout=10)
    f = s.makefile("rwb", buffering=0)
    out = []
    for i in range(n + 20):
        t = time.monotonic()
        f.write(b"incr\n")
        if not f.readline():
            raise SystemExit("console closed")
        if i >= 20:                        # warm-up: the first requests fault everything in
            out.append((time.monotonic() - t) * 1e3)
        time.sleep(0.003)
    s.close()
    return out


def run_mode(tmp, mode, n):
    procs = []
    try:
        con = free_port()
        if mode == "unprotected":
            procs.append(subprocess.Popen([BIN, "run", "--guest", "counter", "--console",
                                           "tcp:%s:%d" % (HOST, con)], stderr=subprocess.DEVNULL))
        else:
            args, env = MODES[mode]
            sport, scon = free_port(), free_port()
            ctl = os.path.join(tmp, mode + ".ctl")
            procs.append(subprocess.Popen([BIN, "secondary", "--listen", "%s:%d" % (HOST, sport),
                                           "--console", "tcp:%s:%d" % (HOST, scon), "--insecure",
                                           "--failover-timeout-ms", "3000"],
                                          stderr=subprocess.DEVNULL))
            wait_port(sport)
            procs.append(subprocess.Popen([BIN, "primary", "--guest", "counter", "--peer",
                                           "%s:%d" % (HOST, sport), "--console",
                                           "tcp:%s:%d" % (HOST, con), "--insecure", "--epoch-ms",
                                           "25", "--timeout-ms", "3000", "--control", ctl] + args,
                                          stderr=subprocess.DEVNULL, env=dict(os.environ, **env)))
            for _ in range(100):
                r = subprocess.run([BIN, "status", "--control", ctl, "--json"], capture_output=True,
                                   text=True)
                if '"state":"protected"' in r.stdout:
                    break
                time.sleep(0.1)
        wait_port(con)
        return rtts(con, n)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def main():
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        print("bench_latency: SKIP: /dev/kvm not usable here")
        return 0
    rounds, n = 3, 200
    if "--rounds" in sys.argv:
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1])
    if "--requests" in sys.argv:
        n = int(sys.argv[sys.argv.index("--requests") + 1])
    tmp = tempfile.mkdtemp()
    res = {m: {"p50": [], "p99": []} for m in ["unprotected"] + list(MODES)}
    for _ in range(rounds):
        for mode in res:
            lat = run_mode(tmp, mode, n)
            res[mode]["p50"].append(pct(lat, 50))
            res[mode]["p99"].append(pct(lat, 99))
    ref50 = statistics.median(res["unprotected"]["p50"])
    ref99 = statistics.median(res["unprotected"]["p99"])
    print("output-commit latency, counter incr, 25 ms epochs, %d rounds x %d requests "
          "(median of rounds, [min..max])" % (rounds, n))
    for mode, r in res.items():
        p50, p99 = statistics.median(r["p50"]), statistics.median(r["p99"])
        print("  %-12s p50 %7.2f ms [%.2f..%.2f]  p99 %7.2f ms [%.2f..%.2f]  added p99 %+.2f ms  "
              "ratio p50 %.1fx" % (mode, p50, min(r["p50"]), max(r["p50"]), p99, min(r["p99"]),
                                   max(r["p99"]), p99 - ref99, p50 / ref50))
        if mode != "unprotected":
            figure("output-commit latency p99, counter, 25 ms epochs, %s" % mode, p99, "ms",
                   "unprotected p99", ref99, goal="added p99 <= 3 ms", met=p99 - ref99 <= 3,
                   runs=rounds, spread=[min(r["p99"]), max(r["p99"])])
    print("  reference: unprotected p50 %.2f ms, p99 %.2f ms (same run)" % (ref50, ref99))


if __name__ == "__main__":
    main()
