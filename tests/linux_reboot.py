#!/usr/bin/env python3
"""A protected Linux guest that reboots stays protected (sys_linux_reboot.sh).

A secondary (--disk on an empty image) and a primary (--kernel, ut.mode=shell,
--disk on a blank image) are started; once the secondary holds the first
checkpoint, typed on the primary's console:
  - the guest prints its boot_id (A) and writes a mark to sector 1 of
    /dev/vda, then `reboot -f`;
  - its shell comes back on the same primary's console (the primary did not
    end, the secondary did not take over, both logged the reboot once);
  - the rebooted guest prints its boot_id (B, not A), reads the first mark
    back from its disk (the image was kept) and writes a second one to
    sector 2;
  - kill -9 of the primary: the secondary takes over, and on its console
    the guest answers with boot_id B (the rebooted guest, not the one of
    before the reboot) and reads both marks; the secondary's image holds
    both marks.
With MODE "survivor" (sys_linux_reboot_survivor.sh), the reboot comes after
the takeover instead: the primary is killed (kill -9) once the secondary
holds a checkpoint and the guest wrote a mark; on the survivor's console
the guest (same boot_id) runs `reboot -f`; the survivor must not end: its
console shows a fresh boot (the kernel's "Linux version" banner and the
shell again), and the guest answers with a new boot_id, reads the mark
back from the survivor's disk and writes a second one, which the
survivor's image holds; the survivor logs the reboot once.
With MODE "restore" (sys_linux_reboot_restore.sh): `run --kernel` of a copy
of the kernel (a shell on its stdio console, a virtio disk); the guest
writes a mark, `snapshot`, run killed -9. With the copy moved away,
`restore` of the snapshot is refused (exit 2, naming the recorded kernel)
before anything is built; with it back, `restore` with no --kernel (the
snapshot records the kernel, initrd and command line) on the same image:
the restored guest (same boot_id) runs `reboot -f`: restore does not end,
the shell comes back, the guest has a new boot_id and reads the mark back.
Usage: linux_reboot.py BIN VM_NS TMPDIR KERNEL INITRD APPEND [MODE]
Knobs (environment): LINUX_BOOT_S (600) a boot may take, LINUX_MEM (256M),
LINUX_CPUS (1), LINUX_FAILOVER_MS (2000, 15000 in the nested VM). Exit 0
pass, 1 fail."""
import os
import re
import socket
import subprocess
import sys
import threading
import time

import linuxguest
from guestnet import wait_text
from linuxguest import say, wait_until

BIN, VM_NS, TMP = sys.argv[1], sys.argv[2], sys.argv[3]
KERNEL, INITRD, APPEND = sys.argv[4], sys.argv[5], sys.argv[6]
MODE = sys.argv[7] if len(sys.argv) > 7 else "primary"
BOOT_S = float(os.environ.get("LINUX_BOOT_S", "600"))
MEM = os.environ.get("LINUX_MEM", "256M")
CPUS = os.environ.get("LINUX_CPUS", "1")
FAILOVER_MS = int(os.environ.get("LINUX_FAILOVER_MS",
                                 "15000" if os.environ.get("UNDERSTUDY_NESTED") == "1" else "2000"))
HANDSHAKE_MS = "60000"
LAB = linuxguest.Lab(BIN, VM_NS, TMP, BOOT_S)
BOOT_ID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


class Console:
    """An agent's tcp console, read into a file and typed into."""

    def __init__(self, port, path, secs):
        end = time.time() + secs
        while True:
            try:
                self.s = connect_local(port)
                break
            except OSError:
                if time.time() > end:
                    raise
                time.sleep(0.2)
        self.path = path
        self.text = ""
        self.lock = threading.Lock()
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        with open(self.path, "a", errors="replace") as f:
            while True:
                try:
                    d = self.s.recv(4096)
                except OSError:
                    return
                if not d:
                    return
                t = d.decode(errors="replace").replace("\r", "")
                f.write(t)
                f.flush()
                with self.lock:
                    self.text += t

    def lines(self, pat):
        """The matches of pat (a regular expression, whole lines)."""
        with self.lock:
            return re.findall(pat, self.text, re.M)

    def wait(self, pat, secs, count=1):
        return wait_until(lambda: len(self.lines(pat)) >= count, secs)

    def type(self, line):
        self.s.sendall(line.encode() + b"\n")

    def ask(self, tag, cmd, secs=120):
        """Types `echo "TAG $(cmd)"` and returns what followed TAG on the
        answer's line, once the line is whole (the echo of the typed line
        starts otherwise), or None."""
        pat = r"^%s (.*)\n" % tag
        n = len(self.lines(pat))
        self.type('echo "%s $(%s)"' % (tag, cmd))
        if not self.wait(pat, secs, n + 1):
            return None
        return self.lines(pat)[n].strip()


