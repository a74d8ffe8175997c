"""Which cached artifact files are still the ones that were verified.

``fetch`` checks a download's sha256 before the file gets its final name, and records what it
checked (:class:`snapcommon.files.Stamp`: sha256, size, mtime) beside it, as
``.<file>.verified``. Bytes flipped in place later (a bad disk, a stray write) keep the size but
change the mtime, so a file whose stamp no longer holds is hashed again before anything trusts
it: ``fetch`` (which downloads it again, saying so), ``serve``, ``try`` and ``validate``;
``validate --deep`` hashes every file whatever its stamp says.
"""

from __future__ import annotations

import json
from pathlib import Path

from snapcommon.files import Stamp, sha256_of, write_atomically


def stamp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.verified")


def mark_verified(path: Path, sha256: str) -> None:
    """Record that ``path`` was just checked against ``sha256``."""
    write_atomically(stamp_path(path), json.dumps(Stamp.of(path, sha256).to_data()) + "\n")


def stamp_holds(path: Path, sha256: str) -> bool:
    """Whether ``path`` is unchanged since it was verified against ``sha256``."""
    try:
        data = json.loads(stamp_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    stamp = Stamp.from_data(data)
    return stamp is not None and stamp.sha256 == sha256 and stamp.holds(path, sha256)


def still_verified(path: Path, sha256: str, *, deep: bool = False) -> bool:
    """``path`` matches ``sha256``: by its stamp, else (or when ``deep``) by hashing it again
    (a match is stamped again, so the next check is cheap)."""
    if not deep and stamp_holds(path, sha256):
        return True
    if sha256_of(path) != sha256:
        return False
    mark_verified(path, sha256)
    return True


def forget(path: Path) -> None:
    """Remove ``path`` and its stamp (a corrupt cached copy)."""
    path.unlink(missing_ok=True)
    stamp_path(path).unlink(missing_ok=True)
