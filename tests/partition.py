#!/usr/bin/env python3
"""The partition matrix (issue 10), run by tests/sys_partition.sh inside the
network namespaces it makes (names in PARTITION_NS_P/S/W; addresses
10.214.0.1 primary, .2 secondary, .3 etcd).

Cells: {link-cut (primary<->secondary), pri-witness-cut, sec-witness-cut,
stop-pri (SIGSTOP 3 s, SIGCONT), stop-sec (the same), kill-pri (SIGKILL)}
x {witness, heartbeat}, plus etcd-restart/witness (kill -9 etcd while
protected with --lease-ms 3000, restart it on the same data and port).

Each cell runs a real pair (counter guest) with a client on each console,
inside the agent's namespace, sending "incr" every ~20 ms and logging every
reply line. The agents log their output events (UNDERSTUDY_EVENT_LOG,
CLOCK_MONOTONIC, the clock of time.monotonic_ns() here). Assertions:
  witness, every cell: the old owner's last release precedes the new
    owner's first (gap > 0, printed) and, whatever the event log may miss,
    precedes the new owner's contend event (it releases nothing before);
    every reply any client saw is kept
    (per connection n moves by +1; the values seen have no hole; the
    surviving copy's counter >= the highest value seen); the side that lost
    ownership ends "fenced" and releases nothing after its fenced event;
    where no takeover may happen, the secondary releases nothing, ends
    waiting/standby/contending, and the primary keeps serving;
  heartbeat: stop-pri, stop-sec, kill-pri leave one live copy and lose
    nothing; link-cut shows the documented hole (both copies answer); the
    witness-cut cells do not apply.
  every cell: each agent's event log accounts for all the output its
    client received (else the figures above would mean nothing); this
    check runs last, so a cell that fails it passed all the others.
usage: partition.py [CELL/MODE ...]      (default: all)
       partition.py client PORT FILE | get PORT   (inside a namespace)"""
import json, os, signal, socket, subprocess, sys, tempfile, time

BIN = os.environ.get("UNDERSTUDY_BIN", os.path.join(os.path.dirname(__file__), "..", "build", "understudy"))
NS = {k: os.environ.get("PARTITION_NS_" + k.upper(), "") for k in "psw"}
ADDR = {"p": "10.214.0.1", "s": "10.214.0.2", "w": "10.214.0.3"}
ETCD_PORT, ETCD_PEER_PORT = 2379, 2380
TIMEOUT_MS, LEASE_MS = 300, 1000
RELEASES = ("release", "out", "replay")
CELLS = ["link-cut", "pri-witness-cut", "sec-witness-cut", "stop-pri", "stop-sec", "kill-pri"]
TAKEOVER = {"pri-witness-cut", "stop-pri", "kill-pri"}     # with the witness
HB_TAKEOVER = {"link-cut", "stop-pri", "kill-pri"}         # heartbeat only


def mono():
    return time.monotonic_ns()


# ---- inside a namespace: the console clients ----------------------------------

def client(port, path):
    """incr, wait for a line, pause 20 ms, again; reconnects when the console
    closes. Every line: "<t_ns> <connection> <n> <digest>" (one write each)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    conn = 0
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=0.5)
        except OSError:
            time.sleep(0.02)
            continue
        conn += 1
        s.settimeout(0.05)
        buf, outstanding = b"", False
        while True:
            if not outstanding:
                try:
                    s.sendall(b"incr\n")
                except OSError:
                    break
                outstanding = True
            try:
                data = s.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not data:
                break
            buf += data
            got = False
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                os.write(fd, b"%d %d %s\n" % (mono(), conn, line))
                got = True
            if got:
                outstanding = False
                time.sleep(0.02)
        s.close()


def get(port):
    """The guest's count now: "get", then the last line once the console is
    quiet (replies to requests of a client that went away come first)."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=1)
        s.sendall(b"get\n")
    except OSError:
        return 1
    s.settimeout(0.05)
    end, quiet, buf, last = time.time() + 2.0, None, b"", None
    while time.time() < end and (quiet is None or time.time() < quiet):
        try:
            data = s.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            break
        if not data:
            break
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            last = line.decode().split()[0]
            quiet = time.time() + 0.4
    if last is None:
        return 1
    print(last)
    return 0


