"""Weights checked before their first load after install, and only again when they change.

The Store checks a component when it is installed; a file can still be damaged afterwards
(a bad disk, a stray write into a joined copy in $SNAP_COMMON), and a damaged file loads as
garbage or crashes the runtime. So the daemon (and `use-engine`) hash every file an engine
loads once, before loading it, and record what they checked per artifact under
``$SNAP_COMMON/artifacts/.verified/<artifact>.json`` (a :class:`snapcommon.files.Stamp` per
file: sha256, size, mtime); a file whose stamp still holds is not read again. A file that does
not match is :class:`CorruptArtifact`, which stops the daemon cleanly: a restart would load
the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from snapbuild.manifest.model import Manifest
from snapcommon.errors import SnapbuildError
from snapcommon.files import Stamp, sha256_of, write_atomically
from snaps.env import SnapEnv

VERIFIED_DIR = ".verified"  # under $SNAP_COMMON/artifacts: what was checked, per artifact


class CorruptArtifact(SnapbuildError):
    """A model file does not have its recorded sha256: reinstalling is the fix, not a restart."""


def record_path(env: SnapEnv, artifact: str) -> Path:
    return env.common / "artifacts" / VERIFIED_DIR / f"{artifact}.json"


def _records(env: SnapEnv, artifact: str) -> dict[str, Any]:
    try:
        data = json.loads(record_path(env, artifact).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def holds(env: SnapEnv, artifact: str, name: str, path: Path, sha256: str) -> bool:
    """Whether ``path`` (the artifact's file ``name``) is unchanged since it was checked."""
    stamp = Stamp.from_data(_records(env, artifact).get(name))
    return stamp is not None and stamp.sha256 == sha256 and stamp.holds(path, sha256)


def mark(env: SnapEnv, artifact: str, name: str, path: Path, sha256: str) -> None:
    """Record that ``path`` was just checked against ``sha256``."""
    records = _records(env, artifact)
    records[name] = Stamp.of(path, sha256).to_data()
    target = record_path(env, artifact)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, json.dumps(records, indent=2) + "\n")


def check_once(
    env: SnapEnv,
    manifest: Manifest,
    artifact: str,
    files: dict[str, Path],
    say: Callable[[str], None],
) -> None:
    """Hash each of ``artifact``'s ``files`` (name -> where it is loaded from) whose stamp does
    not hold, against the manifest's sha256; :class:`CorruptArtifact` names one that differs."""
    sums = {f.path: f.sha256 for f in manifest.artifact(artifact).files}
    for name, path in files.items():
        want = sums.get(name)
        if want is None or holds(env, artifact, name, path, want):
            continue
        say(f"checking {artifact}/{name} (sha256, once before its first load)")
        got = sha256_of(path)
        if got != want:
            raise CorruptArtifact(
                f"{artifact}/{name} is damaged: its sha256 is not the one the snap was built with",
                details=f"{path}: expected sha256 {want}, got {got}",
                resolution=f"Reinstall the snap (or its {artifact} component), then start the "
                "service again.",
            )
        mark(env, artifact, name, path, want)
