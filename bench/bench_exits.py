#!/usr/bin/env python3
"""KVM exits to the VMM per virtio request, ioeventfd on and off, in the
same run (issue 26): what machine/ioevent.c takes off the data path.

  blk  the blk guest (`understudy run --guest blk --disk IMG`): `selftest 0
       SECTORS 1` writes SECTORS sectors in 4 KiB requests and reads them
       back: 2 * SECTORS / 8 requests, each polled by the guest (no
       interrupt; it idles on the idle port between looks);
  net  the udpecho guest (`--net tap:`, network namespaces made here, as
       bench_net_guest.py): REQUESTS UDP datagrams, one at a time, each
       answered (a receive and a transmit request).

  linux  with --linux: a Linux guest (Debian's kernel and the initramfs
       of tests/linux_initramfs.sh, ut.mode=server, as the Linux tests
       boot it) on virtio-blk and virtio-net: REQUESTS TCP request lines
       on one connection, each appended to a file on its disk, fsynced,
       then answered; interrupts (MSI-X), no polling.

Each run once with UNDERSTUDY_IOEVENTFD=1 and once with =0. The counts are
KVM's own (debugfs /sys/kernel/debug/kvm/PID-FD/): mmio_exits and io_exits
are the exits that reach the VMM (a notify write is an MMIO exit without
ioeventfd; the built-in guests' idle port and console are port I/O),
`exits` every VM exit, taken around the command only (the guest's boot is
not in them). A count, not a time: valid in the nested VM. ROUNDS rounds;
median and spread.

A benchmark, not a test: without a usable /dev/kvm or KVM's debugfs it
says SKIP and exits 77; the net part needs root (it says so and is left
out). usage: bench_exits.py [--rounds N] [--sectors N] [--requests N] [--linux]"""
import argparse, math, os, shutil, socket, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import counts                     # noqa: E402
from bench_protect import free_port   # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BIN = os.path.abspath(os.environ.get("UNDERSTUDY_BIN", os.path.join(ROOT, "build", "understudy")))
STATS = ("mmio_exits", "io_exits", "exits")
GUEST_IP = "10.79.0.2"


class Skip(Exception):
    pass


def kvm(pid):
    s, why = counts.kvm_stats(pid, STATS)
    if s is None or "mmio_exits" not in s:
        raise Skip(why or "KVM has no mmio_exits counter")
    return s


def read_until(sock, text, secs):
    buf, end = b"", time.monotonic() + secs
    sock.settimeout(0.2)
    while time.monotonic() < end:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            continue
        if not data:
            break
        buf += data
        if text in buf:
            return buf
    raise RuntimeError("no %r from the guest in %d s (got %r)" % (text, secs, buf[-200:]))


def blk_round(tmp, on, sectors):
    img = os.path.join(tmp, "blk.img")
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    con = free_port()
    env = dict(os.environ, UNDERSTUDY_IOEVENTFD="1" if on else "0")
    log = open(os.path.join(tmp, "blk-%d.log" % on), "w")
    vm = subprocess.Popen([BIN, "run", "--guest", "blk", "--disk", img, "--console",
                           "tcp:127.0.0.1:%d" % con], env=env, stderr=log)
    try:
        end = time.monotonic() + 20
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", con), timeout=0.5)
                break
            except OSError:
                if time.monotonic() > end or vm.poll() is not None:
                    raise RuntimeError("blk guest's console never opened")
                time.sleep(0.05)
        sock.sendall(b"info\n")
        read_until(sock, b"blk capacity", 60)
        s0 = kvm(vm.pid)
        sock.sendall(b"selftest 0 %d 1\n" % sectors)
        read_until(sock, b"ok %d" % sectors, 600)
        s1 = kvm(vm.pid)
        sock.close()
    finally:
        vm.kill()
        vm.wait()
        log.close()
    return {k: s1[k] - s0[k] for k in s0}, 2 * math.ceil(sectors / 8)


def client(n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2.0)
    got = 0
    for i in range(n):
        s.sendto(b"e%d" % i, (GUEST_IP, 7))
        try:
            while not s.recv(2048).endswith(b" e%d" % i):
                pass
            got += 1
        except socket.timeout:
            pass
    print(got)


