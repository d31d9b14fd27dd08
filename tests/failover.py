#!/usr/bin/env python3
"""The consistency test: a client talks to the counter guest through the
primary's console; the primary is killed (SIGKILL, or SIGSTOP for a hung host)
at seeded random moments; the client reconnects to the secondary's console and
goes on. Every reply the client ever received must be one an uninterrupted run
gives: the same digest for the same n, and n moving by +1 (a line seen twice,
replayed after takeover, is allowed; a skipped value never is).

usage: failover.py [--trials N] [--seed S] [--signal KILL|STOP] [--transport tcp|tls|rdma]
Exit 0 when every trial holds."""
import argparse, os, random, signal, socket, subprocess, sys, tempfile, time

BIN = os.environ.get("UNDERSTUDY_BIN", os.path.join(os.path.dirname(__file__), "..", "build", "understudy"))
TIMEOUT_MS = 300
# FAILOVER_VERIFY=0: production timing, no UNDERSTUDY_VERIFY RAM+state digest in every pause.
VERIFY = os.environ.get("FAILOVER_VERIFY", "1") != "0"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def oracle(count):
    """n -> digest from one uninterrupted run."""
    reqs = "incr\n" * count + "halt\n"
    out = subprocess.run([BIN, "run", "--guest", "counter", "--console", "stdio"], input=reqs.encode(),
                         capture_output=True, timeout=120, check=True).stdout.decode()
    table = {0: None}
    for line in out.splitlines():
        n, d = line.split()
        table[int(n)] = d
    assert len(table) == count + 1, "oracle run incomplete"
    return table


def connect(port, deadline):
    while time.time() < deadline:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=0.5)
        except OSError:
            time.sleep(0.01)
    return None


class Client:
    """Line-oriented console client that records every reply."""

    def __init__(self, table):
        self.table, self.sock, self.buf = table, None, b""
        self.seen = []          # every (n, digest) line ever received
        self.errors = []

    def attach(self, sock):
        # Output leaves in whole lines: a partial line can only be a write cut by the kill.
        self.sock, self.buf = sock, b""
        sock.settimeout(0.05)

    def read_lines(self, wait):
        """Lines arriving within wait seconds; None if the console closed."""
        end, lines = time.time() + wait, []
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                lines.append(line.decode())
            if lines or time.time() >= end:
                return lines
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return None
            if not data:
                return None
            self.buf += data

    def check(self, line):
        try:
            n, d = line.split()
            n = int(n)
        except ValueError:
            self.errors.append("garbled line %r" % line)
            return
        if self.table.get(n) != d:
            self.errors.append("reply %r differs from the uninterrupted run (%r)" % (line, self.table.get(n)))
        if self.seen:
            pn, pd = self.seen[-1]
            if not (n == pn + 1 or (n == pn and d == pd)):
                self.errors.append("after %d came %d: a reply the client saw was lost or skipped" % (pn, n))
        self.seen.append((n, d))

    def last(self):
        return self.seen[-1][0] if self.seen else 0


def link_args(transport, tmp, role):
    if transport == "tcp":
        return ["--insecure"]
    if transport == "rdma":
        return ["--insecure", "--transport", "rdma"]
    certs = os.path.join(tmp, "certs")
    if not os.path.exists(certs):
        subprocess.run(["bash", os.path.join(os.path.dirname(__file__), "mkcerts.sh"), certs],
                       check=True, capture_output=True)
    name = "server" if role == "secondary" else "client"
    return ["--tls-cert", os.path.join(certs, name + ".pem"), "--tls-key", os.path.join(certs, name + ".key"),
            "--tls-ca", os.path.join(certs, "ca.pem")]


