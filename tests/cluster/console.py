#!/usr/bin/env python3
"""Client of the counter guest's console for tests/cluster/run.sh.
  console.py incr HOST PORT N          send N incr, print the last reply "n digest"
  console.py get HOST PORT             print "n digest"
  console.py failover HOST PORT [PID]  kill -9 PID (if given), then connect to
      HOST:PORT and ask "get" until a reply comes: print "<n> <digest> <ms>",
      ms from the kill (or the start) to the first byte of the reply; gives
      up after FAILOVER_LIMIT_S seconds (default 60)."""
import os, signal, socket, sys, time


def ask(host, port, reqs, timeout=10):
    s = socket.create_connection((host, port), timeout=timeout)
    f = s.makefile("rwb", buffering=0)
    line = b""
    for r in reqs:
        f.write((r + "\n").encode())
        line = f.readline()
        if not line:
            sys.exit("console closed")
    return line.decode().strip()


def failover(host, port, pid, limit=int(os.environ.get("FAILOVER_LIMIT_S", "60"))):
    t0 = time.monotonic()
    if pid:
        os.kill(pid, signal.SIGKILL)
    while time.monotonic() - t0 < limit:
        try:
            s = socket.create_connection((host, port), timeout=1)
        except OSError:
            time.sleep(0.02)
            continue
        s.settimeout(0.5)
        try:
            s.sendall(b"get\n")
            buf, first = b"", None
            while b"\n" not in buf and time.monotonic() - t0 < limit:
                try:
                    d = s.recv(4096)
                except socket.timeout:
                    continue
                if not d:
                    break
                if first is None:
                    first = time.monotonic()
                buf += d
            if b"\n" in buf:
                return "%s %.0f" % (buf.split(b"\n")[0].decode().strip(), (first - t0) * 1000)
        except OSError:
            pass
        s.close()
        time.sleep(0.02)
    sys.exit("no reply from %s:%d within %d s" % (host, port, limit))


cmd, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if cmd == "incr":
    print(ask(host, port, ["incr"] * int(sys.argv[4])))
elif cmd == "get":
    print(ask(host, port, ["get"]))
elif cmd == "failover":
    print(failover(host, port, int(sys.argv[4]) if len(sys.argv) > 4 else 0))
else:
    sys.exit(__doc__)