LINUX_APPEND = "console=ttyS0 earlyprintk=serial,ttyS0 nokaslr no_timer_check tsc=reliable lpj=4000000"
LINUX_PORT = 7000


def tcp_client(n):
    """Warm-up requests, "warm", then on a line of stdin n more; prints how
    many were answered with their own line."""
    end = time.monotonic() + 120
    while True:
        try:
            c = socket.create_connection((GUEST_IP, LINUX_PORT), timeout=5)
            break
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.5)
    c.settimeout(60)
    f = c.makefile("rwb")

    def ask(line):
        f.write(line + b"\n")
        f.flush()
        return f.readline().rstrip(b"\n").endswith(b" " + line)
    for i in range(3):
        ask(b"w%d" % i)
    print("warm", flush=True)
    sys.stdin.readline()
    print(sum(ask(b"r%d" % i) for i in range(n)), flush=True)


def linux_guest(tmp):
    out = subprocess.run(["bash", os.path.join(ROOT, "tests", "linux_initramfs.sh"),
                          os.path.join(tmp, "guest")], capture_output=True, text=True)
    if out.returncode == 77:
        raise Skip("tests/linux_initramfs.sh: " + out.stdout.strip()[-200:])
    if out.returncode:
        raise RuntimeError("tests/linux_initramfs.sh: exit %d: %s" % (out.returncode, out.stderr[-300:]))
    return out.stdout.split()[:2]


