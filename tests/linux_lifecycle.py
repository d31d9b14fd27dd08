#!/usr/bin/env python3
"""A Linux guest's TCP connection and disk across snapshot/restore,
`protect`, `switchover` and `migrate` (tests 4 and 5 of issue 26;
tests/sys_linux_lifecycle.sh runs it).

Runs inside the client's network namespace; the agents run in VM_NS, where
a bridge holds the client's veth and three taps (three "hosts"). The guest
is the server of tests/linux_initramfs.sh (ut.mode=server: each request
line appended to /mnt/requests.log on its virtio disk and fsynced, then
answered "SEQ LINE"). One boot, one TCP connection never reopened, a client
sending requests on it one after the other all through:
  0. `run --kernel` on TAP_A with a blank 64 MiB image (the guest formats it);
  1. snapshot/restore: the client is held between two requests, `snapshot
     --with-disk` writes the guest and its disk, `run` is killed -9, and
     `restore` rebuilds it on TAP_B with a fresh image (the saved disk
     written to it); the client goes on;
  2. `protect` attaches a secondary on TAP_A (a fresh image) to the
     restored VM; then `switchover`: the secondary runs the guest, the
     restored VM becomes its standby; the client goes on;
  3. `migrate --with-disk` of that protected VM to a fresh secondary on
     TAP_C (its standby is told to stand down first); the client goes on;
  4. the guest is asked to power off; the destination's image is read.
With UNDERSTUDY_VERIFY=1 in the agents (LINUX_VERIFY=1, the default), each
standby checks every epoch it applies against the digest of the primary's
RAM and complete machine state (checkpoint/digest.c): in step 2 both the
secondary (before the switchover) and the old primary (after it, as the new
standby) report how many epochs they verified, none differing.
A verify problem does not stop the lifecycle: it is reported as it is
found and fails the test after the lifecycle's own checks.
Checked: every reply echoes its request and numbers one more than the one
before (no gap, no repeat the client could see) across every step, at
least AFTER replies after each; no agent logged "VERIFY FAILED"; each
standby verified at least VERIFY_MIN epochs, none failed; the final image
holds every reply the client received with its number, numbers 1..N.
Usage: linux_lifecycle.py BIN VM_NS TMPDIR TAP_A TAP_B TAP_C KERNEL INITRD APPEND
Knobs (environment): LINUX_BOOT_S (600) for the boot and each step,
LINUX_MEM (256M), LINUX_CPUS (1), LINUX_EPOCH_MS (25), LINUX_FAILOVER_MS
(2000, 15000 in the nested VM), LINUX_HANDSHAKE_MS (60000), LINUX_VERIFY
(1). Exit 0 pass, 1 fail."""
import json
import os
import sys
import time

import linuxguest
from linuxguest import Agent, Client, say, wait_until

BIN, VM_NS, TMP = sys.argv[1], sys.argv[2], sys.argv[3]
TAP_A, TAP_B, TAP_C = sys.argv[4], sys.argv[5], sys.argv[6]
KERNEL, INITRD, APPEND = sys.argv[7], sys.argv[8], sys.argv[9]
GUEST_IP, PORT = "10.79.0.2", 7000
BOOT_S = float(os.environ.get("LINUX_BOOT_S", "600"))
MEM = os.environ.get("LINUX_MEM", "256M")
CPUS = os.environ.get("LINUX_CPUS", "1")
EPOCH_MS = os.environ.get("LINUX_EPOCH_MS", "25")
NESTED = os.environ.get("UNDERSTUDY_NESTED") == "1"
FAILOVER_MS = int(os.environ.get("LINUX_FAILOVER_MS", "15000" if NESTED else "2000"))
HANDSHAKE_MS = os.environ.get("LINUX_HANDSHAKE_MS", "60000")
VERIFY = os.environ.get("LINUX_VERIFY", "1") == "1"
AFTER = 10          # replies wanted after each step
VERIFY_MIN = 5      # epochs each standby must have verified
LAB = linuxguest.Lab(BIN, VM_NS, TMP, BOOT_S)
ENV = {"UNDERSTUDY_VERIFY": "1"} if VERIFY else {}
LINK = ["--handshake-timeout-ms", HANDSHAKE_MS, "--insecure"]


T0 = time.time()
VERIFY_PROBLEMS = []   # what verify mode found, failed after the lifecycle's own checks


class Failed(Exception):
    pass


def note(msg):
    """A progress line (the nested VM's test log is read live)."""
    say("   +%.0f s: %s" % (time.time() - T0, msg))


def cli(args, what):
    """An understudy command that must exit 0: its stdout+stderr."""
    out = LAB.cli(args)
    if out.returncode != 0:
        raise Failed("%s: exit %d: %s" % (what, out.returncode, (out.stdout + out.stderr).strip()[-600:]))
    return out.stdout + out.stderr


