"""Packed snaps run as snapd runs them, for the end-to-end tests: `snapbuild pack` (craft-parts
through snapcraft 9.0.1's services, `snap pack`) then :class:`snapbuild.trial.snapd.SnapRun` (the
`.snap` and `.comp` files mounted read-only in a private mount namespace, the checkout and every
host venv hidden, snapd's environment, inet sockets refused where no network plug is connected).

Both steps skip with the reason when this machine cannot do them (no root or mount namespaces,
no squashfs-tools, snapd's `snap`, python3-apt, snapcraft or a Python 3.12); CI has them all.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import requests

from snapbuild.pack import Packed, pack
from snapbuild.pack.host import HostError, find_host
from snapbuild.trial.snapd import HarnessError, SnapRun, check_host, find_host_python
from support import oracle


def pack_or_skip(manifest: str | Path, out: Path) -> Packed:
    """The CPU variant of ``manifest`` packed into ``out`` (skips when packing cannot run)."""
    python = oracle.require() / "bin" / "python"
    try:
        find_host(snapcraft=python)
    except HostError as exc:
        pytest.skip(f"snapbuild pack cannot run here: {exc.brief}")
    return pack(manifest, out, variant="cpu", snapcraft=python)


def harness_or_skip() -> None:
    """Skip unless packed snaps can run as snapd runs them here."""
    problems = check_host(overlay=True)
    if problems:
        pytest.skip("the snapd-like run needs: " + "; ".join(problems))
    try:
        find_host_python()
    except HarnessError as exc:
        pytest.skip(f"the snapd-like run needs core24's Python: {exc}")


def port_of(run: SnapRun) -> int:
    """The port the snap's configuration says the server listens on."""
    got = run.snapctl("get", "port")
    assert got.returncode == 0, got
    return int(got.stdout.strip())


def wait_ready(run: SnapRun, port: int, timeout: float = 240) -> dict[str, Any]:
    """/health's body once it says ok (the port opens before the model is loaded)."""
    run.wait_for_port(port, service="server", timeout=timeout)
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            answer = requests.get(f"http://127.0.0.1:{port}/health", timeout=5)
            last = answer.json()
            if answer.status_code == 200:
                body: dict[str, Any] = last
                return body
        except (requests.RequestException, ValueError) as exc:
            last = exc
        time.sleep(0.3)
    raise AssertionError(
        f"not ready after {timeout} s: {last}\n{run.service_log('server')[-3000:]}"
    )


def wait_closed(port: int, timeout: float = 30) -> None:
    """Until nothing answers on ``port`` any more."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            requests.get(f"http://127.0.0.1:{port}/health", timeout=1)
        except requests.ConnectionError:
            return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise AssertionError(f"port {port} still answers")


def published(run: SnapRun, snap: str, port: int, timeout: float = 30) -> dict[str, Any]:
    """The snap's discovery document, read where its `inference-api` content slot shares it
    (``$SNAP_COMMON/discovery/api.json``), once it says the server on ``port`` is ready."""
    import json

    path = run.inside(f"/var/snap/{snap}/common/discovery/api.json")
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = json.loads(path.read_text())
            if last.get("status") == "ok" and last.get("base-url", "").endswith(f":{port}/v1"):
                data: dict[str, Any] = last
                return data
        except (OSError, ValueError) as exc:
            last = exc
        time.sleep(0.3)
    raise AssertionError(f"no document of the server on {port} at {path}: {last}")
