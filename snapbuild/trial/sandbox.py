"""One trial's directories and the variables snapd would set, and running things inside it.

Everything the trial does to the snap goes through here as a subprocess, the way snapd and a
user reach an installed snap: the rendered hook scripts, the snap's command (``bin/<name>``, like
``/snap/bin/<name>``) and the snapctl stand-in. The toolkit never imports the snap's code, so
what a trial shows is what an install does.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from hwprobe.replay import HOST_PROFILE_VAR, HOST_ROOT_VAR
from snapbuild.trial.snapctl.state import HOOK_VAR, STAGED_VAR, STATE_VAR
from snapcommon.errors import SnapbuildError

REVISION = "x1"
# what the caller's environment hands on to the snap: a replayed machine, the weights cache
PASSTHROUGH_VARS = (HOST_ROOT_VAR, HOST_PROFILE_VAR, "SNAPBUILD_CACHE", "HOME")


class TrialError(SnapbuildError):
    """The trial could not assemble or run the snap."""


@dataclass(frozen=True)
class Trial:
    """The directories of one trial; ``env`` is what snapd would set for the snap."""

    work: Path
    name: str

    @property
    def project(self) -> Path:
        return self.work / "project"

    @property
    def prime(self) -> Path:
        return self.work / "prime"

    @property
    def staged(self) -> Path:
        return self.work / "staged-components"

    @property
    def bin(self) -> Path:
        return self.work / "bin"

    @property
    def state(self) -> Path:
        return self.work / "snapctl-state"

    @property
    def env(self) -> dict[str, str]:
        env = {
            "SNAP": str(self.prime),
            "SNAP_NAME": self.name,
            "SNAP_INSTANCE_NAME": self.name,
            "SNAP_REVISION": REVISION,
            "SNAP_DATA": str(self.work / "var" / REVISION),
            "SNAP_COMMON": str(self.work / "var" / "common"),
            "SNAP_COMPONENTS": str(self.work / "components" / REVISION),
            STATE_VAR: str(self.state),
            STAGED_VAR: str(self.staged),
            "PATH": f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "PYTHONPATH": str(source_root()),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "SNAP_LIBRARY_PATH": "",
        }
        env.update({k: os.environ[k] for k in PASSTHROUGH_VARS if os.environ.get(k)})
        return env

    def command(self, *args: str) -> list[str]:
        """How a user runs the snap's command in this trial (like /snap/bin/<name>)."""
        return [str(self.bin / self.name), *args]

    def run(self, *args: str, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run the snap's command and capture its output."""
        return subprocess.run(
            self.command(*args), capture_output=True, text=True, input=input_text, check=False
        )

    def snapctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the snapctl stand-in as a hook would."""
        return subprocess.run(
            [str(self.bin / "snapctl"), *args],
            capture_output=True,
            text=True,
            env=self.env,
            check=False,
        )

    def run_hook(self, hook: str, *, flush: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the rendered hook script from meta/hooks, as snapd does, then settle its queue.

        Inside the hook the stand-in queues component and service changes (snapd performs them
        after the hook); on exit 0 they are flushed (components, then services), otherwise
        discarded. A failed flush is reported as the hook step failing, with its error appended,
        as `snap install` fails when a queued task fails. ``flush=False`` leaves the queue as it
        is (a test of what happens while snapd is still working through it).
        """
        proc = subprocess.run(
            [str(self.prime / "meta" / "hooks" / hook)],
            capture_output=True,
            text=True,
            env={**self.env, HOOK_VAR: hook},
            cwd=self.env["SNAP_DATA"],
            check=False,
        )
        if not flush:
            return proc
        if proc.returncode != 0:
            self.snapctl("discard")
            return proc
        settled = self.snapctl("flush")
        return subprocess.CompletedProcess(
            proc.args, settled.returncode, proc.stdout, proc.stderr + settled.stderr
        )

    def log(self) -> str:
        """The server's log so far (the stand-in's journal)."""
        path = self.state / "logs" / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Stop the server and every process in its group."""
        if (self.state / "services.json").exists():
            self.snapctl("stop", f"{self.name}.server")


def source_root() -> Path:
    """The directory holding this project's packages (snaps/, snapbuild/, runtimes/, hwprobe/)."""
    return Path(__file__).resolve().parents[2]
