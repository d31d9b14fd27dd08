#!/usr/bin/env python3
"""The Linux guest's TCP service (ut.mode=server of tests/linux_initramfs.sh)
from the outside: one connection, request lines answered "SEQ LINE" once
the line is fsynced to /mnt/requests.log on the guest's disk; and that log
read back from a disk image on the host.

As a command (for the shell tests):
  linuxguest.py requests IP PORT N [--poweroff]
      N requests "rK" over one connection (each answered before the next);
      prints the replies; --poweroff then sends "ut-poweroff" (the guest
      unmounts its disk and powers off). Exit 1 on a bad reply.
  linuxguest.py log IMAGE
      prints /requests.log of the ext4 image (read from a copy, its journal
      replayed by e2fsck: an image whose guest died or was killed).
  linuxguest.py check IMAGE REPLIES_FILE
      every reply line of REPLIES_FILE is in the image's log with its
      number; the log's numbers run 1..N without a gap. Exit 1 if not.

As a module, also what the tests of a protected Linux guest share
(linux_failover.py, linux_lifecycle.py): Lab (the binary, the agents'
namespace, a temporary directory), Agent (an understudy process there with
its log, event log, control socket and console), secondary(), Client (a
thread of requests on one connection), wait_until, event_gist."""
import functools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import guestnet


class Conn:
    """One TCP connection to the guest's server, never reopened: losing it
    (a reset, an EOF, a timeout) is a failure of the test that uses it."""

    def __init__(self, ip, port, connect_s=60.0, reply_s=120.0):
        self.reply_s = reply_s
        end = time.time() + connect_s
        while True:
            try:
                self.s = socket.create_connection((ip, port), timeout=2)
                break
            except OSError:
                if time.time() > end:
                    raise
                time.sleep(0.2)
        self.s.settimeout(reply_s)
        self.buf = b""
        self.last = None     # the last sequence number seen

    def line(self):
        while b"\n" not in self.buf:
            d = self.s.recv(4096)
            if not d:
                raise ConnectionError("the server closed the connection (EOF)")
            self.buf += d
        ln, self.buf = self.buf.split(b"\n", 1)
        return ln.decode(errors="replace").rstrip("\r")

    def request(self, payload):
        """Sends payload, returns (seq, reply line); raises ValueError on a
        reply that does not echo payload or whose number is not the last
        one plus 1 (the first one is taken as it is)."""
        self.s.sendall(payload.encode() + b"\n")
        r = self.line()
        f = r.split(" ", 1)
        if len(f) != 2 or not f[0].isdigit() or f[1] != payload:
            raise ValueError("reply %r to %r" % (r, payload))
        seq = int(f[0])
        if self.last is not None and seq != self.last + 1:
            raise ValueError("reply %r after number %d: a gap or a repeat" % (r, self.last))
        self.last = seq
        return seq, r

    def poweroff(self):
        self.s.sendall(b"ut-poweroff\n")
        try:
            return self.line()
        except OSError:
            return ""

    def close(self):
        self.s.close()


def read_log(img):
    """The lines of /requests.log in the ext4 image img, read from a copy
    whose journal e2fsck replayed (the image itself is left as it is)."""
    with tempfile.TemporaryDirectory() as d:
        cp = os.path.join(d, "img")
        shutil.copyfile(img, cp)
        fsck = subprocess.run(["e2fsck", "-fy", cp], capture_output=True, text=True)
        if fsck.returncode > 1:   # 1: errors corrected (a replayed journal)
            raise RuntimeError("e2fsck on a copy of %s: exit %d: %s" %
                               (img, fsck.returncode, (fsck.stdout + fsck.stderr)[-400:]))
        out = subprocess.run(["debugfs", "-R", "cat /requests.log", cp], capture_output=True,
                             text=True)
        if out.returncode != 0:
            raise RuntimeError("debugfs on %s: %s" % (img, out.stderr[-300:]))
        return out.stdout.splitlines()


