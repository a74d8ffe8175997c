"""The snap's daemons, run as systemd runs snapd's units for them.

snapd writes one systemd unit per daemon app; systemd starts it (``WorkingDirectory=$SNAP_DATA``,
the unit's environment), stops it with SIGTERM to the whole control group and SIGKILL after the
stop timeout (30 s, ``timeout.DefaultTimeout``), and restarts it by its ``restart-condition``
after ``restart-delay`` until its start limit (5 starts in 10 s) marks it failed. There is no
systemd here, so the stand-in's server (:mod:`.server`) keeps a :class:`ServiceSet` and calls
:meth:`ServiceSet.supervise` between requests. How one process is started (environment,
namespace, filter, log) is the server's ``start`` callable; the rules are the snapctl stand-in's
(:mod:`snapbuild.trial.snapctl.supervisor`), so both judge a failing daemon alike.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from snapbuild.trial.snapctl.services import resolve_services, services_table
from snapbuild.trial.snapctl.supervisor import (
    RESTART_DELAY_S,
    START_LIMIT_BURST,
    START_LIMIT_BURST_VAR,
    START_LIMIT_INTERVAL_S,
    START_LIMIT_INTERVAL_VAR,
    parse_duration,
    should_restart,
)
from snapbuild.trial.snapd.meta import SnapMeta

STOP_TIMEOUT_S = 30.0


@dataclass
class Service:
    """One daemon's unit: its process, whether it is enabled, its recent starts."""

    proc: subprocess.Popen[bytes] | None = None
    enabled: bool | None = None  # None: no one enabled or disabled it yet
    starts: list[float] = field(default_factory=list)
    failed: bool = False
    stopping: bool = False
    restart_at: float | None = None  # a restart waiting for its restart-delay

    @property
    def active(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self) -> dict[str, Any]:
        return {
            "enabled": bool(self.enabled),
            "active": self.active or self.restart_at is not None,
            "failed": self.failed and not self.active,
            "starts": len(self.starts),
            "pid": self.proc.pid if self.active and self.proc else None,
            "returncode": None if self.proc is None else self.proc.poll(),
        }


@dataclass(frozen=True)
class ServiceStatus:
    """One service as ``snap services`` and systemd see it."""

    enabled: bool
    active: bool
    failed: bool
    starts: int
    pid: int | None
    returncode: int | None


class ServiceSet:
    """The snap's services; ``start(app)`` launches one process of the app in the snap."""

    def __init__(
        self, snap: str, meta: SnapMeta, start: Callable[[str], subprocess.Popen[bytes]]
    ) -> None:
        self.snap = snap
        self.meta = meta
        self._start = start
        self.services: dict[str, Service] = {}
        self.burst = int(os.environ.get(START_LIMIT_BURST_VAR) or START_LIMIT_BURST)
        self.interval = parse_duration(
            os.environ.get(START_LIMIT_INTERVAL_VAR), START_LIMIT_INTERVAL_S
        )

    def resolve(self, names: list[str]) -> list[str]:
        """snapctl's service arguments to app names (a StandinError for unknown ones)."""
        return resolve_services(self.snap, self.meta.services, names)

    def act(self, action: str, args: list[str]) -> None:
        """``start``, ``stop`` or ``restart`` (``--enable``/``--disable``) named services."""
        for app in self.resolve([a for a in args if not a.startswith("-")]):
            svc = self.services.setdefault(app, Service())
            if action in ("stop", "restart"):
                self._stop(svc)
            if action in ("start", "restart") and not svc.active:
                svc.starts, svc.failed = [], False  # an explicit start clears the limit
                self._spawn(app, svc)
            if "--enable" in args:
                svc.enabled = True
            if "--disable" in args:
                svc.enabled = False

    def _spawn(self, app: str, svc: Service) -> None:
        svc.restart_at = None
        svc.stopping = False
        svc.starts.append(time.monotonic())
        svc.proc = self._start(app)

    def _stop(self, svc: Service) -> None:
        svc.restart_at = None
        if svc.proc is None or not svc.active:
            return
        svc.stopping = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(svc.proc.pid, signal.SIGTERM)
        try:
            svc.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(svc.proc.pid, signal.SIGKILL)
            svc.proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(svc.proc.pid, signal.SIGKILL)  # what is left of the group

    def supervise(self) -> None:
        """systemd's ``Restart=`` for the services that exited, within the start limit."""
        now = time.monotonic()
        for app, svc in self.services.items():
            if svc.restart_at is not None and now >= svc.restart_at:
                self._spawn(app, svc)
                continue
            if svc.proc is None or svc.stopping or svc.failed or svc.restart_at is not None:
                continue
            code = svc.proc.poll()
            if code is None:
                continue
            runnable = self.meta.apps[app]
            if not should_restart(runnable.restart_condition, code):
                continue
            if len([t for t in svc.starts if now - t < self.interval]) >= self.burst:
                svc.failed = True
                continue
            svc.restart_at = now + parse_duration(runnable.restart_delay or None, RESTART_DELAY_S)

    def statuses(self) -> dict[str, dict[str, Any]]:
        """Every service's :meth:`Service.status`, by app."""
        self.supervise()  # an exited service is then restarting or down, never in between
        return {app: svc.status() for app, svc in self.services.items()}

    def table(self, args: list[str]) -> str:
        """``snapctl services`` for the named services (all when none)."""
        self.supervise()
        rows = []
        for app in self.resolve([a for a in args if not a.startswith("-")]):
            svc = self.services.get(app, Service())
            rows.append((app, bool(svc.enabled), svc.active, svc.failed))
        return services_table(self.snap, rows) + "\n"

    def start_snap_services(self, *, install: bool) -> None:
        """snapd's ``start-snap-services`` task: on install, every service whose install-mode
        is not ``disable`` and that a hook did not disable (``ServicesDisabledByHooks``),
        enabled and started; on refresh, the enabled ones."""
        for app in self.meta.services:
            svc = self.services.setdefault(app, Service())
            if install and svc.enabled is None and self.meta.apps[app].install_mode != "disable":
                svc.enabled = True
            if svc.enabled and not svc.active:
                svc.starts, svc.failed = [], False
                self._spawn(app, svc)

    def stop_all(self) -> None:
        for svc in self.services.values():
            self._stop(svc)

    def retarget(self, meta: SnapMeta) -> None:
        """A new revision is current: later starts run its apps."""
        self.meta = meta
