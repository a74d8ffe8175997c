"""Files written whole, files checked whole, and the disk space they need.

Atomic writes: the toolkit edits manifests in place (``fetch --record``) and the snap rewrites
its decision, state and status files while other processes read them. All of them write a
temporary file beside the target and rename it over the target: a rename within one directory
is atomic, so a reader sees the old or the new content, never half of it.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from snapcommon.errors import UsageError

CHUNK = 1 << 20  # hashing reads: large enough to be fast, small enough for any memory


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file, read in chunks (model files are gigabytes)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8, line endings as given). An existing file keeps its
    permissions; a new one gets the process's default (umask) permissions. The temporary file is
    unique, so two writers never share one, and it is removed when writing fails."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# errno values that mean "the disk cannot take it": the user's to fix, never our bug
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
SPACE_MARGIN = 64 * 1024 * 1024  # keep this much free after a write: the disk is shared


def free_bytes(path: Path) -> int:
    """Free bytes on the file system of ``path`` (its nearest existing ancestor)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return shutil.disk_usage(candidate).free
    return shutil.disk_usage(Path.cwd()).free


def require_space(directory: Path, need: int, what: str, resolution: str) -> None:
    """A :class:`UsageError` before writing ``need`` bytes of ``what`` into ``directory`` when
    its disk cannot hold them (and :data:`SPACE_MARGIN` more)."""
    free = free_bytes(directory)
    if free < need + SPACE_MARGIN:
        raise UsageError(
            f"not enough free disk space for {what}",
            details=f"{need} bytes are needed in {directory} (and {SPACE_MARGIN} spare); {free} "
            "are free",
            resolution=f"free at least {need + SPACE_MARGIN - free} bytes there; {resolution}",
        )


@dataclass(frozen=True)
class Stamp:
    """A file as it was when its sha256 was checked: checking it again is only needed when its
    size or modification time changed (bytes flipped in place change the mtime)."""

    sha256: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path, sha256: str) -> Stamp:
        st = path.stat()
        return cls(sha256, st.st_size, st.st_mtime_ns)

    @classmethod
    def from_data(cls, data: object) -> Stamp | None:
        if not isinstance(data, dict):
            return None
        try:
            return cls(str(data["sha256"]), int(data["size"]), int(data["mtime-ns"]))
        except (KeyError, TypeError, ValueError):
            return None

    def to_data(self) -> dict[str, object]:
        return {"sha256": self.sha256, "size": self.size, "mtime-ns": self.mtime_ns}

    def holds(self, path: Path, sha256: str) -> bool:
        """Whether ``path`` is still the file checked against ``sha256``."""
        try:
            return self == Stamp.of(path, sha256)
        except OSError:
            return False