def linux_round(net, tmp, on, n, kernel, initrd):
    import bench_net_guest as bng
    img = os.path.join(tmp, "linux-%d.img" % on)
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    log = os.path.join(tmp, "linux-%d.console" % on)
    env = dict(os.environ, UNDERSTUDY_IOEVENTFD="1" if on else "0")
    vm = subprocess.Popen(["ip", "netns", "exec", net.v, BIN, "run", "--kernel", kernel, "--initrd",
                           initrd, "--append", "%s ut.mode=server ut.ip=%s/24" % (LINUX_APPEND, GUEST_IP),
                           "--mem", "256M", "--disk", img, "--net", "tap:tapa", "--console", "stdio"],
                          env=env, stdin=subprocess.DEVNULL, stdout=open(log, "w"),
                          stderr=open(log + ".err", "w"))
    cl = None
    try:
        if not bng.wait_for(log, "ut: server listening", 900):
            raise RuntimeError("the Linux guest's server did not start (%s)" % log)
        cl = subprocess.Popen(["ip", "netns", "exec", net.c, sys.executable, os.path.abspath(__file__),
                               "--tcp-client", str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
        if cl.stdout.readline().strip() != "warm":
            raise RuntimeError("no answer from the Linux guest's server")
        s0 = kvm(vm.pid)
        cl.stdin.write("go\n")
        cl.stdin.flush()
        got = int(cl.stdout.readline().strip() or 0)
        s1 = kvm(vm.pid)
    finally:
        if cl:
            cl.kill()
            cl.wait()
        vm.kill()
        vm.wait()
    if got < n:
        raise RuntimeError("the Linux guest answered %d of %d" % (got, n))
    return {k: s1[k] - s0[k] for k in s0}, got


def net_round(net, tmp, on, n):
    import bench_net_guest as bng
    log = os.path.join(tmp, "net-%d.log" % on)
    env = dict(os.environ, UNDERSTUDY_IOEVENTFD="1" if on else "0")
    vm = subprocess.Popen(["ip", "netns", "exec", net.v, BIN, "run", "--guest",
                           "udpecho:ip=%s/24,port=7" % GUEST_IP, "--net", "tap:tapa", "--console",
                           "stdio"], env=env, stdin=subprocess.DEVNULL, stdout=open(log, "w"),
                          stderr=subprocess.DEVNULL)
    try:
        if not bng.wait_for(log, "udpecho ready", 60):
            raise RuntimeError("udpecho did not start")
        pid = vm.pid         # ip netns exec execs the agent in place
        # A first exchange: ARP resolved on both sides before counting.
        subprocess.run(["ip", "netns", "exec", net.c, sys.executable, os.path.abspath(__file__),
                        "--client", "3"], capture_output=True, timeout=60)
        s0 = kvm(pid)
        out = subprocess.run(["ip", "netns", "exec", net.c, sys.executable, os.path.abspath(__file__),
                              "--client", str(n)], capture_output=True, text=True, timeout=60 + 2 * n)
        s1 = kvm(pid)
    finally:
        vm.kill()
        vm.wait()
    got = int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout.strip() else 0
    if got < n // 2:
        raise RuntimeError("udpecho answered %d of %d" % (got, n))
    return {k: s1[k] - s0[k] for k in s0}, got


def report(kind, what, res):
    """res: {on: [(delta, requests)]}"""
    print("  virtio-%s (%s):" % (kind, what))
    for on in (1, 0):
        per = {k: [d[k] / r for d, r in res[on]] for k in STATS}
        vmm = [a + b for a, b in zip(per["mmio_exits"], per["io_exits"])]
        onoff = "on" if on else "off"
        print("    ioeventfd %-3s  exits to the VMM %6.2f a request [%.2f..%.2f] (MMIO %5.2f, "
              "port I/O %5.2f); all VM exits %7.2f" %
              (onoff, statistics.median(vmm), min(vmm), max(vmm),
               statistics.median(per["mmio_exits"]), statistics.median(per["io_exits"]),
               statistics.median(per["exits"])))
        counts.count_figure("exits per request, ioeventfd %s, virtio-%s (%s)" % (onoff, kind, what),
                            vmm, "exits/request",
                            "KVM mmio_exits + io_exits (debugfs), host-independent count")
        counts.count_figure("MMIO exits per request, ioeventfd %s, virtio-%s" % (onoff, kind),
                            per["mmio_exits"], "exits/request",
                            "KVM mmio_exits (debugfs), host-independent count")


def linux_main(a, tmp):
    if os.geteuid() != 0:
        raise Skip("the Linux guest's run needs root (network namespaces and a tap)")
    import bench_net_guest as bng
    kernel, initrd = linux_guest(tmp)
    net = bng.Net(tag="uel", subnet="10.79.0")
    try:
        res = {1: [], 0: []}
        for _ in range(a.rounds):
            for on in (1, 0):
                res[on].append(linux_round(net, tmp, on, a.requests, kernel, initrd))
    finally:
        net.close()
    print("exits per request, ioeventfd on/off (KVM's counters, %d rounds; median):" % a.rounds)
    report("blk+net", "Linux guest, %d TCP requests on one connection, each fsynced to its disk "
           "and answered" % a.requests, res)
    return 0


def main():
    if sys.argv[1:2] == ["--client"]:
        client(int(sys.argv[2]))
        return 0
    if sys.argv[1:2] == ["--tcp-client"]:
        tcp_client(int(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description="KVM exits per virtio request, ioeventfd on/off")
    ap.add_argument("--rounds", type=counts.positive_int, default=3)
    ap.add_argument("--sectors", type=int, default=2048)
    ap.add_argument("--requests", type=counts.positive_int, default=200)
    ap.add_argument("--linux", action="store_true",
                    help="the Linux guest only (TCP requests, fsynced to its disk)")
    a = ap.parse_args()
    if a.sectors < 8:
        ap.error("--sectors: must be at least 8")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        print("bench_exits: SKIP: /dev/kvm not usable here")
        return 77
    tmp = tempfile.mkdtemp()
    try:
        if a.linux:
            return linux_main(a, tmp)
        blk = {1: [], 0: []}
        for _ in range(a.rounds):
            for on in (1, 0):
                blk[on].append(blk_round(tmp, on, a.sectors))
        print("exits per request, ioeventfd on/off (KVM's counters, %d rounds; median):" % a.rounds)
        report("blk", "blk guest selftest, %d requests of 4 KiB, polled" %
               (2 * math.ceil(a.sectors / 8)), blk)
        if os.geteuid() != 0:
            print("  net: needs root (network namespaces and a tap); left out")
            return 0
        import bench_net_guest as bng
        net = bng.Net(tag="uex", subnet="10.79.0")
        try:
            res = {1: [], 0: []}
            for _ in range(a.rounds):
                for on in (1, 0):
                    res[on].append(net_round(net, tmp, on, a.requests))
        finally:
            net.close()
        report("net", "udpecho guest, %d UDP requests answered one at a time" % a.requests, res)
    except Skip as e:
        print("bench_exits: SKIP: %s" % e)
        return 77
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
