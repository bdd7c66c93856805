#!/usr/bin/env python3
"""Start a server, wait for its port, run a command, stop the server (test data)."""
import argparse
import socket
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--server", required=True)
p.add_argument("--port", type=int, required=True)
p.add_argument("command", nargs=argparse.REMAINDER)
a = p.parse_args()
server = subprocess.Popen(a.server, shell=True)
try:
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", a.port), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    sys.exit(subprocess.call(a.command[1:] if a.command[:1] == ["--"] else a.command))
finally:
    server.terminate()