# ---- the matrix ------------------------------------------------------------------

class CellFail(Exception):
    pass


def netns(side, args):
    return ["ip", "netns", "exec", NS[side]] + args


class Etcd:
    def __init__(self, tmp):
        self.dir, self.proc = os.path.join(tmp, "etcd"), None
        os.makedirs(self.dir, exist_ok=True)

    def start(self):
        host = ADDR["w"]
        log = open(os.path.join(self.dir, "etcd.log"), "a")
        self.proc = subprocess.Popen(netns("w", [
            "etcd", "--name", "w", "--data-dir", os.path.join(self.dir, "data"),
            "--listen-client-urls", "http://%s:%d" % (host, ETCD_PORT),
            "--advertise-client-urls", "http://%s:%d" % (host, ETCD_PORT),
            "--listen-peer-urls", "http://127.0.0.1:%d" % ETCD_PEER_PORT,
            "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % ETCD_PEER_PORT,
            "--initial-cluster", "w=http://127.0.0.1:%d" % ETCD_PEER_PORT,
            "--heartbeat-interval", "25", "--election-timeout", "250", "--log-level", "error"]),
            stdout=log, stderr=log)
        log.close()
        end = time.time() + 20
        while time.time() < end:
            if '"leader"' in self.call("maintenance/status", {}):
                return
            time.sleep(0.05)
        raise CellFail("etcd did not answer")

    def call(self, path, body):
        out = subprocess.run(netns("w", ["curl", "-s", "-m", "1", "-X", "POST", "-d", json.dumps(body),
                                         "http://%s:%d/v3/%s" % (ADDR["w"], ETCD_PORT, path)]),
                             capture_output=True)
        return out.stdout.decode()

    def get(self, key):
        import base64
        r = self.call("kv/range", {"key": base64.b64encode(key.encode()).decode()})
        try:
            kvs = json.loads(r).get("kvs", [])
        except ValueError:
            return None
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else ""

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def nft_cut(a, b, on):
    """Drops both directions between parties a and b (rules in both)."""
    for x, y in ((a, b), (b, a)):
        if on:
            rules = ("table inet uscut {\n chain i { type filter hook input priority -10; ip saddr %s drop; }\n"
                     " chain o { type filter hook output priority -10; ip daddr %s drop; }\n}\n"
                     % (ADDR[y], ADDR[y]))
            r = subprocess.run(netns(x, ["nft", "-f", "-"]), input=rules.encode(), capture_output=True)
            if r.returncode:
                raise CellFail("nft in %s: %s" % (NS[x], r.stderr.decode().strip()))
        else:
            subprocess.run(netns(x, ["nft", "delete", "table", "inet", "uscut"]), capture_output=True)


