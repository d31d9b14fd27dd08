#!/usr/bin/env python3
"""Runs a command on a new pseudo-terminal of a given size, as a person's
terminal would run it, and keeps every byte it writes there.

Usage: pty_run.py COLS OUT CMD [ARG...]
The terminal is COLS columns wide and 24 rows high (set on the terminal
before CMD starts; COLS 0 gives a terminal that reports no size). CMD's
stdin, stdout and stderr are that terminal; what it writes (after the line
discipline: a newline arrives as CR LF) goes to OUT as it is. Exits with
CMD's status (128 + N when signal N ended it)."""
import fcntl
import os
import struct
import subprocess
import sys
import termios


def main():
    cols, out, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    p = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    with open(out, "wb") as f:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:          # EIO: every writer closed the terminal
                break
            if not data:
                break
            f.write(data)
            f.flush()
    rc = p.wait()
    os.close(master)
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
