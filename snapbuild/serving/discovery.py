"""Discovery: how other programs find an inference snap's API, and the reader that lists them.

A running snap publishes a small JSON document (:data:`DOCUMENT`) in ``$SNAP_COMMON/discovery``
(:data:`DIRECTORY`): its base URL, health URL, Unix socket, model id, engine, capabilities and
version. The snap offers that directory to other snaps read-only through a ``content`` slot
(:data:`SLOT`, declared in the rendered snapcraft.yaml), and serves the same API on a Unix
socket (:data:`SOCKET`) beside it for local programs that want no TCP port. On the machine the
documents are at ``/var/snap/<snap>/common/discovery/api.json``; :func:`find` lists them all
(``snapbuild discover``).

The layout lives here, one layer below the snap's code, so that the writer (:mod:`snaps.
discovery`) and the reader agree by construction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtimes.declared import Capability
from snapbuild.manifest.model import Manifest
from snapbuild.selection.decision import Selected

DIRECTORY = "discovery"  # under $SNAP_COMMON: what the content slot shares
DOCUMENT = "api.json"
SOCKET = "api.sock"  # under $SNAP_COMMON, outside the shared directory (consumers read only)
SLOT = "inference-api"  # the content slot's name and its `content:` identifier
SCHEMA_VERSION = 1
SNAPS_ROOT = Path("/var/snap")  # where snapd keeps every snap's $SNAP_COMMON (<snap>/common)


def declared_capabilities(manifest: Manifest, selected: Selected) -> tuple[Capability, ...]:
    """What the service proves at start for ``selected`` (and the document lists): text always
    (a token, or a vector for an embedder), images where the engine reads them here (its
    projector fits), tools where the manifest says the model calls them (``model.tools``)."""
    declared: list[Capability] = ["text"]
    if "vision" in selected.inputs:
        declared.append("vision")
    if manifest.model.tools and manifest.model.kind == "chat":
        declared.append("tools")
    return tuple(declared)


def directory(common: Path) -> Path:
    """The shared directory of a snap whose ``$SNAP_COMMON`` is ``common``."""
    return common / DIRECTORY


def document_path(common: Path) -> Path:
    """The discovery document of a snap whose ``$SNAP_COMMON`` is ``common``."""
    return directory(common) / DOCUMENT


def socket_path(common: Path) -> Path:
    """The Unix socket the API also listens on."""
    return common / SOCKET


@dataclass(frozen=True)
class Found:
    """One discovery document on this machine (or the reason it could not be read)."""

    path: Path
    document: dict[str, Any] | None
    problem: str | None = None


def read(path: Path) -> Found:
    """One document; a file that is not one (unreadable, not JSON, another schema) says why."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return Found(path, None, f"cannot read it: {exc}")
    if not isinstance(data, dict) or data.get("schema-version") != SCHEMA_VERSION:
        return Found(path, None, f"not a discovery document of schema {SCHEMA_VERSION}")
    return Found(path, data)


def find(roots: Iterable[Path] = (SNAPS_ROOT,)) -> list[Found]:
    """Every document under ``roots``, sorted by path: each root is a directory of snaps
    (``/var/snap``: ``<snap>/common/discovery/api.json``), a ``$SNAP_COMMON`` directory, or a
    document itself."""
    paths: set[Path] = set()
    for root in roots:
        if root.is_file():
            paths.add(root)
        elif document_path(root).is_file():
            paths.add(document_path(root))
        else:
            paths.update(p for p in root.glob(f"*/common/{DIRECTORY}/{DOCUMENT}") if p.is_file())
    return [read(p) for p in sorted(paths)]