def events(path):
    """(t_ns, kind, from, to) per event line; from/to are byte offsets of
    the guest's output stream for the releases, else None."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) >= 2:
                    rel = p[1] in RELEASES and len(p) >= 4
                    out.append((int(p[0]), p[1], int(p[-2]) if rel else None, int(p[-1]) if rel else None))
    except OSError:
        pass
    return out


def client_bytes(path):
    """Bytes of console output a client received (each line and its newline)."""
    try:
        with open(path) as f:
            return sum(len(x[2]) for x in (line.split(" ", 2) for line in f) if len(x) == 3)
    except OSError:
        return 0


def check_event_log(c, side, evs):
    """The event log must account for every byte the agent's client got: a
    release that leaves without an event would make the overlap figures
    meaningless. Slack: the last line (its event is written after the write)."""
    got = client_bytes(c.f("client-%s.txt" % side))
    rel = [e for e in evs if e[1] in RELEASES]
    logged = max(e[3] for e in rel) - min(e[2] for e in rel) if rel else 0
    if got > logged + 64:
        return ("EVENT LOG INCOMPLETE (product bug, see report): the %s's client received %d bytes of output, "
                "its event log accounts for %d" % ("primary" if side == "p" else "secondary", got, logged))
    return None


def replies(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) >= 3 and p[2].isdigit():
                    out.append((int(p[0]), int(p[1]), int(p[2])))
    except OSError:
        pass
    return out


def status(ctl):
    r = subprocess.run([BIN, "status", "--control", ctl, "--json"], capture_output=True, timeout=10)
    try:
        return json.loads(r.stdout.decode())
    except ValueError:
        return {}


class Cell:
    def __init__(self, tmp, idx, name, mode, etcd):
        self.name, self.mode, self.etcd = name, mode, etcd
        self.d = os.path.join(tmp, "%02d-%s-%s" % (idx, name, mode))
        os.makedirs(self.d)
        self.key = "pm/%d" % idx
        self.sport, self.con = 7100 + idx, 7200 + idx
        self.procs = {}
        self.cut = None
        self.notes = []
        self.fo = self.gap = None       # measured, kept for the table if a later check fails

    def f(self, name):
        return os.path.join(self.d, name)

    def start(self, name, side, args, env=None):
        log = open(self.f(name + ".log"), "w")
        e = dict(os.environ)
        e.update(env or {})
        p = subprocess.Popen(netns(side, args), stdout=subprocess.DEVNULL, stderr=log, env=e)
        log.close()
        self.procs[name] = p
        return p

    def log(self, name):
        try:
            with open(self.f(name + ".log")) as f:
                return f.read()
        except OSError:
            return ""

    def wait_log(self, name, pattern, seconds):
        end = time.time() + seconds
        while time.time() < end:
            if pattern in self.log(name):
                return True
            time.sleep(0.05)
        return False

    def start_pair(self, lease_ms=LEASE_MS):
        w = []
        if self.mode == "witness":
            w = ["--witness", "etcd:%s:%d" % (ADDR["w"], ETCD_PORT), "--witness-key", self.key,
                 "--lease-ms", str(lease_ms)]
        self.start("sec", "s", [BIN, "secondary", "--listen", "%s:%d" % (ADDR["s"], self.sport),
                                "--console", "tcp:127.0.0.1:%d" % self.con, "--insecure",
                                "--control", self.f("sec.ctl"), "--failover-timeout-ms", str(TIMEOUT_MS)] + w,
                   {"UNDERSTUDY_EVENT_LOG": self.f("sec.ev")})
        if not self.wait_log("sec", "bound", 10):
            raise CellFail("secondary did not start: %s" % self.log("sec")[-300:])
        self.start("pri", "p", [BIN, "primary", "--guest", "counter", "--console",
                                "tcp:127.0.0.1:%d" % self.con, "--peer", "%s:%d" % (ADDR["s"], self.sport),
                                "--insecure", "--control", self.f("pri.ctl"), "--timeout-ms", str(TIMEOUT_MS)] + w,
                   {"UNDERSTUDY_EVENT_LOG": self.f("pri.ev")})
        if not self.wait_log("pri", "protected: secondary holds", 30):
            raise CellFail("never protected: %s" % self.log("pri")[-400:])
        if w and not self.wait_log("pri", "the witness vouches for the standby", 10):
            raise CellFail("the witness never vouched for the standby: %s" % self.log("pri")[-400:])
        for side in "ps":
            self.start("client-" + side, side, ["python3", os.path.abspath(__file__), "client", str(self.con),
                                                self.f("client-%s.txt" % side)])

    def signal(self, name, sig):
        os.kill(self.procs[name].pid, sig)

    def get(self, side, tries=1):
        """The count of the guest on that side's console, None if it does not
        answer (tries: asked again 1 s later, for a copy that must answer)."""
        for i in range(tries):
            if i:
                time.sleep(1)
            r = subprocess.run(netns(side, ["python3", os.path.abspath(__file__), "get", str(self.con)]),
                               capture_output=True, timeout=20)
            if r.returncode == 0:
                return int(r.stdout.decode().strip())
        return None

    def stop_clients(self):
        for side in "ps":
            p = self.procs.get("client-" + side)
            if p and p.poll() is None:
                p.kill()
                p.wait()

    def teardown(self):
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except OSError:
                    pass
                p.kill()
        for p in self.procs.values():
            p.wait()
        if self.cut:
            nft_cut(*self.cut, on=False)


def check_replies(c, survivor):
    """No acknowledged output lost; returns the highest value seen."""
    seen = []
    for side in "ps":
        rs = replies(c.f("client-%s.txt" % side))
        prev = {}
        for t, conn, n in rs:
            if conn in prev and n != prev[conn] + 1:
                raise CellFail("client %s: after %d came %d on one connection" % (side, prev[conn], n))
            prev[conn] = n
        seen += [n for _, _, n in rs]
    if not seen:
        raise CellFail("no client saw any reply")
    top, values = max(seen), set(seen)
    hole = [n for n in range(1, top + 1) if n not in values]
    if hole:
        raise CellFail("values %s were never seen but %d was: a reply was lost or skipped" % (hole[:5], top))
    count = c.get(survivor, tries=2)
    if count is None:
        raise CellFail("the surviving copy (%s) does not answer get" % ("primary" if survivor == "p" else "secondary"))
    if count < top:
        raise CellFail("the surviving copy counts %d < %d, the highest value a client saw: output lost" % (count, top))
    c.notes.append("seen 1..%d, survivor %d" % (top, count))
    return top


def served_after(c, side, t):
    return [n for tt, _, n in replies(c.f("client-%s.txt" % side)) if tt > t]


def first_reply(c, side):
    return min((t for t, _, _ in replies(c.f("client-%s.txt" % side))), default=None)


def run_cell(c):
    """Runs one cell; returns (failover ms or None, gap ms or None). A cell
    with an incomplete event log runs all its other checks before it fails."""
    mode, name = c.mode, c.name
    c.start_pair()
    time.sleep(1.0)
    t_ev = mono()
    if name == "link-cut":
        c.cut = ("p", "s")
        nft_cut("p", "s", True)
        time.sleep(3.5)
    elif name == "pri-witness-cut":
        c.cut = ("p", "w")
        nft_cut("p", "w", True)
        time.sleep(4.0)
    elif name == "sec-witness-cut":
        c.cut = ("s", "w")
        nft_cut("s", "w", True)
        time.sleep(3.0)
    elif name in ("stop-pri", "stop-sec"):
        who = "pri" if name == "stop-pri" else "sec"
        c.signal(who, signal.SIGSTOP)
        time.sleep(3.0)
        c.signal(who, signal.SIGCONT)
        time.sleep(2.0)
    elif name == "kill-pri":
        c.signal("pri", signal.SIGKILL)
        time.sleep(3.0)
    c.stop_clients()
    pev, sev = events(c.f("pri.ev")), events(c.f("sec.ev"))
    p_rel = [e[0] for e in pev if e[1] in RELEASES]
    s_rel = [e[0] for e in sev if e[1] in RELEASES]
    p_fenced = [e[0] for e in pev if e[1] == "fenced"]
    contend = [e[0] for e in sev if e[1] == "contend"]
    takeover = name in (TAKEOVER if mode == "witness" else HB_TAKEOVER)
    pri_alive = c.procs["pri"].poll() is None
    pst = status(c.f("pri.ctl")) if pri_alive else {}
    sst = status(c.f("sec.ctl"))
    log_bug = check_event_log(c, "p", pev) or check_event_log(c, "s", sev)
    fo = gap = None

    if mode == "heartbeat" and name == "link-cut":
        # The documented hole: both copies run and answer their clients.
        p_after, s_after = served_after(c, "p", t_ev + 1e9), served_after(c, "s", t_ev)
        if not p_after or not s_after:
            raise CellFail("expected two live copies (the documented hole), saw primary %d replies, "
                           "secondary %d replies after the cut" % (len(p_after), len(s_after)))
        first_new = min(s_rel + [first_reply(c, "s")])
        fo = (first_new - t_ev) / 1e6
        c.notes.append("UNSAFE as documented: two live copies under a partition without a witness "
                       "(primary answered %d, secondary %d after the cut)" % (len(p_after), len(s_after)))
    elif takeover:
        # The new owner's first release: its first event, or the first reply
        # its client saw if that came earlier (an event log missing releases).
        seen_s = first_reply(c, "s")
        if not s_rel and seen_s is None:
            raise CellFail("no takeover: the secondary released nothing; its log ends: %s" % c.log("sec")[-300:])
        first_new = min(s_rel + ([seen_s] if seen_s is not None else []))
        last_old = max(p_rel, default=0)
        gap = (first_new - last_old) / 1e6
        fo = (first_new - t_ev) / 1e6
        if first_new < t_ev:
            raise CellFail("the secondary released before the event")
        if gap <= 0:
            raise CellFail("OVERLAP: the new owner released %.1f ms before the old owner's last release" % -gap)
        if mode == "witness":
            # Sound whatever the event log misses: the standby releases
            # nothing before it contends for the key.
            if not contend:
                raise CellFail("the secondary took over without a contend event")
            if contend[0] <= last_old:
                raise CellFail("OVERLAP: the secondary contended %.1f ms before the old owner's last release"
                               % ((last_old - contend[0]) / 1e6))
            if [t for t in s_rel if t < contend[0]]:
                raise CellFail("the secondary released before it contended for the key")
            c.notes.append("old owner's last release -> new owner contends %.1f ms" % ((contend[0] - last_old) / 1e6))
        if mode == "witness" and name != "kill-pri":
            if not p_fenced:
                raise CellFail("the old primary has no fenced event; its log ends: %s" % c.log("pri")[-400:])
            if [t for t in p_rel if t > p_fenced[0]]:
                raise CellFail("the old primary released after its fenced event")
            if pst.get("state") != "fenced":
                raise CellFail("the old primary's state is %r, want fenced%s" % (
                    pst.get("state"), "" if pri_alive else " (it exited %s; log ends: %s)" % (
                        c.procs["pri"].returncode, c.log("pri")[-300:])))
            c.notes.append("old primary fenced %.0f ms after the event" % ((p_fenced[0] - t_ev) / 1e6))
        if mode == "witness" and (sst.get("role"), sst.get("state")) != ("primary", "unprotected"):
            raise CellFail("the new owner is %r/%r, want primary/unprotected"
                           % (sst.get("role"), sst.get("state")))
        if mode == "heartbeat" and name == "stop-pri":
            # One live copy: the old primary must not answer any more.
            if pri_alive and c.get("p") is not None:
                raise CellFail("TWO LIVE COPIES: the old primary still answers after SIGCONT")
            c.notes.append("old primary %s" % ("exited %s" % c.procs["pri"].returncode if not pri_alive
                                               else "does not answer"))
        check_replies(c, "s")
    else:
        seen_s = first_reply(c, "s")
        if s_rel or seen_s is not None:
            raise CellFail("the secondary released output (%d events, its client saw %s): it took over from "
                           "a live owner" % (len(s_rel), "replies" if seen_s else "nothing"))
        if sst.get("state") not in ("standby", "waiting", "contending"):
            raise CellFail("the secondary's state is %r" % sst.get("state"))
        if pst.get("state") not in ("protected", "unprotected"):
            raise CellFail("the primary's state is %r, want it serving" % pst.get("state"))
        if p_fenced:
            raise CellFail("the primary fenced although it kept the witness")
        if not served_after(c, "p", t_ev + 1.5e9):
            raise CellFail("the primary's client got no reply later than 1.5 s after the event")
        c.notes.append("no takeover; secondary %s, primary %s" % (sst.get("state"), pst.get("state")))
        check_replies(c, "p")
    c.fo, c.gap = fo, gap
    if log_bug:
        raise CellFail("all other checks passed, but " + log_bug)
    return fo, gap


def run_etcd_restart(c):
    """kill -9 etcd while protected (--lease-ms 3000), restart it on the same
    data and port: the primary stays protected and the owner."""
    c.start_pair(lease_ms=3000)
    time.sleep(1.0)
    owner0 = c.etcd.get(c.key + "/owner")
    t_ev = mono()
    c.etcd.kill()
    time.sleep(0.3)
    c.etcd.start()
    down_ms = (mono() - t_ev) / 1e6
    time.sleep(4.0)
    c.stop_clients()
    pev, sev = events(c.f("pri.ev")), events(c.f("sec.ev"))
    if [e for e in pev + sev if e[1] == "fenced"]:
        raise CellFail("fenced after an etcd restart of %.0f ms (lease 3000 ms)" % down_ms)
    if [e for e in sev if e[1] in RELEASES] or first_reply(c, "s") is not None:
        raise CellFail("the secondary released output")
    pst = status(c.f("pri.ctl"))
    if pst.get("state") != "protected":
        raise CellFail("the primary is %r after the etcd restart, want protected" % pst.get("state"))
    owner1 = c.etcd.get(c.key + "/owner")
    if not owner0 or owner1 != owner0:
        raise CellFail("owner before %r, after %r" % (owner0, owner1))
    if not served_after(c, "p", t_ev + down_ms * 1e6):
        raise CellFail("the primary's client got no reply after etcd came back")
    check_replies(c, "p")
    c.notes.append("etcd down %.0f ms; owner kept (%s); primary protected, nothing fenced" % (down_ms, owner1))
    c.fo = down_ms
    log_bug = check_event_log(c, "p", pev)
    if log_bug:
        raise CellFail("all other checks passed, but " + log_bug)
    return down_ms, None


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "client":
        client(int(sys.argv[2]), sys.argv[3])
        return 0
    if len(sys.argv) >= 3 and sys.argv[1] == "get":
        return get(int(sys.argv[2]))
    if not all(NS.values()):
        print("SKIP: run by tests/sys_partition.sh (it makes the namespaces)")
        return 77
    want = sys.argv[1:]
    plan = [(n, m) for m in ("witness", "heartbeat") for n in CELLS] + [("etcd-restart", "witness")]
    plan = [x for x in plan if not want or "%s/%s" % x in want]
    tmp = tempfile.mkdtemp(prefix="understudy-partition-")
    etcd = Etcd(tmp)
    t0 = time.time()
    rows, failed = [], 0
    try:
        if any(m == "witness" for _, m in plan):
            etcd.start()
        for i, (name, mode) in enumerate(plan):
            if mode == "heartbeat" and name in ("pri-witness-cut", "sec-witness-cut"):
                rows.append((name, mode, "n/a", None, None, "no witness to cut from in heartbeat-only mode"))
                print("n/a  - %s/%s: does not apply to heartbeat-only (no witness)" % (name, mode))
                continue
            c = Cell(tmp, i, name, mode, etcd)
            try:
                fo, gap = (run_etcd_restart if name == "etcd-restart" else run_cell)(c)
                verdict = "ok"
                print("ok   - %s/%s: %s" % (name, mode, "; ".join(c.notes)))
            except CellFail as e:
                failed += 1
                fo, gap = c.fo, c.gap
                verdict = "FAIL"
                print("FAIL - %s/%s: %s (logs in %s)" % (name, mode, e, c.d))
                c.notes.insert(0, "[event log incomplete: product bug]" if "EVENT LOG INCOMPLETE" in str(e)
                               else "FAIL: %s" % e)
                with open(c.f("FAIL"), "w") as f:
                    f.write("%s\n" % e)
            finally:
                c.teardown()
            rows.append((name, mode, verdict, fo, gap, "; ".join(c.notes)))
    finally:
        etcd.kill()
    print("\n%-16s %-9s %-5s %13s %14s  %s" % ("cell", "mode", "", "failover ms", "gap ms", "notes"))
    for name, mode, verdict, fo, gap, notes in rows:
        print("%-16s %-9s %-5s %13s %14s  %s" % (
            name, mode, verdict, "-" if fo is None else "%.0f" % fo, "-" if gap is None else "%.1f" % gap,
            notes[:110]))
    print("(failover: event -> first release of the new owner; etcd-restart: etcd downtime. gap: last release "
          "of the old owner -> first release of the new, must be > 0)")
    print("partition matrix: %d cells, %d failed, %.0f s" % (len(rows), failed, time.time() - t0))
    if failed:
        print("logs kept in %s" % tmp)
        return 1
    keep = os.environ.get("PARTITION_KEEP")
    if keep:
        subprocess.run(["cp", "-r", tmp, keep])
    subprocess.run(["rm", "-rf", tmp])
    return 0


if __name__ == "__main__":
    sys.exit(main())