class PipedConsole(Console):
    """An understudy process whose console is its stdio (--console stdio),
    read into a file and typed into like a Console; its stderr is log."""

    def __init__(self, args, log, path):
        self.p = subprocess.Popen(LAB.ns([BIN] + args + ["--console", "stdio"]),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=open(log, "w"))
        self.log, self.path, self.text = log, path, ""
        self.lock = threading.Lock()
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        with open(self.path, "a", errors="replace") as f:
            while True:
                d = self.p.stdout.read1(4096)
                if not d:
                    return
                t = d.decode(errors="replace").replace("\r", "")
                f.write(t)
                f.flush()
                with self.lock:
                    self.text += t

    def type(self, line):
        self.p.stdin.write(line.encode() + b"\n")
        self.p.stdin.flush()

    def gist(self):
        with open(self.log, errors="replace") as f:
            tail = [ln.strip() for ln in f][-3:]
        return "%s (exit %s): %s" % (os.path.basename(self.log), self.p.poll(), " | ".join(tail))

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def restored():
    """The guest reboots after `restore` with no --kernel (MODE restore)."""
    t0 = time.time()
    img, snap = os.path.join(TMP, "run.img"), os.path.join(TMP, "guest.snap")
    kernel, gone = os.path.join(TMP, "vmlinuz"), os.path.join(TMP, "vmlinuz.gone")
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    with open(KERNEL, "rb") as src, open(kernel, "wb") as dst:
        dst.write(src.read())
    boot = ["--kernel", kernel, "--initrd", INITRD, "--append", APPEND + " ut.mode=shell"]
    procs = []
    try:
        run = PipedConsole(["run"] + boot + ["--mem", MEM, "--cpus", CPUS, "--disk", img,
                                             "--control", os.path.join(TMP, "run.ctl")],
                           os.path.join(TMP, "run.log"), os.path.join(TMP, "run.console"))
        procs.append(run)
        if not wait_until(lambda: run.p.poll() is not None or run.lines(r"^ut: shell\n"), BOOT_S) \
                or run.p.poll() is not None:
            say("FAIL: no shell under run: %s" % run.gist())
            return 1
        boot_a = run.ask("ut-boot-a", "cat /proc/sys/kernel/random/boot_id")
        wrote = run.ask("ut-wrote-a", "printf 'ut-mark-a\\n' | dd of=/dev/vda bs=512 seek=1 "
                        "2>/dev/null; sync; echo done")
        if not boot_a or not re.fullmatch(BOOT_ID, boot_a) or wrote != "done":
            say("FAIL: under run: boot_id %r, mark written %r: %s" % (boot_a, wrote, run.gist()))
            return 1
        out = LAB.cli(["snapshot", "--control", os.path.join(TMP, "run.ctl"), "--out", snap])
        if out.returncode != 0:
            say("FAIL: snapshot: exit %d: %s" % (out.returncode, (out.stdout + out.stderr)[-400:]))
            return 1
        run.stop()
        say("under run: boot_id %s, ut-mark-a on sector 1; snapshot written, run killed -9 "
            "(%.0f s)" % (boot_a, time.time() - t0))

        os.rename(kernel, gone)
        try:   # refused at option time: at once (a restore that builds the VM runs on)
            out = LAB.cli(["restore", snap, "--disk", img, "--control",
                           os.path.join(TMP, "bad.ctl")], 60)
        except subprocess.TimeoutExpired:
            say("FAIL: restore with the recorded kernel gone ran on for 60 s (exit 2 wanted)")
            return 1
        finally:
            os.rename(gone, kernel)
        if out.returncode != 2 or kernel not in out.stderr or "records" not in out.stderr:
            say("FAIL: restore with the recorded kernel gone: exit %d (2 wanted, naming %s): %s"
                % (out.returncode, kernel, (out.stdout + out.stderr)[-400:]))
            return 1
        say("restore with the recorded kernel gone: exit 2: %s" % out.stderr.strip()[-200:])
        res = PipedConsole(["restore", snap, "--disk", img, "--control",
                            os.path.join(TMP, "res.ctl")],
                           os.path.join(TMP, "res.log"), os.path.join(TMP, "res.console"))
        procs.append(res)
        boot_r = res.ask("ut-boot-r", "cat /proc/sys/kernel/random/boot_id", BOOT_S)
        if boot_r != boot_a:
            say("FAIL: the restored guest has boot_id %r, the saved one %s: %s"
                % (boot_r, boot_a, res.gist()))
            return 1
        shells = len(res.lines(r"^ut: shell\n"))
        t_reboot = time.time()
        res.type("reboot -f")
        if not wait_until(lambda: res.p.poll() is not None or
                          len(res.lines(r"^ut: shell\n")) > shells, BOOT_S) or \
                res.p.poll() is not None:
            say("FAIL: typed reboot -f in the restored guest: it did not boot again (restore "
                "exit %s): %s" % (res.p.poll(), res.gist()))
            return 1
        back_s = time.time() - t_reboot
        boot_b = res.ask("ut-boot-b", "cat /proc/sys/kernel/random/boot_id")
        kept = res.ask("ut-read-a", "dd if=/dev/vda bs=512 skip=1 count=1 2>/dev/null | "
                       "tr -d '\\000' | head -1")
        if not boot_b or not re.fullmatch(BOOT_ID, boot_b) or boot_b == boot_a:
            say("FAIL: after the reboot: boot_id %r (before: %s): not a new boot" % (boot_b, boot_a))
            return 1
        if kept != "ut-mark-a":
            say("FAIL: after the reboot: sector 1 reads %r" % kept)
            return 1
        if count(res.log, r"the guest rebooted: booting it again from ") != 1:
            say("FAIL: restore did not log the reboot once: %s" % res.gist())
            return 1
        say("ok - the restored guest rebooted and restore runs on: boot_id %s (new), ut-mark-a "
            "read back; reboot to shell %.0f s (%.0f s in all)" % (boot_b, back_s, time.time() - t0))
        return 0
    finally:
        for p in procs:
            p.stop()


