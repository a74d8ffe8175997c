"""Talking to snapd through the ``snapctl`` executable found on PATH.

Inside a snap that is snapd's ``/usr/bin/snapctl``; in ``snapbuild try`` it is the file-backed
stand-in (:mod:`snapbuild.trial.snapctl`, which is toolkit-only and never ships in a snap) placed
first on PATH. Either way this module runs the same commands with the same arguments, so the
trial exercises the code path of a real install.

Mind snapd's timing: from a hook, ``install``/``remove`` of components and service
``start``/``stop``/``restart`` are queued and happen only after the hook has succeeded; outside
hooks they block until done. Callers must not expect a component's files right after
:meth:`Snapctl.install` inside a hook.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from snapcommon.errors import SnapbuildError


class SnapctlError(SnapbuildError):
    """snapctl refused a command or is not there."""


@dataclass(frozen=True)
class ServiceState:
    """One row of ``snapctl services``."""

    name: str
    enabled: bool
    active: bool
    notes: str = "-"


class Snapctl:
    """A thin client: each method is one snapctl command."""

    def __init__(self, executable: str = "snapctl") -> None:
        self.executable = executable

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        path = shutil.which(self.executable)
        if path is None:
            raise SnapctlError(
                "snapctl is not on PATH",
                details="Engine management talks to snapd through snapctl.",
                resolution="Run this inside the snap, or through the launcher that "
                "`snapbuild try` prints (it puts a snapctl stand-in on PATH).",
            )
        proc = subprocess.run([path, *args], capture_output=True, text=True, check=False)
        if check and proc.returncode != 0:
            raise SnapctlError(
                f"snapctl {args[0]} failed (exit {proc.returncode})",
                details=(proc.stderr or proc.stdout).strip() or None,
            )
        return proc

    # configuration -------------------------------------------------------------------------
    def get(self, *keys: str) -> dict[str, Any]:
        """The values of ``keys`` that are set (unset keys are left out)."""
        out = self._run("get", "-d", *keys).stdout.strip()
        if not out:
            return {}
        data = json.loads(out)
        return {k: v for k, v in data.items() if v is not None}

    def set(self, values: dict[str, Any]) -> None:
        """Set keys; values go as JSON so numbers stay numbers and strings stay strings."""
        if values:
            self._run("set", *(f"{k}={json.dumps(v)}" for k, v in values.items()))

    def unset(self, *keys: str) -> None:
        """Remove keys."""
        if keys:
            self._run("unset", *keys)

    # services ------------------------------------------------------------------------------
    def services(self, *names: str) -> list[ServiceState]:
        """The services' startup and current state."""
        lines = self._run("services", *names).stdout.splitlines()
        rows = []
        for line in lines[1:]:  # first line is the header
            parts = line.split()
            if len(parts) >= 3:
                rows.append(
                    ServiceState(
                        name=parts[0],
                        enabled=parts[1] == "enabled",
                        active=parts[2] == "active",
                        notes=" ".join(parts[3:]) or "-",
                    )
                )
        return rows

    def service(self, name: str) -> ServiceState:
        """One service's state (disabled and inactive when snapctl does not list it)."""
        for row in self.services(name):
            if row.name == name:
                return row
        return ServiceState(name=name, enabled=False, active=False)

    def start(self, name: str, *, enable: bool = False) -> None:
        """Start a service, enabling it at boot when asked."""
        self._run("start", *(["--enable"] if enable else []), name)

    def stop(self, name: str, *, disable: bool = False) -> None:
        """Stop a service, disabling it at boot when asked."""
        self._run("stop", *(["--disable"] if disable else []), name)

    def restart(self, name: str) -> None:
        """Restart a service."""
        self._run("restart", name)

    # components and interfaces -------------------------------------------------------------
    def install(self, *components: str) -> None:
        """Install components of this snap (``snapctl install +name``)."""
        if components:
            self._run("install", *(f"+{c}" for c in components))

    def remove(self, *components: str) -> None:
        """Remove components of this snap (``snapctl remove +name``)."""
        if components:
            self._run("remove", *(f"+{c}" for c in components))

    def is_connected(self, plug: str) -> bool:
        """Whether the snap's plug is connected (exit status 0)."""
        return self._run("is-connected", plug, check=False).returncode == 0
