"""The process that runs one daemon app and restarts it as systemd would for snapd.

snapd writes a systemd unit per daemon; systemd restarts it by its ``restart-condition``
(default ``on-failure``) after ``restart-delay``, and gives up after its default start limit (5
starts within 10 s), marking the service failed. The stand-in has no systemd, so this supervisor
does the same, keeping a daemon that keeps failing from being restarted forever.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from snapbuild.trial.snapctl.services import SERVICES_FILE, daemons, environment
from snapbuild.trial.snapctl.state import StandinError, read, state_dir, write

# systemd's defaults for a unit snapd writes (DefaultStartLimitBurst/IntervalSec, RestartSec);
# the variables let a test widen the window on a slow machine.
START_LIMIT_BURST_VAR = "SNAPCTL_STANDIN_START_LIMIT_BURST"
START_LIMIT_INTERVAL_VAR = "SNAPCTL_STANDIN_START_LIMIT_INTERVAL"
START_LIMIT_BURST = 5
START_LIMIT_INTERVAL_S = 10.0
RESTART_DELAY_S = 0.1
_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: Any, default: float) -> float:
    """A snap.yaml or systemd duration (``100ms``, ``2s``, ``1m``; a bare number is seconds)."""
    match = _DURATION_RE.match(str(text).strip()) if text is not None else None
    return float(match[1]) * _UNITS[match[2]] if match else default


def should_restart(condition: str, returncode: int) -> bool:
    """systemd's Restart= rules for an exit status (negative: killed by that signal)."""
    if condition == "always":
        return True
    if condition == "on-success":
        return returncode == 0
    if condition == "on-failure":
        return returncode != 0
    if condition in {"on-abnormal", "on-abort"}:
        return returncode < 0
    return False  # never, on-watchdog (no watchdog here)


class Supervisor:
    """Runs one daemon and restarts it by its ``restart-condition``, within the start limit."""

    def __init__(self, name: str, app: dict[str, Any]) -> None:
        self.name = name
        self.condition = str(app.get("restart-condition") or "on-failure")
        self.delay = parse_duration(app.get("restart-delay"), RESTART_DELAY_S)
        self.burst = int(os.environ.get(START_LIMIT_BURST_VAR) or START_LIMIT_BURST)
        interval = os.environ.get(START_LIMIT_INTERVAL_VAR)
        self.interval = parse_duration(interval, START_LIMIT_INTERVAL_S)
        argv = shlex.split(app["command"])
        argv[0] = str(Path(os.environ["SNAP"]) / argv[0])
        self.argv = argv
        self.env = environment(app)
        self.stopping = False
        self.child: subprocess.Popen[bytes] | None = None

    def say(self, message: str) -> None:
        sys.stdout.write(f"snapctl-standin: {self.name}: {message}\n")
        sys.stdout.flush()

    def on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.child.send_signal(signum)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        starts: list[float] = []
        while not self.stopping:
            starts.append(time.monotonic())
            self.say(f"starting (attempt {len(starts)})")
            self.child = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL)
            code = self.child.wait()
            if self.stopping:
                return 0
            self.say(f"exited with status {code}")
            if not should_restart(self.condition, code):
                return 0
            now = time.monotonic()
            recent = [t for t in starts if now - t < self.interval]
            if len(recent) >= self.burst:
                self.say(
                    f"start limit hit ({len(recent)} starts within {self.interval:g}s); "
                    "not restarting: the service is failed"
                )
                self.mark_failed(len(starts))
                return 1
            time.sleep(self.delay)
        return 0

    def mark_failed(self, starts: int) -> None:
        """Note the failure in services.json (never blocking a `stop` that holds the lock)."""
        with (state_dir() / "lock").open("w") as fh:
            while not self.stopping:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    time.sleep(0.05)
                    continue
                services = read(SERVICES_FILE, {})
                record = services.get(self.name, {})
                if record.get("pid") == os.getpid():
                    record["failed"] = True
                    record["starts"] = starts
                    services[self.name] = record
                    write(SERVICES_FILE, services)
                return


def cmd_supervise(args: list[str]) -> str:
    """Internal: the supervisor process of one app (started by start/restart)."""
    apps = daemons()
    if len(args) != 1 or args[0] not in apps:
        raise StandinError("supervise takes the name of one daemon app")
    raise SystemExit(Supervisor(args[0], apps[args[0]]).run())