def connect_local(port):
    """A socket connected to 127.0.0.1:port inside VM_NS (this process runs
    there: sys_linux_reboot.sh starts it with ip netns exec)."""
    return socket.create_connection(("127.0.0.1", port), timeout=None)


def agent(name, args):
    a = linuxguest.Agent(LAB, name, None, None)
    a.p = subprocess.Popen(LAB.ns([BIN] + args + ["--control", a.ctl, "--console",
                                                   "tcp:127.0.0.1:%d" % a.con_port]),
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=open(a.log, "w"),
                           env=dict(os.environ, UNDERSTUDY_EVENT_LOG=a.events))
    return a


def count(path, pat):
    with open(path, errors="replace") as f:
        return len(re.findall(pat, f.read(), re.M))


def sector(img, n):
    with open(img, "rb") as f:
        f.seek(512 * n)
        return f.read(16).split(b"\n")[0].decode(errors="replace")


def start_pair():
    """A secondary (no --kernel: what it boots comes from the primary) and
    a protected primary with a shell on its console, the secondary holding
    a checkpoint: (sec, pri, console of pri, sec's image, pri's image,
    agents), or None after saying why."""
    sec_img, pri_img = os.path.join(TMP, "sec.img"), os.path.join(TMP, "pri.img")
    open(sec_img, "w").close()
    with open(pri_img, "wb") as f:
        f.truncate(64 << 20)
    sport = LAB.free_port()
    sec = agent("sec", ["secondary", "--listen", "127.0.0.1:%d" % sport, "--failover-timeout-ms",
                        str(FAILOVER_MS), "--handshake-timeout-ms", HANDSHAKE_MS, "--insecure",
                        "--disk", sec_img])
    agents = [sec]
    if not sec.has("waiting for a primary", 20):
        say("FAIL: the secondary never listened: %s" % sec.gist())
        return None, agents
    pri = agent("pri", ["primary", "--kernel", KERNEL, "--initrd", INITRD,
                        "--append", APPEND + " ut.mode=shell", "--mem", MEM, "--cpus", CPUS,
                        "--disk", pri_img, "--peer", "127.0.0.1:%d" % sport,
                        "--epoch-ms", "25", "--timeout-ms", str(3 * FAILOVER_MS),
                        "--handshake-timeout-ms", HANDSHAKE_MS, "--insecure"])
    agents.append(pri)
    con = Console(pri.con_port, pri.console, 60)
    if not wait_until(lambda: pri.p.poll() is not None or con.lines(r"^ut: shell\n"), BOOT_S) or \
            pri.p.poll() is not None:
        say("FAIL: no shell under protection (primary exit %s): %s" % (pri.p.poll(), pri.gist()))
        return None, agents
    if not wait_text(sec.log, "first checkpoint applied", 60):
        say("FAIL: the secondary holds no checkpoint: %s" % sec.gist())
        return None, agents
    return (sec, pri, con, sec_img, pri_img), agents


