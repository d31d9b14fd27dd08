#!/usr/bin/env python3
"""Output commit checked by the order of events, not by a timing bound.

A protected counter pair; the primary writes its output-commit events to
UNDERSTUDY_EVENT_LOG (capture N, ack N, release N from to; CLOCK_MONOTONIC
ns) and this script puts its own actions on the same clock
(time.monotonic_ns): requests sent, replies received, the secondary
SIGSTOPped and SIGCONTed. The primary's link runs through a frame-aware
proxy here, which at the end tears one epoch: it forwards the epoch's begin
and first page batch, then the primary is killed and the link cut.

Asserted:
 1. every release of epoch N comes after an ACK of N or later;
 2. while the secondary is stopped, no ACK and no release of an epoch
    captured after the stop; no reply to a request sent after the stop
    arrives before the SIGCONT;
 3. every reply's n and digest equal an uninterrupted run's, n moving by +1
    (a line replayed after takeover may repeat);
 4. after the torn epoch the secondary resumes from the last epoch the
    primary saw acknowledged or a later one (standby = last acknowledged
    checkpoint), verified equal to the primary (UNDERSTUDY_VERIFY, also
    at takeover), and the client carries on consistently.

usage: commit_order.py [--stops N] [--stop-ms MS] [--seed S]; exit 0 when all hold."""
import argparse, os, random, re, signal, socket, struct, subprocess, sys, tempfile, threading, time

BIN = os.environ.get("UNDERSTUDY_BIN", os.path.join(os.path.dirname(__file__), "..", "build", "understudy"))


def nested(host, value):
    """host on a host's own KVM, value inside the nested VM of
    tests/nested/run.sh (UNDERSTUDY_NESTED=1), where QEMU's emulator stalls
    an agent for a second or more at a time (tests/lib.sh nested): for the
    bounds that are not the property under test."""
    return value if os.environ.get("UNDERSTUDY_NESTED") == "1" else host


X = nested(1, 4)    # how much longer a wait for a step or for progress lasts
HDR = struct.Struct("<IHHII")
T_BEGIN, T_END, T_ACK, T_PAGES = 2, 5, 6, 32
# The secondary's failover timeout. Verify mode digests all RAM on both
# sides of every epoch, and a secondary SIGCONTed after a stop applies the
# backlog in one go: the silence it then judges is measured from the start
# of that read, so a short timeout makes it take over with the primary alive.
# In the nested VM the emulator's stalls come on top: 6 s there.
TIMEOUT_MS = nested(2000, 6000)
MEM = ["--mem", "16M"]
errors = []


def now():
    return time.monotonic_ns()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def oracle(count):
    reqs = "incr\n" * count + "halt\n"
    out = subprocess.run([BIN, "run", "--guest", "counter", "--console", "stdio"] + MEM, input=reqs.encode(),
                         capture_output=True, timeout=120, check=True).stdout.decode()
    table = {}
    for line in out.splitlines():
        n, d = line.split()
        table[int(n)] = d
    assert len(table) == count, "oracle run incomplete"
    return table


def varint_field1(payload):
    """Field 1 (varint) of a protobuf message: the epoch of EpochBegin / Ack."""
    if not payload or payload[0] != 0x08:
        return 0
    v, shift = 0, 0
    for b in payload[1:]:
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    return v


