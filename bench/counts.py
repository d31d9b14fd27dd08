#!/usr/bin/env python3
"""Counts that do not depend on the host's speed, for the benchmarks.

A time measured in the nested VM (QEMU's emulator, no host KVM) means
nothing; a count does: epochs committed per reply, pages re-protected per
epoch, KVM's write faults per epoch, the agent's system calls per epoch.
An improvement to a mechanism shows there as a smaller count, and `make
bench` on a host with KVM gives the times beside them.

The sources, all read from outside the agents (none of them changes what
an agent does, except that strace slows the traced process):
  status json         epoch, acked, bytes_sent, dirty pages, the hot set and
                      reprotected_pages (understudy status --json)
  UNDERSTUDY_EVENT_LOG  capture and ack stamps (replication/events.c), on the
                      clock of time.monotonic_ns()
  KVM's statistics    /sys/kernel/debug/kvm/<pid>-<fd>/ (debugfs): pf_fast,
                      the write faults KVM fixes without its MMU lock, which
                      is how a write to a page re-protected for dirty logging
                      is served; pf_taken, every page fault KVM handled
  strace -f -c -p     the system calls of every thread of an agent
"""
import argparse, bisect, glob, os, shutil, signal, statistics, subprocess, tempfile, time

from figures import figure

DEBUGFS = "/sys/kernel/debug"


def positive_int(text):
    """argparse type of a count of 1 or more (--rounds, --requests): a bad
    value exits 2 with "argument --rounds: must be at least 1"."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("invalid int value: %r" % text)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def per(n, d):
    return n / d if d else 0.0


def count_figure(name, values, unit, note=None):
    """A count as a figure: the median of the rounds with their spread,
    named "count: ..." and with no goal (its time has one)."""
    med = statistics.median(values) if values else 0.0
    return figure("count: " + name, float(med), unit, note or "host-independent count", None,
                  runs=len(values), spread=[float(min(values)), float(max(values))] if values else None)


# ---- KVM's own counters ---------------------------------------------------------

def kvm_debugfs():
    """The debugfs directory of KVM, mounting debugfs when it is not (as
    root, as in the nested VM), or (None, why)."""
    d = os.path.join(DEBUGFS, "kvm")
    if not os.path.isdir(d) and os.geteuid() == 0 and os.path.isdir(DEBUGFS):
        subprocess.run(["mount", "-t", "debugfs", "debugfs", DEBUGFS], capture_output=True)
    if not os.path.isdir(d):
        return None, "no %s (debugfs not mounted, or not readable as uid %d)" % (d, os.geteuid())
    return d, None


def kvm_stats(pid, names=("pf_fast", "pf_taken", "pf_fixed", "exits")):
    """KVM's counters of the VM(s) of process pid, summed over its vCPUs and
    VMs: {name: value} (names KVM does not have are left out), or (None, why)."""
    d, why = kvm_debugfs()
    if not d:
        return None, why
    vms = glob.glob(os.path.join(d, "%d-*" % pid))
    if not vms:
        return None, "no VM of pid %d under %s" % (pid, d)
    out = {}
    for vm in vms:
        for n in names:
            try:
                with open(os.path.join(vm, n)) as f:
                    out[n] = out.get(n, 0) + int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return out, None


# ---- system calls -----------------------------------------------------------------

def strace_available():
    return shutil.which("strace") is not None


def parse_strace_c(text):
    """{syscall: calls} from the summary table of strace -c."""
    calls = {}
    for line in text.splitlines():
        f = line.split()
        # % time, seconds, usecs/call, calls, [errors], syscall
        if len(f) in (5, 6) and f[-1] != "total" and f[3].isdigit():
            try:
                float(f[0])
            except ValueError:
                continue
            calls[f[-1]] = calls.get(f[-1], 0) + int(f[3])
    return calls


class Strace:
    """strace -f -c -p PID (every thread of the process) until stop()."""

    def __init__(self, pids):
        self.tmp = tempfile.mkdtemp()
        self.procs = []
        for pid in pids:
            out = os.path.join(self.tmp, "%d.txt" % pid)
            self.procs.append((subprocess.Popen(["strace", "-f", "-c", "-q", "-o", out, "-p", str(pid)],
                                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE),
                               out))
        time.sleep(1.0)      # attached to every thread (strace -f -p walks /proc/PID/task)

    def stop(self):
        """[{syscall: calls}] of each pid."""
        res = []
        for p, out in self.procs:
            p.send_signal(signal.SIGINT)
            try:
                _, err = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                err = b"timeout"
            try:
                with open(out) as f:
                    res.append(parse_strace_c(f.read()))
            except OSError:
                raise RuntimeError("strace gave no summary: %s" % err.decode(errors="replace").strip())
        shutil.rmtree(self.tmp, ignore_errors=True)
        return res


# ---- the event log ----------------------------------------------------------------

def read_events(path, kinds=("capture", "ack")):
    """[(ns, kind, epoch)] of the event log's lines of those kinds."""
    ev = []
    try:
        with open(path) as f:
            for line in f:
                w = line.split()
                if len(w) >= 3 and w[1] in kinds:
                    ev.append((int(w[0]), w[1], int(w[2])))
    except OSError:
        pass
    return ev


def waits(events, spans):
    """For each request span (sent_ns, replied_ns): the captures and the
    ACKs the agent's event log has between the two, i.e. the epochs and the
    round trips to the secondary the reply waited for."""
    caps = sorted(t for t, k, _ in events if k == "capture")
    acks = sorted(t for t, k, _ in events if k == "ack")
    within = lambda ts, t0, t1: bisect.bisect_right(ts, t1) - bisect.bisect_right(ts, t0)
    return [(within(caps, t0, t1), within(acks, t0, t1)) for t0, t1 in spans]
