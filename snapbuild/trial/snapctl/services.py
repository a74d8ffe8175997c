"""``snapctl start/stop/restart/services``: the snap's daemons, run as snapd's systemd units.

A service is started from ``$SNAP/meta/snap.yaml``'s ``apps:`` entry, with the environment snapd
would give it, under a supervisor (:mod:`.supervisor`) in its own session (process group), so
``stop`` can signal the whole tree. ``services.json`` records each app's enabled flag and the
supervisor's pid with its start time, so a reused pid is never mistaken for the service.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from snapbuild.trial.snapctl.state import HOOK_VAR, StandinError, locked, read, state_dir, write

SERVICES_FILE = "services.json"
STOP_TIMEOUT_S = 15.0
_VAR_RE = re.compile(r"\$(?:\{(\w+)(?::([+-])((?:[^{}]|\{[^{}]*\})*))?\}|(\w+))")


def snap_yaml() -> dict[str, Any]:
    path = Path(os.environ["SNAP"]) / "meta" / "snap.yaml"
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data


def daemons() -> dict[str, dict[str, Any]]:
    """The snap's daemon apps by name."""
    apps = snap_yaml().get("apps") or {}
    return {name: app for name, app in apps.items() if app.get("daemon")}


def resolve(names: list[str]) -> list[str]:
    """Service arguments (``snap.app`` or ``snap``) to app names."""
    return resolve_services(os.environ["SNAP_NAME"], sorted(daemons()), names)


def resolve_services(snap: str, services: list[str], names: list[str]) -> list[str]:
    """``snapctl``'s service arguments (``snap.app`` or ``snap``; none: all) to app names of
    ``services``, the snap's daemons in snapd's order."""
    if not names:
        return list(services)
    apps: list[str] = []
    for name in names:
        if name == snap:
            apps.extend(services)
            continue
        prefix, _, app = name.partition(".")
        if prefix != snap or app not in services:
            raise StandinError(f"unknown service: {name!r}")
        apps.append(app)
    return apps


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), None when gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in {"Z", "X"} else fields[19]


def alive(record: dict[str, Any]) -> bool:
    """The recorded supervisor still runs (same pid, same start time)."""
    pid = record.get("pid")
    if not pid:
        return False
    return _start_time(int(pid)) == record.get("start-time")


def expand(value: str, env: dict[str, str]) -> str:
    """Expand $VAR, ${VAR}, ${VAR:+word} and ${VAR:-word} as a shell would (unset: empty)."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(4)
        current = env.get(name, "")
        if match.group(2) == "+":
            return expand(match.group(3), env) if current else ""
        if match.group(2) == "-":
            return current or expand(match.group(3), env)
        return current

    return _VAR_RE.sub(one, value)


def environment(app: dict[str, Any]) -> dict[str, str]:
    """The daemon's environment: the caller's snap variables plus snap.yaml's ``environment``."""
    env = dict(os.environ)
    env.pop(HOOK_VAR, None)  # a service is not part of the hook that asked for it
    for source in (snap_yaml().get("environment") or {}, app.get("environment") or {}):
        for key, value in source.items():
            env[key] = expand(str(value), env)
    return env


def _spawn(name: str) -> dict[str, Any]:
    """Start the app's supervisor in its own session; it runs (and re-runs) the command."""
    logs = state_dir() / "logs"
    logs.mkdir(exist_ok=True)
    with (logs / f"{name}.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "snapbuild.trial.snapctl", "supervise", name],
            cwd=os.environ.get("SNAP_DATA", os.environ["SNAP"]),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop kills the whole tree
        )
    return {"pid": proc.pid, "start-time": _start_time(proc.pid)}


def _terminate(record: dict[str, Any]) -> None:
    if not alive(record):
        return
    pid = int(record["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while alive(record) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(record):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)  # leftovers of the group, if any


def service_action(args: list[str], action: str) -> str:
    """``start``, ``stop`` or ``restart`` (with ``--enable``/``--disable``) the named services."""
    enable = "--enable" in args
    disable = "--disable" in args
    names = [a for a in args if not a.startswith("-")]
    with locked():
        services = read(SERVICES_FILE, {})
        for app in resolve(names):
            record = services.get(app, {"enabled": False})
            if action in {"stop", "restart"}:
                _terminate(record)
                record.pop("pid", None)
                record.pop("start-time", None)
            if action in {"start", "restart"} and not alive(record):
                record.pop("failed", None)  # an explicit start clears the start limit
                record.pop("starts", None)
                record.update(_spawn(app))
            if enable:
                record["enabled"] = True
            if disable:
                record["enabled"] = False
            services[app] = record
        write(SERVICES_FILE, services)
    return ""


def cmd_services(args: list[str]) -> str:
    snap = os.environ["SNAP_NAME"]
    services = read(SERVICES_FILE, {})
    rows = []
    for app in resolve([a for a in args if not a.startswith("-")]):
        record = services.get(app, {"enabled": False})
        running = alive(record)
        rows.append((app, bool(record.get("enabled")), running, bool(record.get("failed"))))
    return services_table(snap, rows)


def services_table(snap: str, rows: list[tuple[str, bool, bool, bool]]) -> str:
    """``snapctl services`` output: one row per (app, enabled, active, failed), aligned as
    snapd aligns it; ``failed`` shows in Notes only while the service is not active."""
    table = [("Service", "Startup", "Current", "Notes")]
    for app, enabled, active, failed in rows:
        table.append(
            (
                f"{snap}.{app}",
                "enabled" if enabled else "disabled",
                "active" if active else "inactive",
                "failed" if failed and not active else "-",
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) if i < 3 else cell for i, cell in enumerate(row))
        for row in table
    )