def run_trial(trial, rng, table, sig, tmp, transport):
    sport, scon, pcon = free_port(), free_port(), free_port()
    slog = open(os.path.join(tmp, "sec%d.log" % trial), "w")
    plog = open(os.path.join(tmp, "pri%d.log" % trial), "w")
    env = dict(os.environ, UNDERSTUDY_VERIFY="1") if VERIFY else \
        {k: v for k, v in os.environ.items() if k != "UNDERSTUDY_VERIFY"}
    sec = subprocess.Popen([BIN, "secondary", "--listen", "127.0.0.1:%d" % sport, "--console",
                            "tcp:127.0.0.1:%d" % scon, "--failover-timeout-ms", str(TIMEOUT_MS)] +
                           link_args(transport, tmp, "secondary"),
                           stderr=slog, env=env)
    time.sleep(0.05)
    pri = subprocess.Popen([BIN, "primary", "--guest", "counter", "--console", "tcp:127.0.0.1:%d" % pcon,
                            "--peer", "127.0.0.1:%d" % sport, "--epoch-ms", "25",
                            "--timeout-ms", "1000"] + link_args(transport, tmp, "primary"), stderr=plog, env=env)
    t_start = time.time()
    # Kill anywhere from the initial sync to well into the conversation.
    kill_at = t_start + (rng.uniform(0.0, 0.15) if rng.random() < 0.15 else rng.uniform(0.15, 1.2))
    c = Client(table)
    result, info = "ok", ""
    try:
        s = connect(pcon, time.time() + 5)
        if s is None:
            raise RuntimeError("primary console never opened")
        c.attach(s)
        pending, killed, t_kill = False, False, None
        while True:
            if not killed and time.time() >= kill_at:
                pri.send_signal(sig)
                killed, t_kill = True, time.time()
                break
            if not pending:
                c.sock.sendall(b"incr\n")
                pending = True
            lines = c.read_lines(0.02)
            if lines is None:
                break
            for line in lines:
                c.check(line)
                pending = False
        before = c.last()
        # The secondary's console is bound from its start (design.md invariant
        # 6) and served once it took over: wait for that, then reconnect.
        took, deadline = False, time.time() + TIMEOUT_MS / 1000 + 3
        while not took and time.time() < deadline:
            took = "TOOK OVER" in open(slog.name).read()
            if not took:
                time.sleep(0.005)
        if not took:
            if before == 0:
                info = "killed before the first checkpoint (%.0f ms): nothing was seen, nothing to resume" % (
                    (t_kill - t_start) * 1000)
                return "early", info, c
            raise RuntimeError("secondary never took over (client had seen %d)" % before)
        s2 = connect(scon, time.time() + 3)
        if s2 is None:
            raise RuntimeError("secondary console never opened (client had seen %d)" % before)
        t_up = time.time()
        c.attach(s2)
        # Whatever the secondary replays or answers for the request in flight.
        lines = c.read_lines(1.0) or []
        for line in lines:
            c.check(line)
        for _ in range(3):
            c.sock.sendall(b"incr\n")
            got = c.read_lines(5.0)
            if not got:
                c.errors.append("no reply from the secondary")
                break
            for line in got:
                c.check(line)
        info = "kill at %4.0f ms, client had seen %d, after takeover %d (takeover visible %.0f ms after kill)" % (
            (t_kill - t_start) * 1000, before, c.last(), (t_up - t_kill) * 1000)
        return result, info, c
    finally:
        for p in (pri, sec):
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()
        slog.close()
        plog.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("UNDERSTUDY_SEED", time.time())))
    ap.add_argument("--signal", default="KILL", choices=["KILL", "STOP"])
    ap.add_argument("--transport", default="tcp", choices=["tcp", "tls", "rdma"])
    args = ap.parse_args()
    print("seed %d (--seed to replay), %d trials, SIG%s, %s link" % (args.seed, args.trials, args.signal,
                                                                  args.transport))
    rng = random.Random(args.seed)
    table = oracle(400)
    sig = signal.SIGKILL if args.signal == "KILL" else signal.SIGSTOP
    tmp = tempfile.mkdtemp(prefix="understudy-failover-")
    bad, early, verify_bad = 0, 0, 0
    for t in range(args.trials):
        res, info, c = run_trial(t, rng, table, sig, tmp, args.transport)
        sec_log = open(os.path.join(tmp, "sec%d.log" % t)).read()
        vb = sec_log.count("VERIFY FAILED")
        if VERIFY and res != "early" and "epochs verified equal" not in sec_log:
            c.errors.append("the secondary verified no epoch against the primary")
        verify_bad += vb
        ok = not c.errors and vb == 0
        early += res == "early"
        bad += not ok
        print("%s trial %2d: %s%s" % ("ok  " if ok else "FAIL", t, info, "" if ok else " | " + "; ".join(c.errors[:3])))
        if not ok:
            print("    logs in", tmp)
    print("result: %d trials, %d failed, %d killed before the first checkpoint, standby/primary state "
          "mismatches: %d" % (args.trials, bad, early, verify_bad))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
