"""Calling the driver (:mod:`snapbuild.pack.driver`) in snapcraft's Python, and its answer.

The driver is started as a script with snapcraft's interpreter (``-I``: no environment, no
user site), inside the build namespace when ``/usr/bin/python3`` must be made 3.12
(:func:`snapbuild.pack.host.namespace_wrapper`). The request goes to its stdin; its stdout holds
the answer alone; its stderr, every child's output included, goes to ``logs/driver.log``, and
the lines meant for a person (``driver.PROGRESS``) to ``progress`` as they come. An error in
the answer becomes a :class:`~snapcommon.errors.SnapbuildError` with the driver's brief,
details, resolution and exit code.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from snapbuild.pack import driver
from snapbuild.pack.host import APT_DIR, BUILD_PATH, Host, HostError, namespace_wrapper
from snapbuild.pack.inputs import Inputs
from snapcommon.errors import SnapbuildError


def driver_request(action: str, work: Path, arch: str, inputs: Inputs) -> dict[str, Any]:
    """The request for ``action`` on the project in ``work`` (its layout is decided here)."""
    return {
        "schema": driver.SCHEMA,
        "action": action,
        "project_dir": str(work / "project"),
        "work_dir": str(work / "craft"),
        "cache_dir": str(work / "craft-cache"),
        "logs_dir": str(work / "logs"),
        "out_dir": str(work / "packed"),
        "platform": arch,
        "build_for": arch,
        "apt_dir": str(APT_DIR),
        "path": f"{work / 'bin'}:{BUILD_PATH}",
        "replace_parts": inputs.replace_parts,
        "drop_parts": inputs.drop_parts,
        "seed_files": inputs.seed_files,
    }


def run_driver(
    host: Host, request: dict[str, Any], work: Path, progress: Callable[[str], None] | None
) -> dict[str, Any]:
    """Run the driver with ``request``; its result, or its error raised as a SnapbuildError."""
    craftctl = host.snapcraft_python.parent / "craftctl"
    if not craftctl.is_file():
        raise HostError(f"snapcraft's craftctl is not beside its Python ({craftctl})")
    (work / "bin").mkdir(parents=True, exist_ok=True)
    link = work / "bin" / "craftctl"
    if not link.is_symlink() or os.readlink(link) != str(craftctl):
        link.unlink(missing_ok=True)
        link.symlink_to(craftctl)
    argv = [str(host.snapcraft_python), "-I", driver.__file__]
    if host.needs_namespace:
        (work / "ns").mkdir(exist_ok=True)
        argv = namespace_wrapper(host.python312, work / "ns") + argv
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(json.dumps(request))
    proc.stdin.close()
    answer: list[str] = []
    reader = threading.Thread(target=lambda: answer.append(proc.stdout.read()))  # type: ignore[union-attr]
    reader.start()
    tail: list[str] = []
    with (logs / "driver.log").open("a", encoding="utf-8") as log:
        for line in proc.stderr:
            log.write(line)
            tail = (tail + [line.rstrip()])[-40:]
            if progress and line.startswith(driver.PROGRESS):
                progress(line[len(driver.PROGRESS) :].rstrip())
    code = proc.wait()
    reader.join()
    return _answer("".join(answer), code, tail, logs)


def _answer(text: str, code: int, tail: list[str], logs: Path) -> dict[str, Any]:
    if code == 125 or any("unshare failed" in line for line in tail):
        raise HostError(
            "cannot build here: the private mount namespace (unshare --mount, an overlay on "
            "/usr/bin) is not available",
            details="\n".join(tail[-5:]),
            resolution="run as root on a machine (or a privileged container) that allows "
            "mount namespaces, or on one whose /usr/bin/python3 is Python 3.12",
        )
    try:
        result: dict[str, Any] = json.loads(text)
    except ValueError:
        raise SnapbuildError(
            f"the snapcraft driver ended without an answer (exit {code})",
            details="\n".join(tail[-12:]),
            resolution=f"read {logs / 'driver.log'}",
        ) from None
    if not result.get("ok"):
        error = result.get("error") or {}
        details = "\n".join(filter(None, [error.get("details"), f"logs: {logs}"]))
        raise SnapbuildError(
            str(error.get("brief")),
            details=details,
            resolution=error.get("resolution"),
            exit_code=int(error.get("exit_code") or 1),
        )
    return result
