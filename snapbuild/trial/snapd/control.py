"""What the harness and its snapd stand-in share: the server's spec and HTTP over Unix sockets.

The stand-in runs as its own process (:mod:`.server`) because it must fork into the namespace
and supervise services between requests, which needs a single-threaded process of its own. The
harness starts it with a :class:`ServerSpec` (a JSON file) and talks to it on a control socket
outside the namespace (a snap cannot reach it, so it cannot end its own hook); the snap talks to
it on ``/run/snapd-snap.socket`` with snapd's own protocol (``POST /v2/snapctl``).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from snapbuild.trial.sandbox import source_root
from snapbuild.trial.snapd.errors import HarnessError
from snapbuild.trial.snapd.rules import Release

LOG_TAIL = 4000  # the end of a log that an error shows


@dataclass(frozen=True)
class ServerSpec:
    """Everything the stand-in needs; host paths only."""

    work: str
    name: str
    revision: str
    holder_pid: int
    app_cookie: str
    components: dict[str, str]  # component name -> .comp file on the host
    policy_mode: str
    exec_via: str
    snapd: tuple[int, int]
    extra_env: dict[str, str]  # test-only variables every caller's environment gets

    @property
    def path(self) -> Path:
        return Path(self.work) / "server.json"

    @property
    def control_socket(self) -> Path:
        return Path(self.work) / "control.sock"

    @property
    def state_dir(self) -> Path:
        """The snapctl stand-in's state: config.json, connections.json."""
        return Path(self.work) / "snapctl-state"

    @property
    def log_dir(self) -> Path:
        return Path(self.work) / "logs"

    @property
    def snapd_release(self) -> Release:
        return self.snapd[0], self.snapd[1]

    def save(self) -> Path:
        self.path.write_text(json.dumps(asdict(self)))
        return self.path

    @classmethod
    def load(cls, path: Path) -> ServerSpec:
        data = json.loads(path.read_text())
        return cls(**{**data, "snapd": tuple(data["snapd"])})


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.unix_path)
        self.sock = sock


def post(path: Path, url: str, body: dict[str, Any], timeout: float = 600.0) -> Any:
    """POST JSON to the stand-in; its ``result``, or a :class:`HarnessError` with its message."""
    conn = _UnixHTTPConnection(str(path), timeout)
    try:
        conn.request("POST", url, json.dumps(body), {"Content-Type": "application/json"})
        answer = json.loads(conn.getresponse().read())
    except OSError as exc:
        raise HarnessError(f"the snapd stand-in did not answer {url}", details=str(exc)) from exc
    finally:
        conn.close()
    if answer.get("type") == "error":
        raise HarnessError(f"the snapd stand-in refused {url}", details=answer["result"]["message"])
    return answer.get("result")


def start_server(spec: ServerSpec) -> subprocess.Popen[bytes]:
    """The snapd stand-in, from this checkout, writing no bytecode into it."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(source_root()), os.environ.get("PYTHONPATH", "")) if p
    )
    spec.log_dir.mkdir(parents=True, exist_ok=True)
    with (spec.log_dir / "snapd.log").open("ab") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "snapbuild.trial.snapd.server", str(spec.save())],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
        )
    assert server.stdout is not None
    if server.stdout.readline().strip() != b"ready":
        server.wait()
        text = (spec.log_dir / "snapd.log").read_text(errors="replace")
        raise HarnessError("the snapd stand-in did not start", details=text[-LOG_TAIL:])
    return server
