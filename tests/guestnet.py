"""What the failover tests of a guest behind a tap share (net_failover.py,
kv_failover.py, linux_failover.py): commands in the agents' network
namespace, waiting for a log line, the output-commit order in the
primary's event log, and the announcements a takeover makes."""
import re
import socket
import subprocess
import threading
import time


class Announcements(threading.Thread):
    """What makes a guest's new host known, seen on the client's link
    (ifname, or every interface of the namespace): gratuitous ARPs for ip
    (the guest's own, sent when its NIC asks it to announce itself) in
    garps, RARPs (sent by the agent itself, from the guest's MAC) in rarps;
    each (time, sender MAC)."""

    def __init__(self, ip, ifname=None):
        super().__init__(daemon=True)
        self.s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
        if ifname:
            self.s.bind((ifname, 0))
        self.s.settimeout(0.2)
        self.ip = socket.inet_aton(ip)
        self.garps = []
        self.rarps = []
        self.stop = False

    def run(self):
        while not self.stop:
            try:
                f = self.s.recv(2048)
            except socket.timeout:
                continue
            if len(f) < 42:
                continue
            kind = f[12:14]
            if kind == b"\x08\x06" and f[28:32] == self.ip and f[38:42] == self.ip:
                self.garps.append((time.time(), f[22:28].hex(":")))
            elif kind == b"\x80\x35":
                self.rarps.append((time.time(), f[22:28].hex(":")))


def in_ns(vm_ns, cmd):
    """cmd, run in the network namespace vm_ns."""
    return ["ip", "netns", "exec", vm_ns] + cmd


def free_port_in(vm_ns):
    """A TCP port free on 127.0.0.1 inside vm_ns."""
    out = subprocess.run(in_ns(vm_ns, ["python3", "-c", "import socket; s=socket.socket(); "
                                       "s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"]),
                         capture_output=True, text=True)
    return int(out.stdout)


def wait_text(path, pat, secs):
    """True once the regular expression pat matches the file at path,
    looked at once at least (secs 0: now or never)."""
    end = time.time() + secs
    while True:
        with open(path, errors="replace") as f:
            if re.search(pat, f.read()):
                return True
        if time.time() >= end:
            return False
        time.sleep(0.05)


def log_gist(path, tail=3):
    """An agent's log for a failure message: its ERROR and WARN lines and
    its last lines."""
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return "(no log)"
    bad = [ln for ln in lines[:-tail] if " ERROR " in ln or " WARN " in ln]
    return " | ".join(bad[-5:] + lines[-tail:])


def release_order_errors(path, trial):
    """The primary's event log: every frame release "netrel N" follows an
    "ack M" with M >= N (no frame of epoch N left before ACK(N)), and
    some frames were released at an ACK. The problems, as text."""
    acks, n = [], 0
    try:
        f = open(path)
    except FileNotFoundError:
        return ["trial %d: no event log" % trial]
    with f:
        for line in f:
            w = line.split()
            if len(w) >= 3 and w[1] == "ack":
                acks.append(int(w[2]))
            elif len(w) >= 5 and w[1] == "netrel":
                n += 1
                if not acks or max(acks) < int(w[2]):
                    return ["trial %d: frames of epoch %s released before ACK(%s) (acked so far: %s)"
                            % (trial, w[2], w[2], max(acks) if acks else "none")]
    if n == 0:
        return ["trial %d: the primary released no frames at an ACK" % trial]
    return []
