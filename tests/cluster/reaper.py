#!/usr/bin/env python3
"""reaper.py CMD [ARGS...]: runs CMD as a child subreaper (PR_SET_CHILD_SUBREAPER),
so the processes it leaves behind as orphans (daemons started in the
background, understudy processes the resource agent spawns) are reaped here
rather than by PID 1, which on this machine does not reap them (zombies).
Exits with CMD's status once CMD and its descendants have ended (at most 10 s
after CMD)."""
import ctypes, os, signal, sys

PR_SET_CHILD_SUBREAPER = 36
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_CHILD_SUBREAPER): %s" % os.strerror(ctypes.get_errno()))
child = os.fork()
if child == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
# pass a termination on to CMD; its cleanup runs
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, lambda s, f: os.kill(child, s))

class Late(Exception):
    pass


def late(s, f):
    raise Late()


status = 1
try:
    while True:
        try:
            pid, st = os.wait()
        except ChildProcessError:
            break
        if pid == child:
            status = os.waitstatus_to_exitcode(st)
            status = 128 - status if status < 0 else status
            # CMD cleaned up after itself: what is left ends soon, or is not ours to wait for
            signal.signal(signal.SIGALRM, late)
            signal.alarm(10)
except Late:
    pass
sys.exit(status)