class Proxy(threading.Thread):
    """primary <-> secondary, frame by frame. Armed, it forwards the next
    epoch up to the frame tears_at() picks (here its first page batch), waits
    in before_tear(), runs on_tear() and cuts both sides. An epoch without
    such a frame goes through whole."""

    def __init__(self, sec_port):
        super().__init__(daemon=True)
        self.sec_port = sec_port
        self.lis = socket.socket()
        self.lis.bind(("127.0.0.1", 0))
        self.lis.listen(1)
        self.port = self.lis.getsockname()[1]
        self.armed = threading.Event()
        self.done = threading.Event()
        self.on_tear = None
        self.torn_epoch = 0
        self.max_ack = 0

    def back(self, b, a):
        buf = b""
        while True:
            try:
                data = b.recv(65536)
            except OSError:
                return
            if not data:
                return
            buf += data
            while len(buf) >= 16:
                _, _, typ, length, _ = HDR.unpack_from(buf)
                if len(buf) < 16 + length:
                    break
                frame, buf = buf[:16 + length], buf[16 + length:]
                if typ == T_ACK:
                    self.max_ack = max(self.max_ack, varint_field1(frame[16:]))
                try:
                    a.sendall(frame)
                except OSError:
                    return

    def tears_at(self, typ, frame):
        return typ == T_PAGES

    def before_tear(self):
        # A secondary that acknowledged before staging would do it now.
        end = time.time() + 0.3
        while time.time() < end and self.max_ack < self.torn_epoch:
            time.sleep(0.01)
        time.sleep(0.05)    # let that ACK reach the primary

    def run(self):
        a, _ = self.lis.accept()
        b = socket.create_connection(("127.0.0.1", self.sec_port))
        threading.Thread(target=self.back, args=(b, a), daemon=True).start()
        buf, held, tearing = b"", b"", False
        while True:
            try:
                data = a.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            buf += data
            out = b""
            while len(buf) >= 16:
                _, _, typ, length, _ = HDR.unpack_from(buf)
                if len(buf) < 16 + length:
                    break
                frame, buf = buf[:16 + length], buf[16 + length:]
                if self.armed.is_set() and not tearing and typ == T_BEGIN:
                    tearing, held = True, b""
                    self.torn_epoch = varint_field1(frame[16:])
                if not tearing:
                    out += frame
                    continue
                held += frame
                if typ == T_END:        # nothing to tear at in this one: let it through whole
                    out += held
                    tearing, held = False, b""
                elif self.tears_at(typ, frame):
                    b.sendall(out + held)
                    self.before_tear()
                    self.on_tear()
                    for s in (a, b):
                        s.close()
                    self.done.set()
                    return
            if out:
                b.sendall(out)
        for s in (a, b):
            s.close()
        self.done.set()


class Client:
    def __init__(self, table, sock):
        self.table, self.sock, self.buf = table, sock, b""
        self.seen = []            # (n, digest)
        self.replies = []         # (recv_ns, n)
        self.sent = []            # send_ns of each request
        self.replay = False
        sock.settimeout(0.02)

    def attach(self, sock):
        """The console of the new owner: it may first replay acknowledged
        output the dead primary had perhaps not released (an exact repeat)."""
        self.sock, self.buf = sock, b""
        self.replay = True
        sock.settimeout(0.02)

    def send(self, k=1):
        for _ in range(k):
            self.sent.append(now())
        self.sock.sendall(b"incr\n" * k)

    def poll(self, until_ns):
        """Reads replies until until_ns; returns how many arrived."""
        got = 0
        while now() < until_ns:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            if not data:
                raise RuntimeError("console closed")
            t = now()
            self.buf += data
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                self.check(line.decode(), t)
                got += 1
        return got

    def wait(self, k, secs):
        end = now() + int(secs * 1e9)
        got = 0
        while got < k and now() < end:
            got += self.poll(min(end, now() + 20_000_000))
        return got

    def check(self, line, t):
        try:
            n, d = line.split()
            n = int(n)
        except ValueError:
            errors.append("garbled reply %r" % line)
            return
        if self.table.get(n) != d:
            errors.append("reply %r: the uninterrupted run gave %r for %d" % (line, self.table.get(n), n))
        if self.seen:
            pn, pd = self.seen[-1]
            top = max(x for x, _ in self.seen)
            if self.replay and 1 <= n <= top + 1:
                pass                   # a replay starts at a line already seen, or goes on
            elif not (n == pn + 1 or (n == pn and d == pd)):
                errors.append("after %d came %d" % (pn, n))
        self.replay = False
        self.seen.append((n, d))
        self.replies.append((t, n))


def wait_log(path, text, secs):
    end = time.time() + secs
    while time.time() < end:
        with open(path, errors="replace") as f:
            if text in f.read():
                return True
        time.sleep(0.05)
    return False