def survivor():
    """The guest reboots on the survivor of a takeover (MODE survivor)."""
    t0 = time.time()
    pair, agents = start_pair()
    try:
        if not pair:
            return 1
        sec, pri, con, sec_img, _ = pair
        say("protected; a shell on the primary's console after %.0f s" % (time.time() - t0))
        boot_a = con.ask("ut-boot-a", "cat /proc/sys/kernel/random/boot_id")
        wrote = con.ask("ut-wrote-a", "printf 'ut-mark-a\\n' | dd of=/dev/vda bs=512 seek=1 "
                        "2>/dev/null; sync; echo done")
        if not boot_a or not re.fullmatch(BOOT_ID, boot_a) or wrote != "done":
            say("FAIL: on the primary: boot_id %r, mark written %r: %s" % (boot_a, wrote, pri.gist()))
            return 1
        say("on the primary: boot_id %s, ut-mark-a on sector 1 of /dev/vda" % boot_a)

        t_kill = time.time()
        pri.p.kill()
        pri.p.wait()
        if not wait_text(sec.log, "TOOK OVER", 120):
            say("FAIL: no takeover after kill -9 of the primary: %s" % sec.gist())
            return 1
        say("kill -9 of the primary: the secondary TOOK OVER %.1f s later" % (time.time() - t_kill))
        scon = Console(sec.con_port, sec.console, 60)
        boot_s = scon.ask("ut-boot-s", "cat /proc/sys/kernel/random/boot_id")
        if boot_s != boot_a:
            say("FAIL: the survivor's guest has boot_id %r, the primary's had %s: %s"
                % (boot_s, boot_a, sec.gist()))
            return 1
        banners = len(scon.lines(r"Linux version "))
        shells = len(scon.lines(r"^ut: shell\n"))

        t_reboot = time.time()
        scon.type("reboot -f")
        if not wait_until(lambda: sec.p.poll() is not None or
                          len(scon.lines(r"^ut: shell\n")) > shells, BOOT_S) \
                or sec.p.poll() is not None:
            say("FAIL: typed reboot -f on the survivor: the guest did not boot again there "
                "(survivor exit %s): %s" % (sec.p.poll(), sec.gist()))
            return 1
        fresh = len(scon.lines(r"Linux version ")) - banners
        back_s = time.time() - t_reboot
        say("typed reboot -f on the survivor: a fresh boot on its console (%d kernel banner), "
            "a shell %.0f s later" % (fresh, back_s))
        boot_b = scon.ask("ut-boot-b", "cat /proc/sys/kernel/random/boot_id")
        ncpus = scon.ask("ut-nproc-b", "nproc")
        kept = scon.ask("ut-read-a", "dd if=/dev/vda bs=512 skip=1 count=1 2>/dev/null | "
                        "tr -d '\\000' | head -1")
        wrote = scon.ask("ut-wrote-b", "printf 'ut-mark-b\\n' | dd of=/dev/vda bs=512 seek=2 "
                         "2>/dev/null; sync; echo done")
        if fresh != 1:
            say("FAIL: %d new kernel banners on the survivor's console (one boot wanted)" % fresh)
            return 1
        if not boot_b or not re.fullmatch(BOOT_ID, boot_b) or boot_b == boot_a:
            say("FAIL: after the reboot: boot_id %r (before: %s): not a new boot" % (boot_b, boot_a))
            return 1
        if ncpus != CPUS:
            say("FAIL: after the reboot the guest has %r vCPUs, not %s" % (ncpus, CPUS))
            return 1
        if kept != "ut-mark-a" or wrote != "done":
            say("FAIL: after the reboot: sector 1 reads %r (the disk kept?), mark b %r" % (kept, wrote))
            return 1
        if sec.p.poll() is not None:
            say("FAIL: the survivor ended (exit %s) after the rebooted guest answered" % sec.p.poll())
            return 1
        on_img = (sector(sec_img, 1), sector(sec_img, 2))
        if on_img != ("ut-mark-a", "ut-mark-b"):
            say("FAIL: the survivor's image holds %r on sectors 1-2" % (on_img,))
            return 1
        pat = r"the guest rebooted \(after epoch \d+\)"
        if count(sec.log, pat) != 1:
            say("FAIL: the survivor's log says %d times /%s/ (once wanted): %s"
                % (count(sec.log, pat), pat, sec.gist()))
            return 1
        say("ok - the survivor rebooted the guest and runs on: boot_id %s (new), %s vCPU(s), "
            "ut-mark-a read back, ut-mark-b in its image; reboot to shell %.0f s (%.0f s in all)"
            % (boot_b, ncpus, back_s, time.time() - t0))
        return 0
    finally:
        for a in agents:
            a.stop()


