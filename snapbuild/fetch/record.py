"""Trust on first use: ``fetch --record`` downloads a placeholder file and records it.

A shipped manifest may list a file whose url is real but whose size and sha256 could not be
verified when it was written (``placeholder: true``). ``fetch --record`` downloads such a file
once, trusts what it got, and writes its size and sha256 into the manifest file
(:func:`snapbuild.manifest.edit.record_in_text` keeps the file's comments and layout).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from snapbuild.fetch.artifacts import (
    FetchError,
    FetchResult,
    Progress,
    artifact_dir,
    download,
    fetch_file,
    incomplete,
    local_file,
    too_big,
    tqdm_progress,
)
from snapbuild.fetch.verified import mark_verified
from snapbuild.manifest.edit import record_in_text
from snapbuild.manifest.loader import load_manifest, parse_manifest
from snapbuild.manifest.model import STORE_COMPONENT_LIMIT, Artifact, ArtifactFile, Manifest
from snapcommon.errors import UsageError
from snapcommon.files import sha256_of, write_atomically


@dataclass(frozen=True)
class Recorded:
    """One placeholder file whose real size and sha256 were written into a manifest."""

    label: str  # artifact/file
    size: int
    sha256: str
    guessed_size: int  # the placeholder's approximate size, for comparison


@dataclass(frozen=True)
class RecordOutcome:
    """What ``fetch_recording`` did: the files it fetched, what it recorded, and where."""

    manifest: Manifest  # re-loaded from the edited file
    manifest_file: Path
    results: list[FetchResult]
    recorded: list[Recorded]


def _refuse_read_only(manifest_file: Path) -> None:
    """Recording edits the manifest file: refuse early (before any download) when it cannot."""
    resolved = manifest_file.resolve()
    snap = os.environ.get("SNAP")
    inside_snap = snap is not None and snap != "" and resolved.is_relative_to(Path(snap).resolve())
    writable = os.access(resolved, os.W_OK) and os.access(resolved.parent, os.W_OK | os.X_OK)
    if inside_snap or not writable:
        where = "inside the installed snap" if inside_snap else "read-only"
        raise UsageError(
            f"cannot record into {manifest_file}: the manifest is {where}",
            details="--record writes the downloaded files' size and sha256 into the manifest",
            resolution=f"copy it somewhere writable (cp {manifest_file} ./{resolved.name}) "
            f"and run: snapbuild fetch ./{resolved.name} --record",
        )


def fetch_recording(
    manifest_file: Path,
    artifact_name: str,
    *,
    progress: Progress | None = tqdm_progress,
) -> RecordOutcome:
    """Fetch every file of ``artifact_name``; placeholder files are downloaded, trusted, and
    their size and sha256 recorded into ``manifest_file`` one by one (so a failure later keeps
    what was already recorded). Other files are fetched and verified exactly as by
    :func:`fetch`."""
    manifest = load_manifest(manifest_file)
    _refuse_read_only(manifest_file)
    results: list[FetchResult] = []
    recorded: list[Recorded] = []
    for index in range(len(manifest.artifact(artifact_name).files)):
        artifact = manifest.artifact(artifact_name)
        file = artifact.files[index]
        if file.placeholder and (file.local is None or local_file(file.local) is None):
            result, done, manifest = _record_file(manifest_file, manifest, artifact, file, progress)
            recorded.append(done)
        else:
            result = fetch_file(manifest, artifact, file, progress=progress)
        results.append(result)
    return RecordOutcome(manifest, manifest_file, results, recorded)


def _record_file(
    manifest_file: Path,
    manifest: Manifest,
    artifact: Artifact,
    file: ArtifactFile,
    progress: Progress | None,
) -> tuple[FetchResult, Recorded, Manifest]:
    """Download one placeholder file, write its size and sha256 into the manifest (validated
    before it replaces the file), then give the download its final name."""
    label = f"{artifact.name}/{file.path}"
    assert file.url is not None  # placeholders have urls (the manifest requires it)
    if file.shards:
        raise FetchError(
            f"{label} is a placeholder split into shards",
            details="--record records whole files; each shard needs its own size and sha256",
            resolution="fill in the file's and each shard's url, size and sha256 by hand",
            exit_code=2,
        )
    target = artifact_dir(manifest, artifact) / file.path
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    action, announced = download(
        file.url, part, size=None, label=label, progress=progress, limit=STORE_COMPONENT_LIMIT
    )
    size = part.stat().st_size
    if announced is not None and size != announced:
        raise incomplete(label, size, announced, file.url, part)
    if size > STORE_COMPONENT_LIMIT:
        raise too_big(label, file.url, size, STORE_COMPONENT_LIMIT)
    if size == 0:
        part.unlink()
        raise FetchError(
            f"the server sent an empty file for {label}",
            details=f"from {file.url}; nothing was recorded",
            resolution="check the URL in the manifest",
        )
    sha256 = sha256_of(part)
    text = _read_text(manifest_file)
    edited = record_in_text(text, artifact.name, file.path, sha256=sha256, size=size)
    parse_manifest(edited, source=str(manifest_file))  # never write a manifest that fails
    write_atomically(manifest_file, edited)
    os.replace(part, target)
    mark_verified(target, sha256)
    reloaded = load_manifest(manifest_file)
    return (
        FetchResult(target, action),
        Recorded(label, size, sha256, file.size),
        reloaded,
    )


def _read_text(path: Path) -> str:
    # newline="": keep "\r\n" as it is, so the edited file keeps its line endings
    with path.open(encoding="utf-8", newline="") as fh:
        return fh.read()