def stopped(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stops", type=int, default=3)
    ap.add_argument("--stop-ms", type=int, default=700)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("UNDERSTUDY_SEED", time.time())))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    print("seed %d (--seed to replay), %d stops of %d ms" % (args.seed, args.stops, args.stop_ms))
    table = oracle(300)
    tmp = tempfile.mkdtemp(prefix="understudy-commit-")
    evlog = os.path.join(tmp, "events.log")
    slog_path, plog_path = os.path.join(tmp, "sec.log"), os.path.join(tmp, "pri.log")
    sport, scon, pcon = free_port(), free_port(), free_port()
    env = dict(os.environ, UNDERSTUDY_VERIFY="1", UNDERSTUDY_EVENT_LOG=evlog)
    slog, plog = open(slog_path, "w"), open(plog_path, "w")
    sec = subprocess.Popen([BIN, "secondary", "--listen", "127.0.0.1:%d" % sport, "--console",
                            "tcp:127.0.0.1:%d" % scon, "--failover-timeout-ms", str(TIMEOUT_MS), "--insecure"],
                           stderr=slog, env=dict(env, UNDERSTUDY_EVENT_LOG=""))
    pri, windows, c, proxy = None, [], None, None
    try:
        if not wait_listen(sport):
            raise RuntimeError("secondary did not listen")
        proxy = Proxy(sport)
        proxy.start()
        # The primary gives up on a silent secondary only after 20 s: the stops stay protected.
        pri = subprocess.Popen([BIN, "primary", "--guest", "counter", "--console", "tcp:127.0.0.1:%d" % pcon,
                                "--peer", "127.0.0.1:%d" % proxy.port, "--epoch-ms", "25", "--timeout-ms", "20000",
                                "--insecure"] + MEM, stderr=plog, env=env)
        proxy.on_tear = lambda: pri.send_signal(signal.SIGKILL)
        if not wait_log(plog_path, "protected: secondary holds", 15):
            raise RuntimeError("never protected")
        c = Client(table, connect(pcon))
        for k in range(args.stops):
            for _ in range(rng.randint(3, 8)):     # a conversation, some requests pipelined
                k_req = rng.choice((1, 1, 2, 3))
                c.send(k_req)
                if c.wait(k_req, 10) < k_req:
                    raise RuntimeError("no reply while the secondary runs")
            if rng.random() < 0.5:
                c.send(rng.choice((1, 2)))          # in flight across the stop
            sec.send_signal(signal.SIGSTOP)
            while not stopped(sec.pid):
                time.sleep(0.001)
            t_stop = now()
            nreq = rng.choice((1, 2, 3))
            first_req = len(c.sent)
            c.send(nreq)
            c.poll(t_stop + args.stop_ms * 1_000_000)
            t_cont = now()
            sec.send_signal(signal.SIGCONT)
            windows.append((t_stop, t_cont, first_req))
            pending = len(c.sent) - len(c.replies)
            if c.wait(pending, 10) < pending:
                raise RuntimeError("requests sent while the secondary was stopped got no reply after SIGCONT")
        # Tear an epoch: the next one with pages (the request's) goes half-way, the primary dies.
        proxy.armed.set()
        c.send(1)
        proxy.done.wait(10)
        if not proxy.done.is_set():
            raise RuntimeError("no epoch was torn")
        pri.wait()
        s2 = connect(scon, 5 + TIMEOUT_MS / 1000)
        if s2 is None:
            raise RuntimeError("secondary console never opened after the torn epoch")
        c.attach(s2)
        c.poll(now() + 500_000_000)                 # replayed output, the reply in flight
        for _ in range(3):
            c.send(1)
            if c.wait(1, 5 * X) < 1:
                errors.append("no reply from the secondary after takeover")
                break
    except RuntimeError as e:
        errors.append(str(e))
    finally:
        for p in (pri, sec):
            if p and p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGKILL)
                p.wait()
        slog.close()
        plog.close()
    check_events(evlog, windows, c, slog_path, plog_path, proxy)
    goodbye(tmp, table)
    print("logs in", tmp)
    for e in errors[:10]:
        print("FAIL:", e)
    sys.exit(1 if errors else 0)


def goodbye(tmp, table):
    """One live copy: a primary whose guest powers off says goodbye; the
    secondary stands down and never runs the guest (no takeover)."""
    slog_path, plog_path = os.path.join(tmp, "sec-bye.log"), os.path.join(tmp, "pri-bye.log")
    sport, scon, pcon = free_port(), free_port(), free_port()
    slog, plog = open(slog_path, "w"), open(plog_path, "w")
    sec = subprocess.Popen([BIN, "secondary", "--listen", "127.0.0.1:%d" % sport, "--console",
                            "tcp:127.0.0.1:%d" % scon, "--failover-timeout-ms", str(nested(300, 3000)),
                            "--insecure"], stderr=slog)
    pri = None
    try:
        if not wait_listen(sport):
            raise RuntimeError("secondary did not listen")
        pri = subprocess.Popen([BIN, "primary", "--guest", "counter", "--console", "tcp:127.0.0.1:%d" % pcon,
                                "--peer", "127.0.0.1:%d" % sport, "--insecure"] + MEM, stderr=plog)
        if not wait_log(plog_path, "protected: secondary holds", 15):
            raise RuntimeError("goodbye pair never protected")
        c = Client(table, connect(pcon))
        c.send(2)
        if c.wait(2, 10) < 2:
            raise RuntimeError("goodbye pair: no reply")
        c.sock.sendall(b"halt\n")
        if pri.wait(15) != 0:
            errors.append("primary exit %d after the guest powered off" % pri.returncode)
        # The secondary must end without a takeover; give a takeover time to happen.
        try:
            sec.wait(1 + 2 * 0.3)
        except subprocess.TimeoutExpired:
            pass
        slog.flush()
        if "TOOK OVER" in open(slog_path).read():
            errors.append("the secondary took over after the primary said goodbye: the guest ran again")
        elif sec.poll() is None:
            errors.append("the secondary neither stood down nor took over after the goodbye")
        else:
            print("goodbye: the guest powered off on the primary; the secondary stood down, no takeover")
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        errors.append(str(e))
    finally:
        for p in (pri, sec):
            if p and p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        slog.close()
        plog.close()


