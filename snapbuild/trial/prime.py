"""The prime tree snapcraft would build, and the commands a user would have on PATH.

The project is rendered by the builder, exactly as ``snapbuild make`` does; ``meta/snap.yaml``
is the builder's translation of the rendered snapcraft.yaml, the hooks are the rendered scripts,
and the snap's code runs from this checkout through launchers into this Python (snapcraft would
install it into the snap; the trial does not need to). ``snap pack --check-skeleton``, when
installed, judges the tree as snapd would.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from snapbuild.trial.sandbox import Trial, TrialError, source_root

# the module the snap's command runs (``inference-snap``) and the stand-in the trial puts on PATH
SNAP_MODULE = "snaps"
STANDIN_MODULE = "snapbuild.trial.snapctl"


def render(manifest_name: str, dest: Path, engines: list[str] | None) -> None:
    """Render the snapcraft project with the builder, exactly as `snapbuild make` does."""
    from snapbuild.project.builder import make

    make(manifest_name, dest, engines=engines or ())


def snap_yaml_from(snapcraft: dict[str, Any], arch: str) -> dict[str, Any]:
    """What snapcraft writes to meta/snap.yaml (the builder's translation, one architecture)."""
    from snapbuild.project.builder import snap_yaml

    return snap_yaml(snapcraft, arch)


def _launcher(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    path.chmod(0o755)


def _python_launcher(path: Path, module: str) -> None:
    """A launcher running this venv's Python on a module of this project."""
    root = shlex.quote(str(source_root()))
    _launcher(
        path,
        f"PYTHONPATH={root}${{PYTHONPATH:+:$PYTHONPATH}} exec {shlex.quote(sys.executable)} "
        f'-m {module} "$@"',
    )


def assemble_prime(trial: Trial, arch: str) -> dict[str, Any]:
    """The prime tree: meta/snap.yaml, meta/hooks (the rendered scripts), bin/, snapbuild/.

    Returns the rendered snapcraft.yaml data.
    """
    snapcraft = yaml.safe_load((trial.project / "snap" / "snapcraft.yaml").read_text())
    meta = trial.prime / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    snap_yaml = snap_yaml_from(snapcraft, arch)
    (meta / "snap.yaml").write_text(yaml.safe_dump(snap_yaml, sort_keys=False))
    hooks_src = trial.project / "snap" / "hooks"
    if hooks_src.is_dir():
        shutil.copytree(hooks_src, meta / "hooks")
        for hook in (meta / "hooks").iterdir():
            hook.chmod(0o755)
    _python_launcher(trial.prime / "bin" / "inference-snap", SNAP_MODULE)
    data_src = trial.project / "snapbuild-data"
    (trial.prime / "snapbuild").mkdir(exist_ok=True)
    for item in data_src.iterdir() if data_src.is_dir() else ():
        shutil.copy2(item, trial.prime / "snapbuild" / item.name)
    _prime_doc(trial, snapcraft)
    return snapcraft


def _prime_doc(trial: Trial, snapcraft: dict[str, Any]) -> None:
    """The licence notice, where the project's doc part organizes it (usr/share/doc/<snap>/)."""
    from snapbuild.project.snapcraft_yaml import DOC_SOURCE_DIR

    part = (snapcraft.get("parts") or {}).get(DOC_SOURCE_DIR) or {}
    target = str((part.get("organize") or {}).get("*", "")).strip("/")
    source = trial.project / DOC_SOURCE_DIR
    if target and source.is_dir():
        shutil.copytree(source, trial.prime / target, dirs_exist_ok=True)


def write_commands(trial: Trial) -> None:
    """bin/snapctl (the stand-in), bin/<name> (like /snap/bin/<name>) and env.sh."""
    _python_launcher(trial.bin / "snapctl", STANDIN_MODULE)
    exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in trial.env.items())
    (trial.work / "env.sh").write_text(exports + "\n")
    _launcher(trial.bin / trial.name, f'{exports}\nexec "$SNAP/bin/inference-snap" "$@"')
    for var in ("SNAP_DATA", "SNAP_COMMON"):
        Path(trial.env[var]).mkdir(parents=True, exist_ok=True)


def check_skeleton(prime: Path) -> str:
    """Validate the prime tree with Debian's `snap pack --check-skeleton`, when installed."""
    snap = shutil.which("snap")
    if snap is None:
        return "skipped: `snap` is not installed (apt-get install snapd gives `snap pack`)"
    proc = subprocess.run(
        [snap, "pack", "--check-skeleton", str(prime)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise TrialError(
            "`snap pack --check-skeleton` rejects the prime tree",
            details=(proc.stderr or proc.stdout).strip(),
            resolution="The rendered snapcraft.yaml produces invalid snap metadata; fix the "
            "builder's output.",
        )
    return "passed"
