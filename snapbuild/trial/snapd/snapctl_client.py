#!/usr/bin/python3 -IS
"""snapctl for hosts without snapd's: what ``cmd/snapctl/tool/snapctl/main.go`` does.

A snap finds snapd's ``snapctl`` at ``/usr/bin/snapctl`` through the base; the harness uses the
host's (Debian's snapd package) when it exists. Without it, this file is written to the
namespace's ``/usr/local/bin/snapctl`` (first on snap-confine's PATH) and speaks the same
protocol: POST ``/v2/snapctl`` on ``/run/snapd-snap.socket`` with ``$SNAP_COOKIE``, print what
comes back, exit with snapd's status. Standard library only: it runs on the base's Python.
"""

import json
import os
import socket
import sys


def main() -> int:
    cookie = os.environ.get("SNAP_COOKIE") or os.environ.get("SNAP_CONTEXT", "")
    body = json.dumps({"context-id": cookie, "args": sys.argv[1:]}).encode()
    sock = socket.socket(socket.AF_UNIX)
    sock.connect("/run/snapd-snap.socket")
    head = "POST /v2/snapctl HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    sock.sendall(f"{head}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    answer = json.loads(data.split(b"\r\n\r\n", 1)[1])
    result = answer.get("result") or {}
    if answer.get("type") == "error":
        value = result.get("value") or {}
        if result.get("kind") == "unsuccessful":
            sys.stdout.write(value.get("stdout", ""))
            sys.stderr.write(value.get("stderr", ""))
            return int(value.get("exit-code", 1))
        sys.stderr.write(f"error: {result.get('message')}\n")
        return 1
    sys.stdout.write(result.get("stdout", ""))
    sys.stderr.write(result.get("stderr", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