def wait_listen(port):
    end = time.time() + 10
    while time.time() < end:
        s = socket.socket()
        if s.connect_ex(("127.0.0.1", port)) == 0:
            s.close()
            return True
        s.close()
        time.sleep(0.05)
    return False


def connect(port, secs=5):
    end = time.time() + secs
    while time.time() < end:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=0.5)
        except OSError:
            time.sleep(0.01)
    return None


def check_events(evlog, windows, c, slog_path, plog_path, proxy):
    ev = []
    for line in open(evlog) if os.path.exists(evlog) else []:
        f = line.split()
        ev.append((int(f[0]), f[1], [int(x) for x in f[2:]]))
    captures = {a[0]: t for t, k, a in ev if k == "capture"}
    acks = [(t, a[0]) for t, k, a in ev if k == "ack"]
    rels = [(t, a[0], a[1], a[2]) for t, k, a in ev if k == "release"]
    if not acks or not rels:
        errors.append("event log has %d acks and %d releases: nothing to check" % (len(acks), len(rels)))
    # 1. no output of epoch N before ACK(N)
    early = 0
    for t, n, b0, b1 in rels:
        if not any(ta <= t and e >= n for ta, e in acks):
            early += 1
            if early <= 3:
                errors.append("epoch %d's output (bytes %d-%d) released before ACK(%d)" % (n, b0, b1, n))
    # released byte ranges follow each other
    for (_, _, _, e1), (_, n2, b2, _) in zip(rels, rels[1:]):
        if b2 != e1:
            errors.append("release of epoch %d starts at byte %d, the previous ended at %d" % (n2, b2, e1))
            break
    # 2. nothing new while the secondary was stopped
    in_flight = 0
    for t_stop, t_cont, first_req in windows:
        for t, e in acks:
            if t_stop < t < t_cont:
                if captures.get(e, 0) > t_stop:
                    errors.append("ACK(%d) while the secondary was stopped, for an epoch captured after the stop" % e)
                in_flight += 1
        for t, n, b0, b1 in rels:
            if t_stop < t < t_cont and captures.get(n, 0) > t_stop:
                errors.append("epoch %d (captured after the stop) released while the secondary was stopped" % n)
        if c:
            for i, (t, n) in enumerate(c.replies):
                if i >= first_req and t < t_cont and c.sent[i] > t_stop:
                    errors.append("reply %d to a request sent while the secondary was stopped arrived before SIGCONT" % n)
    # 4. the standby resumed from the last acknowledged checkpoint
    slog, plog = open(slog_path).read(), open(plog_path).read()
    last_ack = max((e for _, e in acks), default=0)
    m = re.search(r"guest resumed from epoch (\d+)", slog)
    if not m:
        errors.append("the secondary did not take over after the torn epoch")
    else:
        resumed = int(m.group(1))
        if resumed < last_ack:
            errors.append("standby resumed from epoch %d, but the primary had ACK(%d): acknowledged state lost" %
                          (resumed, last_ack))
        if proxy and resumed >= proxy.torn_epoch:
            errors.append("standby resumed from epoch %d, the torn one was %d" % (resumed, proxy.torn_epoch))
    if slog.count("TOOK OVER") != 1 or "UNPROTECTED" in plog:
        errors.append("a takeover or loss of protection other than the one after the torn epoch")
    if "VERIFY FAILED" in slog:
        errors.append("standby differs from the primary: " +
                      [l for l in slog.splitlines() if "VERIFY FAILED" in l][0])
    if "epochs verified equal" not in slog:
        errors.append("no epoch was verified")
    print("events: %d captures, %d acks, %d releases; %d stop windows (%d ACKs in flight at a stop read "
          "during it); last ACK %d, torn epoch %d, %s; %d replies" %
          (len(captures), len(acks), len(rels), len(windows), in_flight, last_ack,
           proxy.torn_epoch if proxy else 0, m.group(0) if m else "no takeover", len(c.replies) if c else 0))


if __name__ == "__main__":
    main()
