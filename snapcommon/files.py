"""Files written whole and files checked whole.

Atomic writes: the toolkit edits manifests in place (``fetch --record``) and the snap rewrites
its decision, state and status files while other processes read them. All of them write a
temporary file beside the target and rename it over the target: a rename within one directory
is atomic, so a reader sees the old or the new content, never half of it.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

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
