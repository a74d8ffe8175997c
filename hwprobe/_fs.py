"""Reading a machine's files under a root, without ever raising.

Every probe reads through :class:`RootFS` so that a recorded machine (``--root DIR``) and the live
one (``/``) take the same path. A missing file is *unknown* and silent (captures leave out what
they did not record); a file that exists but cannot be read (a directory, a FIFO, a dangling link,
garbage bytes) is unknown *and* a warning, because somebody can fix it.

Captures may store a symlink either as a real link or as a regular file holding the link's
target text (copies made with tools that flatten links do that); :meth:`RootFS.link` accepts
both.
"""

from __future__ import annotations

import os
import posixpath
import stat

from hwprobe.profile import ProbeWarning

# sysfs and procfs files are small; a capture with a huge file in their place is broken.
MAX_READ = 4 * 1024 * 1024
CHUNK = 64 * 1024


class RootFS:
    """A read-only view of one machine's files, collecting warnings about what it could not read."""

    def __init__(self, root: str = "/") -> None:
        self.root = os.path.abspath(root)
        self.warnings: list[ProbeWarning] = []

    @property
    def is_live(self) -> bool:
        """True when reading the running machine rather than a recorded one."""
        return self.root == "/"

    def path(self, rel: str) -> str:
        """The real path of ``rel`` (a path as seen on the machine, like ``/proc/cpuinfo``)."""
        return os.path.join(self.root, rel.lstrip("/"))

    def warn(self, source: str, message: str, resolution: str | None = None) -> None:
        """Record something that could not be read, and how to fix it."""
        self.warnings.append(ProbeWarning(source=source, message=message, resolution=resolution))

    def exists(self, rel: str) -> bool:
        """True when ``rel`` exists (even as a dangling link)."""
        return os.path.lexists(self.path(rel))

    def is_dir(self, rel: str) -> bool:
        """True when ``rel`` is a directory (following links)."""
        return os.path.isdir(self.path(rel))

    def listdir(self, rel: str) -> list[str]:
        """Sorted entries of a directory; empty when it is missing or unreadable."""
        try:
            return sorted(os.listdir(self.path(rel)))
        except OSError:
            return []

    def text(self, rel: str, *, source: str) -> str | None:
        """The text of a regular file; None when missing (silent) or unreadable (warning)."""
        full = self.path(rel)
        try:
            info = os.stat(full)
        except FileNotFoundError:
            if os.path.islink(full):
                self._unreadable(source, rel, "is a dangling symbolic link")
            return None
        except OSError as exc:
            self._unreadable(source, rel, exc.strerror or str(exc))
            return None
        if not stat.S_ISREG(info.st_mode):
            self._unreadable(source, rel, f"is a {_kind(info.st_mode)}, not a file")
            return None
        try:
            data = _read_bounded(full)
        except OSError as exc:
            self._unreadable(source, rel, exc.strerror or str(exc))
            return None
        return data.decode("utf-8", errors="replace")

    def int_value(self, rel: str, *, source: str, base: int = 0) -> int | None:
        """An integer file (``0x10de``, ``8573157376``, ``-1``); None when missing or garbage."""
        text = self.text(rel, source=source)
        if text is None:
            return None
        try:
            return int(text.strip(), base)
        except ValueError:
            self._unreadable(source, rel, f"holds {text.strip()[:40]!r}, not a number")
            return None

    def link(self, rel: str) -> str | None:
        """Where a symlink points, relative to the root (``sys/devices/...``), or None.

        Accepts a real link or a file holding the link text. Absolute targets are taken inside
        the root, so a capture's links never escape it.
        """
        full = self.path(rel)
        if os.path.islink(full):
            try:
                target = os.readlink(full)
            except OSError:
                return None
        elif os.path.isfile(full):
            target = (self.text(rel, source="sysfs") or "").strip()
            if not target or "\n" in target or "\0" in target:
                return None
        else:
            return None
        if target.startswith("/"):
            return posixpath.normpath(target).lstrip("/")
        base = posixpath.dirname(rel.strip("/"))
        return posixpath.normpath(posixpath.join(base, target)).lstrip("/")

    def link_name(self, rel: str) -> str | None:
        """The last component of a link's target (a driver's name, a PCI slot)."""
        target = self.link(rel)
        return posixpath.basename(target) if target else None

    def _unreadable(self, source: str, rel: str, why: str) -> None:
        self.warn(
            source,
            f"could not read {self.path(rel)}: {why}",
            "check the file (or the capture) and run hwprobe again",
        )


def _read_bounded(full: str) -> bytes:
    """Read in small chunks: procfs sysctl files refuse one read of MAX_READ bytes (ENOMEM)."""
    chunks: list[bytes] = []
    total = 0
    with open(full, "rb", buffering=0) as handle:
        while total < MAX_READ:
            chunk = handle.read(CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    return b"".join(chunks)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device node"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"
