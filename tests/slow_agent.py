#!/usr/bin/env python3
"""A stand-in for an agent's control socket whose loop is busy for seconds
(as a Linux guest's agent was in the nested VM, sending a 256 MiB initial
sync for 8 s): tests/sys_cli_slow_agent.sh drives `understudy protect` and
`understudy migrate` against it. Usage: slow_agent.py PATH protect|migrate
DELAY_S. In mode migrate-reset it is not slow: after the request its first status
says "switching" (the hand-over), the second connection is closed with its
request unread, which resets the client's read (as net/control.c's
deadline did when the agent's loop had stalled past it),
the next ones say "migrated".
Answers, one request a connection as net/control.c does:
  protect ...  -> ok protecting; migrate ... -> ok migrating
  the first status request after it: answered only after DELAY_S (longer
  than the CLI's 5 s request timeout: the CLI has given up on it by then);
  the next ones: protect: state protected; migrate: state migrated.
A status before the request (migrate's first look) is answered at once
(unprotected). Each protect or migrate request is appended to PATH.requests.
Ends after 60 s."""
import os
import socket
import sys
import threading
import time

path, mode, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
state = {"asked": False, "slow_done": False, "after": 0}
lock = threading.Lock()


def reply(req):
    if req.startswith(("protect", "migrate")):
        with open(path + ".requests", "a") as f:
            f.write(req + "\n")
        with lock:
            state["asked"] = True
        return "ok %s\n" % ("protecting: connecting to the secondary" if mode == "protect" else
                            "migrating to the destination")
    if req.startswith("status") and mode == "migrate-reset" and state["asked"]:
        return status_json("switching" if state["after"] == 1 else "migrated")
    if req.startswith("status"):
        with lock:
            asked, slow = state["asked"], not state["slow_done"] and state["asked"]
            if slow:
                state["slow_done"] = True
        if slow:
            time.sleep(delay)
        js = "json" in req
        st = "unprotected" if not asked else ("protected" if mode == "protect" else "migrated")
        if js:
            if not asked:     # a VM no engine runs: its role and state only
                return '{"role":"primary","state":"%s"}\n' % st
            return status_json(st)
        return "role primary\nstate %s\n" % st
    return "error unknown request\n"


def status_json(st):
    return ('{"role":"primary","state":"%s","epoch":3,"bytes_sent":1048576,'
            '"migration_downtime_ms":1.5,"migration_total_ms":2000,"throttle_pct":0,'
            '"predicted_downtime_ms":0.0,"pause_p50_us":0.0,"lag_ms":0.0,'
            '"dirty_pages_last":0,"left_bytes":0,"reason":""}\n' % st)


def serve(conn):
    with conn:
        if mode == "migrate-reset":
            with lock:
                if state["asked"]:
                    state["after"] += 1
                reset = state["after"] == 2
            if reset:
                # closed once the request is there, unread in its buffer:
                # the client's read is reset (as net/control.c's deadline
                # did); peeked, so it waits for the bytes however late
                conn.settimeout(30)
                conn.recv(1, socket.MSG_PEEK)
                return
        buf = b""
        while b"\n" not in buf:
            d = conn.recv(4096)
            if not d:
                return
            buf += d
        try:
            conn.sendall(reply(buf.split(b"\n")[0].decode()).encode())
        except OSError:
            pass       # the CLI gave up on this one


s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(16)
end = time.time() + 60
s.settimeout(1)
while time.time() < end:
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    threading.Thread(target=serve, args=(c,), daemon=True).start()
os.unlink(path)
