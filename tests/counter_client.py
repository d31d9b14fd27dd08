#!/usr/bin/env python3
"""Talks to the counter guest over a TCP console: sends requests, prints replies.
usage: counter_client.py PORT REQUEST... (each request one line; 'halt' gets no reply)"""
import socket, sys

port = int(sys.argv[1])
s = socket.create_connection(("127.0.0.1", port), timeout=20)
f = s.makefile("rwb", buffering=0)
for req in sys.argv[2:]:
    f.write((req + "\n").encode())
    if req == "halt":
        break
    line = f.readline().decode()
    if not line:
        sys.exit("console closed")
    print(line, end="")
