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
      number; the log's numbers run 1..N without a gap. Exit 1 if not."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time


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