def last_line(out):
    lines = out.strip().splitlines()
    return lines[-1][:120] if lines else ""


def status(agent):
    """The agent's status as a dict ({} if it does not answer in JSON)."""
    out = LAB.cli(["status", "--control", agent.ctl, "--json"], 60)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}


def verified(standby, what):
    """The standby verified VERIFY_MIN epochs or more, none differing: a line."""
    if not VERIFY:
        return ""
    end = time.time() + BOOT_S
    while True:
        st = status(standby)
        if st.get("verify_ok", 0) >= VERIFY_MIN or st.get("verify_failed", 0) or time.time() > end:
            break
        time.sleep(1)
    if st.get("verify_ok", 0) < VERIFY_MIN or st.get("verify_failed", 0):
        # the lifecycle goes on (its own checks are independent); failed at the end
        VERIFY_PROBLEMS.append("%s: the standby %s verified %s epochs, %s differed: %s" %
                               (what, standby.name, st.get("verify_ok"), st.get("verify_failed"),
                                standby.gist()))
        note("VERIFY: %s" % VERIFY_PROBLEMS[-1][:300])
        return "; %s: %s verified, %s DIFFERED" % (standby.name, st.get("verify_ok"),
                                                    st.get("verify_failed"))
    return "; %s verified %d epochs equal to the primary, 0 differed" % (standby.name, st["verify_ok"])


def carried_on(c, what):
    if not c.wait_more(AFTER, BOOT_S):
        raise Failed("%s: the connection did not carry on: %s" %
                     (what, c.problem or "fewer than %d replies in %.0f s" % (AFTER, BOOT_S)))


