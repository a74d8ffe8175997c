"""Where an installed snap keeps things, read from the variables snapd sets.

Every in-snap command and hook reads its paths from ``$SNAP``, ``$SNAP_DATA``, ``$SNAP_COMMON``,
``$SNAP_NAME``, ``$SNAP_REVISION`` and ``$SNAP_COMPONENTS`` rather than assuming ``/snap/...``,
so ``snapbuild try`` can run the very same code in a simulated tree.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from snapcommon.errors import UsageError

REQUIRED = ("SNAP", "SNAP_DATA", "SNAP_NAME")


@dataclass(frozen=True)
class SnapEnv:
    """The paths of one installed snap revision."""

    snap: Path
    data: Path
    common: Path
    name: str
    revision: str
    components: Path

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> SnapEnv:
        """Read the snap's variables; a clear error when run outside a snap."""
        env = os.environ if environ is None else environ
        missing = [var for var in REQUIRED if not env.get(var)]
        if missing:
            raise UsageError(
                f"not running inside a snap: {', '.join(missing)} not set",
                details="This command manages an installed inference snap; it reads $SNAP, "
                "$SNAP_DATA and $SNAP_NAME, which snapd sets.",
                resolution="Run it as the snap's command (e.g. `smollm2 status`), or try a "
                "model locally with `snapbuild try MODEL`, which prints the environment to use.",
            )
        snap = Path(env["SNAP"])
        name = env["SNAP_NAME"]
        revision = env.get("SNAP_REVISION", "x1")
        data = Path(env["SNAP_DATA"])
        common = Path(env.get("SNAP_COMMON") or data.parent / "common")
        components = Path(env.get("SNAP_COMPONENTS") or f"/snap/{name}/components/{revision}")
        return cls(snap, data, common, name, revision, components)

    @property
    def manifest_path(self) -> Path:
        """The manifest the snap was built from (packed by the builder's dump part)."""
        return self.snap / "snapbuild" / "manifest.yaml"

    @property
    def decision_path(self) -> Path:
        """The selector's decision for this machine (the Decision JSON contract)."""
        return self.data / "decision.json"

    @property
    def state_path(self) -> Path:
        """What the hooks noted beside the decision (fallbacks, why nothing runs)."""
        return self.data / "state.json"

    @property
    def running_path(self) -> Path:
        """The settings the running daemon started with, to tell whether a restart is due."""
        return self.data / "running.json"

    @property
    def daemon_status_paths(self) -> tuple[Path, Path]:
        """What the daemon is doing (waiting for components, preparing, serving, failed): in
        $SNAP_DATA, or in $SNAP_COMMON when $SNAP_DATA cannot be written (then that is why the
        daemon stopped); `status` reads the newer."""
        return self.data / "daemon.json", self.common / "daemon.json"

    def component_dir(self, component: str) -> Path:
        """Where snapd mounts an installed component."""
        return self.components / component

    @property
    def service(self) -> str:
        """The server app's service name, as snapctl names it."""
        return f"{self.name}.server"