def main():
    t0 = time.time()
    sec_img, pri_img = os.path.join(TMP, "sec.img"), os.path.join(TMP, "pri.img")
    open(sec_img, "w").close()
    with open(pri_img, "wb") as f:
        f.truncate(64 << 20)
    sport = LAB.free_port()
    sec = agent("sec", ["secondary", "--listen", "127.0.0.1:%d" % sport, "--failover-timeout-ms",
                        str(FAILOVER_MS), "--handshake-timeout-ms", HANDSHAKE_MS, "--insecure",
                        "--disk", sec_img])
    agents = [sec]
    try:
        if not sec.has("waiting for a primary", 20):
            say("FAIL: the secondary never listened: %s" % sec.gist())
            return 1
        pri = agent("pri", ["primary", "--kernel", KERNEL, "--initrd", INITRD,
                            "--append", APPEND + " ut.mode=shell", "--mem", MEM, "--cpus", CPUS,
                            "--disk", pri_img, "--peer", "127.0.0.1:%d" % sport,
                            "--epoch-ms", "25", "--timeout-ms", str(3 * FAILOVER_MS),
                            "--handshake-timeout-ms", HANDSHAKE_MS, "--insecure"])
        agents.append(pri)
        con = Console(pri.con_port, pri.console, 60)
        if not wait_until(lambda: pri.p.poll() is not None or con.lines(r"^ut: shell\n"), BOOT_S) or \
                pri.p.poll() is not None:
            say("FAIL: no shell under protection (primary exit %s): %s" % (pri.p.poll(), pri.gist()))
            return 1
        if not wait_text(sec.log, "first checkpoint applied", 60):
            say("FAIL: the secondary holds no checkpoint: %s" % sec.gist())
            return 1
        say("protected; a shell on the primary's console after %.0f s" % (time.time() - t0))

        boot_a = con.ask("ut-boot-a", "cat /proc/sys/kernel/random/boot_id")
        wrote = con.ask("ut-wrote-a", "printf 'ut-mark-a\\n' | dd of=/dev/vda bs=512 seek=1 "
                        "2>/dev/null; sync; echo done")
        if not boot_a or not re.fullmatch(BOOT_ID, boot_a) or wrote != "done":
            say("FAIL: before the reboot: boot_id %r, mark written %r: %s" % (boot_a, wrote, pri.gist()))
            return 1
        say("before the reboot: boot_id %s, ut-mark-a on sector 1 of /dev/vda" % boot_a)

        t_reboot = time.time()
        con.type("reboot -f")
        if not wait_until(lambda: pri.p.poll() is not None or len(con.lines(r"^ut: shell\n")) >= 2,
                          BOOT_S) or pri.p.poll() is not None:
            say("FAIL: typed reboot -f: the guest did not come back on the primary (primary exit "
                "%s): %s; %s" % (pri.p.poll(), pri.gist(), sec.gist()))
            return 1
        say("typed reboot -f: a shell again on the same primary's console %.0f s later"
            % (time.time() - t_reboot))
        boot_b = con.ask("ut-boot-b", "cat /proc/sys/kernel/random/boot_id")
        ncpus = con.ask("ut-nproc-b", "nproc")
        kept = con.ask("ut-read-a", "dd if=/dev/vda bs=512 skip=1 count=1 2>/dev/null | "
                       "tr -d '\\000' | head -1")
        wrote = con.ask("ut-wrote-b", "printf 'ut-mark-b\\n' | dd of=/dev/vda bs=512 seek=2 "
                        "2>/dev/null; sync; echo done")
        if not boot_b or not re.fullmatch(BOOT_ID, boot_b) or boot_b == boot_a:
            say("FAIL: after the reboot: boot_id %r (before: %s): not a new boot" % (boot_b, boot_a))
            return 1
        if ncpus != CPUS:
            say("FAIL: after the reboot the guest has %r vCPUs, not %s" % (ncpus, CPUS))
            return 1
        if kept != "ut-mark-a" or wrote != "done":
            say("FAIL: after the reboot: sector 1 reads %r (the disk kept?), mark b %r" % (kept, wrote))
            return 1
        say("after the reboot: boot_id %s (new), %s vCPU(s), sector 1 still ut-mark-a, ut-mark-b "
            "on sector 2" % (boot_b, ncpus))
        for a, pat, what in ((pri, r"the guest rebooted \(after epoch \d+\)", "the primary's"),
                             (pri, r"epoch \d+ carries the guest's reboot", "the primary's"),
                             (sec, r"the guest rebooted on the primary: epoch \d+", "the secondary's")):
            if count(a.log, pat) != 1:
                say("FAIL: %s log says %d times /%s/ (once wanted): %s" % (what, count(a.log, pat), pat,
                                                                        a.gist()))
                return 1
        if count(sec.log, "TOOK OVER") or count(pri.log, "UNPROTECTED"):
            say("FAIL: the reboot split the pair: %s; %s" % (pri.gist(), sec.gist()))
            return 1
        with open(pri.log, errors="replace") as f:
            carried = re.search(r"epoch \d+ carries the guest's reboot: \d+ pages", f.read()).group(0)
        with open(sec.log, errors="replace") as f:
            said = re.search(r"the guest rebooted on the primary: epoch \d+", f.read()).group(0)
        say("no takeover, the primary runs on; the primary logged \"%s\", the secondary \"%s\""
            % (carried, said))

        t_kill = time.time()
        pri.p.kill()
        pri.p.wait()
        if not wait_text(sec.log, "TOOK OVER", 120):
            say("FAIL: no takeover after kill -9 of the primary: %s" % sec.gist())
            return 1
        say("kill -9 of the primary: the secondary TOOK OVER %.1f s later" % (time.time() - t_kill))
        scon = Console(sec.con_port, sec.console, 60)
        boot_c = scon.ask("ut-boot-c", "cat /proc/sys/kernel/random/boot_id")
        marks = scon.ask("ut-read-ab", "dd if=/dev/vda bs=512 skip=1 count=2 2>/dev/null | "
                         "tr -d '\\000' | grep ut-mark | tr '\\n' ' '")
        if boot_c != boot_b:
            say("FAIL: the survivor's guest has boot_id %r, the rebooted one had %s (before the "
                "reboot: %s): %s" % (boot_c, boot_b, boot_a, sec.gist()))
            return 1
        if marks != "ut-mark-a ut-mark-b":
            say("FAIL: the survivor's guest reads %r from sectors 1-2 of its disk" % marks)
            return 1
        on_img = (sector(sec_img, 1), sector(sec_img, 2))
        if on_img != ("ut-mark-a", "ut-mark-b"):
            say("FAIL: the secondary's image holds %r on sectors 1-2" % (on_img,))
            return 1
        say("ok - the survivor runs the rebooted guest: boot_id %s on its console, both marks on "
            "its disk and in its image (%.0f s in all)" % (boot_c, time.time() - t0))
        return 0
    finally:
        for a in agents:
            a.stop()


if __name__ == "__main__":
    sys.exit(survivor() if MODE == "survivor" else restored() if MODE == "restore" else main())