def lifecycle(agents, t0):
    img = os.path.join(TMP, "run.img")
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    vm = Agent(LAB, "run", TAP_A, img)
    agents.append(vm)
    vm.start(["run", "--kernel", KERNEL, "--initrd", INITRD,
              "--append", "%s ut.mode=server ut.ip=%s/24" % (APPEND, GUEST_IP),
              "--mem", MEM, "--cpus", CPUS, "--disk", img, "--net", "tap:" + TAP_A], ENV)
    try:
        conn = linuxguest.Conn(GUEST_IP, PORT, connect_s=BOOT_S, reply_s=BOOT_S)
    except OSError as e:
        raise Failed("the guest's server never answered %s:%d (%s): %s" % (GUEST_IP, PORT, e, vm.gist()))
    say("0. run --kernel %s --initrd (busybox) --mem %s --cpus %s --disk (blank 64 MiB) --net tap:%s: "
        "the guest's server answers after %.0f s; one TCP connection opened" %
        (KERNEL, MEM, CPUS, TAP_A, time.time() - t0))
    c = Client(conn)
    c.start()
    carried_on(c, "0. before anything")

    # 1. snapshot --with-disk, kill -9, restore on another tap and image
    t1 = time.time()
    if not c.hold(BOOT_S):
        raise Failed("1. the client could not be held between requests: %s" % c.problem)
    n1 = len(c.replies)
    snap = os.path.join(TMP, "guest.snap")
    out = cli(["snapshot", "--control", vm.ctl, "--out", snap, "--with-disk"], "1. snapshot")
    vm.p.kill()
    vm.p.wait()
    vm.stop()
    rimg = os.path.join(TMP, "restored.img")
    open(rimg, "w").close()
    r = Agent(LAB, "restored", TAP_B, rimg)
    agents.append(r)
    r.start(["restore", snap, "--disk", rimg, "--net", "tap:" + TAP_B], ENV)
    # its control socket is there once the guest is rebuilt, as it resumes
    if not wait_until(lambda: os.path.exists(r.ctl) or r.p.poll() is not None, BOOT_S) or \
            r.p.poll() is not None:
        raise Failed("1. restore never ran the guest (exit %s): %s" % (r.p.poll(), r.gist()))
    c.release()
    carried_on(c, "1. after the restore")
    if r.p.poll() is not None:
        raise Failed("1. restore exited %d: %s" % (r.p.returncode, r.gist()))
    say("1. snapshot --with-disk after %d replies (the last \"%s\"; %s), run killed -9, restore on "
        "tap:%s with a fresh image: the same connection carried on (\"%s\" next, %.1f s after the "
        "hold)" % (n1, c.replies[n1 - 1][1], last_line(out), TAP_B,
                   c.replies[n1][1], c.replies[n1][0] - t1))

    # 2. protect onto a secondary, then switchover
    s1 = linuxguest.secondary(LAB, "sec1", TAP_A, "commit", FAILOVER_MS, HANDSHAKE_MS, ENV)
    agents.append(s1)
    note("2. sec1 listens; protect")
    cli(["protect", "--control", r.ctl, "--peer", "127.0.0.1:%d" % s1.port, "--epoch-ms", EPOCH_MS,
         "--timeout-ms", str(3 * FAILOVER_MS)] + LINK, "2. protect")
    if not s1.has("first checkpoint applied", BOOT_S):
        raise Failed("2. the restored VM never protected: %s; %s" % (r.gist(), s1.gist()))
    note("2. protected (%d replies so far)" % len(c.replies))
    carried_on(c, "2. protected")
    note("2. %d replies; verify counts" % len(c.replies))
    v1 = verified(s1, "2. protected by sec1")
    n2 = len(c.replies)
    t2 = time.time()
    note("2. switchover")
    out = cli(["switchover", "--control", r.ctl, "--listen", "127.0.0.1:%d" % LAB.free_port(),
               "--timeout-ms", str(int(BOOT_S * 1000))], "2. switchover")
    note("2. switched over")
    carried_on(c, "2. after the switchover")
    if s1.has("TOOK OVER") or r.has("TOOK OVER"):
        raise Failed("2. a takeover, not a switchover: %s; %s" % (r.gist(), s1.gist()))
    v2 = verified(r, "2. after the switchover")
    say("2. protect onto sec1 (tap:%s)%s; switchover after %d replies: sec1 runs the guest, the "
        "restored VM is its standby (%s), the same connection carried on%s (%.1f s)" %
        (TAP_A, v1, n2, last_line(out), v2, time.time() - t2))

    # 3. migrate the protected VM to a fresh secondary
    dst = linuxguest.secondary(LAB, "dst", TAP_C, "commit", FAILOVER_MS, HANDSHAKE_MS, ENV)
    agents.append(dst)
    n3 = len(c.replies)
    t3 = time.time()
    note("3. dst listens; migrate")
    out = cli(["migrate", "--control", s1.ctl, "--to", "127.0.0.1:%d" % dst.port, "--with-disk",
               "--timeout-ms", str(3 * FAILOVER_MS), "--max-time", str(int(BOOT_S))] + LINK,
              "3. migrate")
    note("3. migrate returned")
    if not dst.has("TOOK OVER", 60):
        raise Failed("3. the destination does not run the guest: %s" % dst.gist())
    carried_on(c, "3. after the migration")
    if r.has("TOOK OVER"):
        raise Failed("3. the dropped standby took over: %s" % r.gist())
    down = [ln for ln in out.splitlines() if "downtime" in ln]
    say("3. migrate --with-disk of the protected VM (its standby stood down) to dst (tap:%s) after "
        "%d replies: the source %s, the same connection carried on (%.1f s; %s)" %
        (TAP_C, n3, "exited %d" % s1.p.poll() if s1.p.poll() is not None else "runs on", time.time() - t3, (down[-1] if down else "").strip()[:100]))

    # 4. power off; the destination's image holds every reply
    c.stop = True
    c.join(BOOT_S)
    if c.problem:
        raise Failed("4. at the end: %s" % c.problem)
    replies = [x[1] for x in c.replies]
    note("4. poweroff")
    bye = conn.poweroff()
    try:
        how = "powered off, exit %d" % dst.p.wait(timeout=120)
    except Exception:  # subprocess.TimeoutExpired
        dst.stop()
        how = "still running 120 s after ut-poweroff (\"%s\"): killed" % bye
    for a in agents:
        if a.has("VERIFY FAILED") and not VERIFY_PROBLEMS:
            VERIFY_PROBLEMS.append("%s logged VERIFY FAILED: %s" % (a.name, a.gist()))
    try:
        lines = linuxguest.read_log(dst.img)
    except RuntimeError as e:
        raise Failed("4. the destination's image: %s" % e)
    errs = linuxguest.log_errors(lines, replies)
    if errs:
        raise Failed("4. " + "; ".join(errs))
    say("ok - one TCP connection carried %d replies numbered %s..%s without a gap or a reset across "
        "snapshot/restore, switchover and migrate; the destination (%s) has all of them in its "
        "disk's log (%d lines, 1..%d)%s (%.0f s in all)" %
        (len(replies), replies[0].split()[0], replies[-1].split()[0], how, len(lines), len(lines),
         "; UNDERSTUDY_VERIFY on, no digest differed" if VERIFY and not VERIFY_PROBLEMS else "",
         time.time() - t0))
    if VERIFY_PROBLEMS:
        raise Failed("verify mode (test 5; the lifecycle itself passed): " + "; ".join(VERIFY_PROBLEMS))


def main():
    agents = []
    t0 = time.time()
    try:
        lifecycle(agents, t0)
        return 0
    except Failed as e:
        say("FAIL: %s" % e)
        for a in agents:
            say("  %s" % a.gist())
        return 1
    finally:
        for a in agents:
            a.stop()


sys.exit(main())
