"""Local-only artifact files: weights that exist only on the packager's machine.

A manifest file entry with ``local: {path: ...}`` and no ``url`` is local-only. A snap build
(in a container or on a remote builder) cannot read the packager's file system, and a ``file://``
URL in a part's ``source`` points at nothing there, so ``snapbuild make`` copies such files into
the project, under ``local-artifacts/<artifact>/<file>``, and the part's ``source`` names that
project-relative path (snapcraft copies a local ``source-type: file`` and checks its
``source-checksum``). Relative ``local.path`` values are relative to the manifest file's
directory, so a manifest written next to its model by ``snapbuild new`` keeps working when the
directory moves.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from snapbuild.manifest.filenames import CONTROL, inside
from snapbuild.manifest.model import Manifest
from snapcommon.errors import UsageError

STAGE_DIR = "local-artifacts"
MARKER = ".snapbuild-output.json"  # snapbuild.project.render.MARKER (kept in step by a test)


def staged_source(artifact: str, path: str) -> str:
    """The project-relative ``source`` of a local-only file's part."""
    return f"{STAGE_DIR}/{artifact}/{path}"


def resolve_local_paths(data: Any, base: Path) -> None:
    """Make relative ``local.path`` values (no python-package) absolute against ``base``, in the
    raw manifest data, before it is validated."""
    if not isinstance(data, dict):
        return
    for artifact in data.get("artifacts") or ():
        for file in (artifact.get("files") or ()) if isinstance(artifact, dict) else ():
            local = file.get("local") if isinstance(file, dict) else None
            if (
                isinstance(local, dict)
                and not local.get("python-package")
                and isinstance(local.get("path"), str)
                and local["path"]
                and not CONTROL.search(local["path"])  # refused by the model: left as given
                and not local["path"].endswith("/")
                and not Path(local["path"]).is_absolute()
            ):
                local["path"] = str((base / local["path"]).resolve())


def stage_local_files(manifest: Manifest, artifacts: set[str], out: Path) -> list[str]:
    """Copy every local-only file of ``artifacts`` into ``out/local-artifacts`` (a hard link
    when the file system allows); returns the staged project paths. Refuses clearly when a file
    is missing or its size is not the manifest's."""
    from snapbuild.fetch.artifacts import local_file

    staged: list[str] = []
    for artifact in manifest.artifacts:
        if artifact.name not in artifacts:
            continue
        for file in artifact.files:
            if file.url is not None or file.local is None:
                continue
            found = local_file(file.local)
            where = f"{artifact.name}/{file.path}"
            if found is None:
                raise UsageError(
                    f"the local-only file {where} is not at {file.local.path}",
                    details="a file with local: and no url is copied into the snap project",
                    resolution="put the file back there, fix local.path in the manifest, or give "
                    "the file a url where the build can download it",
                )
            size = found.stat().st_size
            if size != file.size:
                raise UsageError(
                    f"the local-only file {where} is {size} bytes, not the manifest's {file.size}",
                    details=f"file: {found}",
                    resolution="run `snapbuild validate` on the manifest for every difference",
                )
            target = inside(out, STAGE_DIR, artifact.name, file.path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            try:
                os.link(found, target)
            except OSError:
                shutil.copy2(found, target)
            staged.append(str(target.relative_to(out)))
    if staged:
        _record_in_marker(out)
    return staged


def _record_in_marker(out: Path) -> None:
    """Add the staging directory to the output record, so the next ``make`` replaces it."""
    marker = out / MARKER
    if not marker.is_file():
        return
    record = json.loads(marker.read_text(encoding="utf-8"))
    files = record.get("files", [])
    if f"{STAGE_DIR}/" not in files:
        record["files"] = sorted([*files, f"{STAGE_DIR}/"])
        marker.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
