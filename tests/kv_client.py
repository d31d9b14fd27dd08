#!/usr/bin/env python3
"""A client of the kv guest for tests/sys_kv.sh, run in the client's namespace.

  kv_client.py HOST PORT REQUEST...   sends each REQUEST (one datagram, from
      one socket, so one client address), prints each reply on a line, or
      "TIMEOUT" when none came within 2 s (retrying the datagram every 0.2 s).
  kv_client.py HOST PORT --sport N REQUEST...   the same from source port N.
  kv_client.py HOST PORT --raw HEX    sends the bytes (no reply expected; prints
      what comes within 0.5 s, or "NOREPLY")."""
import socket
import sys
import time


def ask(s, addr, req):
    end = time.time() + 2.0
    while time.time() < end:
        s.sendto(req, addr)
        t = time.time() + 0.2
        while time.time() < t:
            s.settimeout(max(0.01, t - time.time()))
            try:
                data, _ = s.recvfrom(2048)
            except socket.timeout:
                break
            f = req.split(b" ")
            if len(f) > 1 and data.split(b" ")[1:2] == f[1:2]:
                return data.decode(errors="replace")
    return "TIMEOUT"


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    args = sys.argv[3:]
    if args[0] == "--sport":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", int(args[1])))
        args = args[2:]
    if args[0] == "--raw":
        s.sendto(bytes.fromhex(args[1]), (host, port))
        s.settimeout(0.5)
        try:
            print(s.recvfrom(2048)[0].decode(errors="replace"))
        except socket.timeout:
            print("NOREPLY")
        return 0
    for req in args:
        print(ask(s, (host, port), req.encode()), flush=True)
    return 0


sys.exit(main())
