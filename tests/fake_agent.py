#!/usr/bin/env python3
"""A stand-in for an agent's control socket, for tests of the command line's
side of it (no VM, no KVM): answers each request from a script and records
the requests it got.

Usage: fake_agent.py SOCKET SCRIPT.json LOG
SCRIPT maps a request's start ("status json", "migrate", ...) to a list of
replies (strings, or objects sent as one line of JSON, json.dumps escaping
every string): they are given in turn, the last one again once the list is
used up. The longest matching start wins; an unknown request gets an error.
Each request is appended to LOG, one line each.
"""
import json
import os
import socket
import sys


def main():
    path, script_path, log = sys.argv[1:4]
    with open(script_path, encoding="utf-8") as f:
        script = json.load(f)
    turn = {k: 0 for k in script}
    if os.path.exists(path):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(16)
    while True:
        conn, _ = srv.accept()
        data = b""
        while b"\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        req = data.split(b"\n")[0].decode(errors="replace")
        with open(log, "a", encoding="utf-8") as f:
            f.write(req + "\n")
        keys = [k for k in script if req == k or req.startswith(k + " ")]
        if keys:
            k = max(keys, key=len)
            replies = script[k]
            r = replies[min(turn[k], len(replies) - 1)]
            turn[k] += 1
            text = r if isinstance(r, str) else json.dumps(r, separators=(",", ":")) + "\n"
        else:
            text = "error unknown request\n"
        conn.sendall(text.encode())
        conn.close()


if __name__ == "__main__":
    main()
