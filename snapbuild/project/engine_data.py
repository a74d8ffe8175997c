"""Reading the install-time engine data (``components.yaml``) the builder packs into a snap.

The builder writes it (:func:`snapbuild.project.render.engine_data`): which components each engine
needs and, per artifact file, the component holding it whole or the ordered pieces to join (with
the whole file's sha256). Two readers need the same answer: the installed snap, which installs,
joins and loads the files (:mod:`snaps.artifacts`), and ``snapbuild try``, which stages the
components exactly as the Store would deliver them. So the reading lives here, one layer below
both, beside the contract's writer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from snapbuild.manifest.model import Manifest
from snapcommon.errors import SnapbuildError

ENGINE_DATA_FILE = "components.yaml"  # in the snap's ``$SNAP/snapbuild/``, beside the manifest
SCHEMA_VERSION = 1


class EngineDataError(SnapbuildError):
    """The packed engine data is not what this code understands."""


@dataclass(frozen=True)
class PieceRef:
    """One stored piece of a joined file."""

    component: str
    path: str


@dataclass(frozen=True)
class FileLayout:
    """One artifact file: whole in ``component``, or joined from ``pieces``."""

    path: str
    component: str | None = None
    pieces: tuple[PieceRef, ...] = ()
    sha256: str | None = None
    size: int = 0

    @property
    def joined(self) -> bool:
        return bool(self.pieces)


@dataclass(frozen=True)
class ArtifactLayout:
    """How one artifact is stored in the snap."""

    name: str
    format: str
    components: tuple[str, ...]
    files: tuple[FileLayout, ...]

    @property
    def assembled(self) -> bool:
        """Whether the model is loaded from ``$SNAP_COMMON/artifacts`` (joined or gathered)."""
        return any(f.joined for f in self.files) or len(self.components) > 1


def read_engine_data(path: Path) -> dict[str, Any] | None:
    """The engine data at ``path``; None when the snap has none (built before it existed)."""
    if not path.is_file():
        return None
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("schema-version") != SCHEMA_VERSION:
        raise EngineDataError(
            f"{path} is not engine data this snap understands",
            details=f"expected a mapping with schema-version: {SCHEMA_VERSION}",
            resolution="Rebuild the snap with `snapbuild make`, which writes it.",
        )
    return data


def packed_components(
    data: dict[str, Any] | None, engine: str, option: str | None = None
) -> list[str] | None:
    """The components ``engine`` needs (running ladder option ``option``) as the builder packed
    them (None when not recorded)."""
    if data is not None and option is not None:
        data = (data.get("options") or {}).get(option)
    entry = (data.get("engines") or {}).get(engine) if data else None
    return None if entry is None else [str(c) for c in entry["components"]]


def artifact_layout(
    data: dict[str, Any] | None, manifest: Manifest, artifact: str
) -> ArtifactLayout:
    """How ``artifact`` is stored; without engine data, whole in the component of its name."""
    fmt = manifest.artifact(artifact).format
    entry = (data.get("artifacts") or {}).get(artifact) if data else None
    if entry is None:
        files = manifest.artifact(artifact).files
        return ArtifactLayout(
            artifact, fmt, (artifact,), tuple(FileLayout(f.path, artifact) for f in files)
        )
    return ArtifactLayout(
        name=artifact,
        format=fmt,
        components=tuple(entry["components"]),
        files=tuple(_file_layout(f) for f in entry["files"]),
    )


def _file_layout(entry: dict[str, Any]) -> FileLayout:
    if "pieces" not in entry:
        return FileLayout(path=entry["path"], component=entry["component"])
    return FileLayout(
        path=entry["path"],
        pieces=tuple(PieceRef(p["component"], p["path"]) for p in entry["pieces"]),
        sha256=entry["sha256"],
        size=int(entry["size"]),
    )
