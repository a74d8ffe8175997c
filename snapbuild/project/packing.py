"""How a model's weights become snap components: pieces packed under the Store's size limit.

An artifact's files (or their declared shards) are :class:`Piece` s; :func:`pack` fills
components in file order up to :data:`COMPONENT_BUDGET`, and :func:`plan_joins` lists the files the
install hook puts back together from their pieces. Kept apart from :mod:`.plan` (which engines
and runtimes a snap carries) because the limits and names here are the Store's and snapcraft's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from posixpath import basename
from typing import Literal
from urllib.parse import urlparse

from snapbuild.fetch.local import staged_source
from snapbuild.manifest.model import STORE_COMPONENT_LIMIT, Artifact, ArtifactFile, Engine, Manifest
from snapcommon.errors import ManifestError
from snapcommon.model import KebabModel

# A component must stay under the Store's limit with room for squashfs and metadata overhead.
COMPONENT_BUDGET = STORE_COMPONENT_LIMIT - 64 * 1024**2
# A downloaded file's name becomes an organize key, which snapcraft treats as a glob.
_PLAIN_FILE_NAME = re.compile(r"^[A-Za-z0-9._+-]+$")


class Piece(KebabModel):
    """One file that lands in an artifact component: a whole file or one declared shard."""

    artifact: str
    file: str  # the artifact file this piece belongs to (ArtifactFile.path)
    file_index: int  # 1-based position of that file in the artifact (names its part)
    path: str  # where it lands inside its component
    size: int
    kind: Literal["file", "shard"]
    index: int = 0  # 1-based position among a file's shards; 0 for whole files
    url: str  # download URL
    sha256: str  # of the download
    placeholder: bool = False
    component: str = ""  # filled in when pieces are packed into components


class ComponentPlan(KebabModel):
    """One snap component: a runtime build or (part of) a model artifact."""

    name: str
    kind: Literal["runtime", "artifact"]
    runtimes: tuple[str, ...] = ()  # runtime ids built into it (kind runtime)
    artifact: str | None = None  # kind artifact
    size: int | None = None  # bytes of payload when known before building (artifacts)
    pieces: tuple[Piece, ...] = ()


class JoinPlan(KebabModel):
    """A file stored as several pieces, to be joined back (in order) at install time."""

    artifact: str
    path: str
    sha256: str
    size: int
    pieces: tuple[Piece, ...]


def artifact_components(pairs: Sequence[tuple[Manifest, Engine]]) -> tuple[ComponentPlan, ...]:
    """The components of every artifact the (manifest, engine) pairs load, each packed once:
    a ladder's pairs are resolved per option, so each option's weights are components of
    their own."""
    used = {a.name: a for view, e in pairs for a in view.engine_artifacts(e)}
    return tuple(c for artifact in used.values() for c in pack(artifact))


def _pieces(artifact: Artifact, file: ArtifactFile, file_index: int) -> list[Piece]:
    common = {
        "artifact": artifact.name,
        "file": file.path,
        "file_index": file_index,
        "placeholder": file.placeholder,
    }
    if file.shards:
        return [
            Piece(
                **common,
                path=f"{file.path}.part-{i:02d}",
                size=s.size,
                kind="shard",
                index=i,
                url=s.url,
                sha256=s.sha256,
            )
            for i, s in enumerate(file.shards, 1)
        ]
    return [
        Piece(
            **common,
            path=file.path,
            size=file.size,
            kind="file",
            # local-only: the copy `make` stages into the project (snapbuild.fetch.local)
            url=file.url or staged_source(artifact.name, file.path),
            sha256=file.sha256,
        )
    ]


def pack(artifact: Artifact) -> list[ComponentPlan]:
    """Pack an artifact's pieces, in order, into as few components under the budget as fit."""
    bins: list[list[Piece]] = [[]]
    for file_index, file in enumerate(artifact.files, 1):
        for piece in _pieces(artifact, file, file_index):
            if piece.size > COMPONENT_BUDGET:
                raise ManifestError(
                    f"{artifact.name}/{piece.path} is {piece.size} bytes: with the squashfs "
                    f"overhead it does not fit a component under the Store's "
                    f"{STORE_COMPONENT_LIMIT}-byte limit (at most {COMPONENT_BUDGET} bytes)",
                    resolution="list the file's shards in the manifest (url, sha256, size each)",
                )
            if bins[-1] and sum(p.size for p in bins[-1]) + piece.size > COMPONENT_BUDGET:
                bins.append([])
            bins[-1].append(piece)
    components = []
    for i, pieces in enumerate(bins, 1):
        name = artifact.name if i == 1 else f"{artifact.name}-{i}"
        if len(name) > 40:
            raise ManifestError(
                f"artifact {artifact.name!r} needs {len(bins)} components and {name!r} is "
                "longer than the 40 characters a component name may have",
                resolution="give the artifact a shorter name",
            )
        placed = tuple(p.model_copy(update={"component": name}) for p in pieces)
        components.append(
            ComponentPlan(
                name=name,
                kind="artifact",
                artifact=artifact.name,
                size=sum(p.size for p in placed),
                pieces=placed,
            )
        )
    return components


def plan_joins(manifest: Manifest, artifacts: tuple[ComponentPlan, ...]) -> tuple[JoinPlan, ...]:
    pieces = [p for c in artifacts for p in c.pieces if p.kind == "shard"]
    joins: list[JoinPlan] = []
    for artifact_name, path in dict.fromkeys((p.artifact, p.file) for p in pieces):
        file = next(f for f in manifest.artifact(artifact_name).files if f.path == path)
        joins.append(
            JoinPlan(
                artifact=artifact_name,
                path=path,
                sha256=file.sha256,
                size=file.size,
                pieces=tuple(p for p in pieces if (p.artifact, p.file) == (artifact_name, path)),
            )
        )
    return tuple(joins)


def download_name(url: str, where: str) -> str:
    """The file name snapcraft gives a downloaded ``source`` (the URL path's last segment)."""
    name = basename(urlparse(url).path)
    if not _PLAIN_FILE_NAME.match(name):
        raise ManifestError(
            f"the URL of {where} does not end in a plain file name",
            details=f"url: {url!r}",
            resolution="use a URL whose path ends in the file name (letters, digits, . _ + -)",
        )
    return name
