#!/usr/bin/env python3
"""A raw peer for the refusal tests: connects to a secondary, sends one bad
opening, and reads until the secondary closes the connection.
usage: raw_peer.py PORT hello99|frame7|garbage
       raw_peer.py PORT named NAME HOLD_S
Prints the frame types the secondary sent before closing ("-" for none).
Exit 0 only when the secondary closed the connection within 5 s; a timeout
(the secondary kept the bad peer's connection open) exits 1.
"named": a valid primary's Hello (10 ms heartbeat and epochs, 10 s
timeout) whose vm_name is NAME, then nothing: the connection is held
HOLD_S seconds; prints "held" after the frame types if the secondary kept it
open that long (exit 0 either way)."""
import socket, struct, sys, time

MAGIC, T_ERROR = 0x44545355, 9


def crc32c(b):
    c = 0xffffffff
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82f63b78 if c & 1 else 0)
    return c ^ 0xffffffff


def frame(t, payload, version=1):
    return struct.pack("<IHHII", MAGIC, version, t, len(payload), crc32c(payload)) + payload


hello99 = bytes([0x08, 99, 0x10, 1])           # Hello{protocol_version=99, role=PRIMARY}
hello1 = bytes([0x08, 1, 0x10, 1])             # a valid Hello, inside a version-7 frame
cases = {"hello99": frame(1, hello99), "frame7": frame(1, hello1, version=7),
         "garbage": b"GET / HTTP/1.0\r\n\r\n" * 4}
port, case = int(sys.argv[1]), sys.argv[2]
hold = 5
if case == "named":
    name = sys.argv[3].encode()
    # fields 1, 2, 5 (LZ4|XOR), 8, 9 (10000 = 0x90 0x4e), 10 and 14 (vm_name)
    named = bytes([0x08, 1, 0x10, 1, 0x28, 3, 0x40, 10, 0x48, 0x90, 0x4e, 0x50, 10,
                   0x72, len(name)]) + name
    cases["named"], hold = frame(1, named), float(sys.argv[4])
s = socket.create_connection(("127.0.0.1", port), timeout=5)
s.sendall(cases[case])
s.settimeout(hold)
got, end = b"", time.time() + hold
held = False
try:
    while True:
        data = s.recv(4096)
        if not data:
            break                              # the secondary closed: what we want
        got += data
        if time.time() > end:
            raise socket.timeout()
except socket.timeout:
    if case != "named":
        sys.exit("%s: the secondary did not close the connection within 5 s" % case)
    held = True
except ConnectionResetError:
    pass                                       # closed with a reset: closed too
types = []
while len(got) >= 16:
    magic, version, t, length, _ = struct.unpack("<IHHII", got[:16])
    if magic != MAGIC:
        sys.exit("%s: the secondary answered a non-frame: %r" % (case, got[:32]))
    types.append(t)
    got = got[16 + length:]
print((" ".join(str(t) for t in types) or "-") + (" held" if held else ""))