def log_errors(lines, replies):
    """Problems (text) of the guest's log lines against the replies the
    client received: the numbers must run 1..N, every reply must be there."""
    errs = []
    have = {}
    for i, ln in enumerate(lines):
        f = ln.split(" ", 1)
        if not f[0].isdigit() or int(f[0]) != i + 1:
            errs.append("log line %d is %r: numbers do not run 1..N" % (i + 1, ln))
            break
        have[int(f[0])] = ln
    missing = [r for r in replies if have.get(int(r.split(" ", 1)[0])) != r]
    if missing:
        errs.append("%d of %d replies the client received are not in the guest's log, first %r "
                    "(the log has %r there)" % (len(missing), len(replies), missing[0],
                                                have.get(int(missing[0].split(" ", 1)[0]))))
    return errs


def say(msg):
    print(msg, flush=True)


def wait_until(cond, secs):
    """True once cond() is, polled every 50 ms for secs."""
    end = time.time() + secs
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def event_gist(path):
    """How many events of each kind an event log holds, and its last lines."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return "none"
    kinds = {}
    for ln in lines:
        w = ln.split()
        if len(w) > 1:
            kinds[w[1]] = kinds.get(w[1], 0) + 1
    return "%s; last: %s" % (kinds, " | ".join(lines[-4:]))


class Lab:
    """Where a test's agents run: the understudy binary, the network
    namespace VM_NS (the taps' bridge), a directory for their files, and
    how long a boot (or a step as slow) may take."""

    def __init__(self, bin_path, vm_ns, tmp, boot_s):
        self.bin, self.vm_ns, self.tmp, self.boot_s = bin_path, vm_ns, tmp, boot_s
        self.ns = functools.partial(guestnet.in_ns, vm_ns)

    def free_port(self):
        return guestnet.free_port_in(self.vm_ns)

    def cli(self, args, secs=None):
        """An understudy command (not an agent) in VM_NS: its CompletedProcess."""
        return subprocess.run(self.ns([self.bin] + args), capture_output=True, text=True,
                              timeout=secs or self.boot_s)


# Reads an agent's console (tcp, in VM_NS) into a file, for the record:
# connects when the port takes it, to EOF.
CONSOLE_READER = r"""
import socket, sys, time
end = time.time() + float(sys.argv[3])
while True:
    try:
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
        break
    except OSError:
        if time.time() > end:
            sys.exit(1)
        time.sleep(0.2)
with open(sys.argv[2], "ab", buffering=0) as f:
    while True:
        d = s.recv(4096)
        if not d:
            break
        f.write(d)
"""


class Agent:
    """An understudy process in the lab's VM_NS, with its log, event log,
    control socket, console port (read into a file) and disk image."""

    def __init__(self, lab, name, tap, img):
        self.lab, self.name, self.tap, self.img = lab, name, tap, img
        self.log = os.path.join(lab.tmp, name + ".log")
        self.events = os.path.join(lab.tmp, name + ".events")
        self.ctl = os.path.join(lab.tmp, name + ".ctl")
        self.console = os.path.join(lab.tmp, name + ".console")
        self.con_port = lab.free_port()
        self.p = self.reader = None

    def start(self, args, env=None):
        """`understudy ARGS --control --console tcp:` with env added to ours."""
        self.p = subprocess.Popen(self.lab.ns([self.lab.bin] + args + [
            "--control", self.ctl, "--console", "tcp:127.0.0.1:%d" % self.con_port]),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(self.log, "w"),
            env=dict(os.environ, UNDERSTUDY_EVENT_LOG=self.events, **(env or {})))
        self.reader = subprocess.Popen(self.lab.ns([sys.executable, "-c", CONSOLE_READER,
                                                    str(self.con_port), self.console,
                                                    str(self.lab.boot_s)]),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def has(self, pat, secs=0):
        """The agent's log matches the regular expression pat (within secs)."""
        return guestnet.wait_text(self.log, pat, secs)

    def gist(self):
        con = ""
        try:
            with open(self.console, errors="replace") as f:
                ut = [ln.strip() for ln in f if ln.startswith("ut: ") or "panic" in ln]
            con = "; console: " + " | ".join(ut[-4:])
        except FileNotFoundError:
            pass
        return "%s: %s%s" % (self.name, guestnet.log_gist(self.log), con)

    def stop(self):
        for p in (self.p, self.reader):
            if p and p.poll() is None:
                p.kill()
                p.wait()


def secondary(lab, name, tap, sync, failover_ms, handshake_ms, env=None):
    """A secondary Agent on tap with an empty image (--disk-sync sync),
    once it listens (its .port)."""
    img = os.path.join(lab.tmp, name + ".img")
    open(img, "w").close()
    a = Agent(lab, name, tap, img)
    a.port = lab.free_port()
    a.start(["secondary", "--listen", "127.0.0.1:%d" % a.port, "--failover-timeout-ms",
             str(failover_ms), "--handshake-timeout-ms", str(handshake_ms), "--insecure",
             "--net", "tap:" + tap, "--disk", img, "--disk-sync", sync], env)
    if not a.has("waiting for a primary", 20):
        raise RuntimeError("secondary %s never listened: %s" % (name, a.gist()))
    return a


class Client(threading.Thread):
    """Requests "c<k>" on one connection (a Conn), one after the other,
    until told to stop or the connection fails (then self.problem says
    why). hold() parks it between two requests (it returns once none is
    in flight), release() lets it go on."""

    def __init__(self, conn):
        super().__init__(daemon=True)
        self.conn = conn
        self.replies = []      # (time, reply line)
        self.problem = None
        self.stop = False
        self.cv = threading.Condition()
        self.held = self.parked = False

    def run(self):
        k = 0
        while not self.stop:
            with self.cv:
                while self.held and not self.stop:
                    self.parked = True
                    self.cv.notify_all()
                    self.cv.wait()
                self.parked = False
            if self.stop:
                return
            try:
                _, r = self.conn.request("c%d" % k)
            except (OSError, ValueError) as e:
                self.problem = "request c%d after %d replies: %s: %s" % (
                    k, len(self.replies), type(e).__name__, e)
                return
            self.replies.append((time.time(), r))
            k += 1

    def hold(self, secs):
        """True once parked between requests (False: still in one after secs)."""
        with self.cv:
            self.held = True
            return self.cv.wait_for(lambda: self.parked or self.problem or not self.is_alive(),
                                    secs) and self.parked

    def release(self):
        with self.cv:
            self.held = False
            self.cv.notify_all()

    def count_after(self, t):
        return sum(1 for r in self.replies if r[0] > t)

    def wait_more(self, n, secs):
        """True once n more replies came (from now), the connection intact."""
        n0 = len(self.replies)
        return wait_until(lambda: self.problem or len(self.replies) >= n0 + n, secs) and \
            not self.problem


def main(argv):
    if len(argv) >= 5 and argv[1] == "requests":
        c = Conn(argv[2], int(argv[3]))
        for k in range(int(argv[4])):
            try:
                print(c.request("r%d" % k)[1], flush=True)
            except (OSError, ValueError) as e:
                print("FAIL: request r%d: %s" % (k, e), flush=True)
                return 1
        if "--poweroff" in argv:
            print("poweroff: %s" % c.poweroff(), flush=True)
        c.close()
        return 0
    if len(argv) == 3 and argv[1] == "log":
        print("\n".join(read_log(argv[2])))
        return 0
    if len(argv) == 4 and argv[1] == "check":
        with open(argv[3]) as f:
            replies = [ln.rstrip("\n") for ln in f if ln[:1].isdigit()]
        lines = read_log(argv[2])
        errs = log_errors(lines, replies)
        for e in errs:
            print("FAIL: " + e)
        if not errs:
            print("ok - the %d replies are in the guest's log of %d lines, numbered 1..%d" %
                  (len(replies), len(lines), len(lines)))
        return 1 if errs else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
