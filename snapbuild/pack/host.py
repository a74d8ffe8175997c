"""What ``snapbuild pack`` needs from this machine, found once and refused clearly when absent.

- snapcraft's Python: the driver (:mod:`snapbuild.pack.driver`) runs snapcraft's own code, in
  snapcraft's own virtualenv (its pins are not ours). Found from ``--snapcraft`` (the
  ``snapcraft`` executable, whose shebang names it, or the interpreter itself),
  ``$SNAPBUILD_SNAPCRAFT_VENV``, the ``.venv-snapcraft`` the Makefile installs in the checkout,
  or ``snapcraft`` on PATH.
- Python 3.12, core24's ``python3``: snapcraft's python plugin builds each venv with whatever
  ``python3`` is first on PATH, and the venv records that interpreter's directory (``home`` in
  pyvenv.cfg; ``/usr/bin`` on core24) and its version in ``lib/python3.X``. Where
  ``/usr/bin/python3`` is not 3.12, the build runs in a private mount namespace in which it is
  (:func:`namespace_wrapper`), which takes root.
- python3-apt (craft-parts' deb backend cannot even start without it), mksquashfs, ``snap``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from snapbuild.paths import project_root
from snapcommon.errors import SnapbuildError

SNAPCRAFT_VENV_VAR = "SNAPBUILD_SNAPCRAFT_VENV"  # as the snapcraft oracle tests use it
PYTHON312_VAR = "SNAPBUILD_PYTHON312"
APT_DIR = Path("/usr/lib/python3/dist-packages")  # where Debian's python3-apt installs
SYSTEM_PYTHON3 = Path("/usr/bin/python3")
# core24's PATH in a build environment; the driver puts its own bin directory (craftctl) first
BUILD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class HostError(SnapbuildError):
    """This machine lacks something packing needs (exit 1: not the user's input)."""


@dataclass(frozen=True)
class Host:
    """The tools a pack runs with."""

    snapcraft_python: Path
    python312: Path
    needs_namespace: bool  # /usr/bin/python3 is not 3.12: build in a mount namespace


def find_host(snapcraft: str | Path | None = None, python312: str | Path | None = None) -> Host:
    """Everything packing needs, or a :class:`HostError` naming the first thing missing."""
    for tool, package in (
        ("mksquashfs", "squashfs-tools"),
        ("snap", "snapd"),
        ("dpkg-query", "dpkg"),
    ):
        if shutil.which(tool) is None:
            raise HostError(
                f"snapbuild pack needs `{tool}`, which is not installed",
                resolution=f"apt-get install {package}",
            )
    if not any(APT_DIR.glob("apt_pkg*.so")):
        raise HostError(
            "snapbuild pack needs python-apt (Debian's python3-apt): craft-parts' deb backend "
            "cannot start without it",
            details=f"no apt_pkg module in {APT_DIR}",
            resolution="apt-get install python3-apt",
        )
    interpreter = snapcraft_python(snapcraft)
    py312 = find_python312(python312)
    needs_namespace = python_version(SYSTEM_PYTHON3) != (3, 12)
    if needs_namespace:
        _check_namespace_possible(interpreter)
    return Host(interpreter, py312, needs_namespace)


def snapcraft_python(explicit: str | Path | None = None) -> Path:
    """The interpreter of snapcraft's virtualenv."""
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    elif os.environ.get(SNAPCRAFT_VENV_VAR):
        candidates.append(Path(os.environ[SNAPCRAFT_VENV_VAR]) / "bin" / "python")
    else:
        candidates.append(project_root() / ".venv-snapcraft" / "bin" / "python")
        found = shutil.which("snapcraft")
        if found:
            candidates.append(Path(found))
    for candidate in candidates:
        interpreter = _interpreter_of(candidate)
        if interpreter is not None:
            return interpreter
    raise HostError(
        "snapcraft 9.0.1 (in its own virtualenv) is not installed where snapbuild looks",
        details="looked at: " + ", ".join(str(c) for c in candidates),
        resolution="run `make install` (it installs .venv-snapcraft), or pass --snapcraft with "
        f"snapcraft's executable or its venv's python, or set ${SNAPCRAFT_VENV_VAR}",
    )


def _interpreter_of(path: Path) -> Path | None:
    """``path`` when it is a Python interpreter, the interpreter its ``#!`` line names when it
    is a script (the ``snapcraft`` console script), else None."""
    if not path.is_file() or not os.access(path, os.X_OK):
        return None
    with path.open("rb") as fh:
        head = fh.read(256)
    if head.startswith(b"\x7fELF"):
        return path
    if head.startswith(b"#!"):
        words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
        if words and "python" in Path(words[0]).name:
            return Path(words[0])
    return None


def python_version(python: Path) -> tuple[int, int] | None:
    """``(major, minor)`` of the interpreter at ``python``, or None when it does not run."""
    try:
        done = subprocess.run(
            [str(python), "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = done.stdout.split()
    return (int(words[0]), int(words[1])) if done.returncode == 0 and len(words) == 2 else None


def find_python312(explicit: str | Path | None = None) -> Path:
    """A CPython 3.12 executable (its real path, so a link to it works from anywhere)."""
    candidates = [Path(explicit)] if explicit else []
    if not explicit:
        if os.environ.get(PYTHON312_VAR):
            candidates.append(Path(os.environ[PYTHON312_VAR]))
        candidates.append(Path("/usr/bin/python3.12"))
        on_path = shutil.which("python3.12")
        if on_path:
            candidates.append(Path(on_path))
        pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
        candidates += sorted(pyenv.glob("versions/3.12*/bin/python3.12"), reverse=True)
    for candidate in candidates:
        if python_version(candidate) == (3, 12):
            real = subprocess.run(
                [str(candidate), "-c", "import os, sys; print(os.path.realpath(sys.executable))"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            return Path(real)
    raise HostError(
        "snapbuild pack needs Python 3.12 (core24's python3) to build the snap's Python parts",
        details="looked at: " + (", ".join(str(c) for c in candidates) or "nothing"),
        resolution=f"install Python 3.12 (e.g. `pyenv install 3.12`), or pass --python3.12 "
        f"PATH or set ${PYTHON312_VAR}",
    )


def _check_namespace_possible(interpreter: Path) -> None:
    """Refuse early what the mount namespace cannot do here."""
    if os.geteuid() != 0:
        raise HostError(
            "snapbuild pack needs root here: /usr/bin/python3 is not Python 3.12, and the build "
            "makes it 3.12 (as on core24) in a private mount namespace, which takes root",
            details=f"/usr/bin/python3 is Python {_dotted(python_version(SYSTEM_PYTHON3))}",
            resolution="run it as root (sudo), or on a machine whose python3 is 3.12",
        )
    if shutil.which("unshare") is None:
        raise HostError(
            "snapbuild pack needs `unshare` for its mount namespace",
            resolution="apt-get install util-linux",
        )
    if SYSTEM_PYTHON3 in _link_chain(interpreter):
        raise HostError(
            f"snapcraft's Python ({interpreter}) runs through /usr/bin/python3, which the build "
            "namespace turns into Python 3.12",
            resolution="create snapcraft's venv from a versioned interpreter (e.g. "
            "`python3.11 -m venv .venv-snapcraft`) and install snapcraft into it again",
        )


def _dotted(version: tuple[int, int] | None) -> str:
    return ".".join(map(str, version)) if version else "unknown"


def _link_chain(path: Path) -> list[Path]:
    """``path`` and every symbolic link it goes through, in order."""
    chain = [path]
    while path.is_symlink() and len(chain) < 40:
        path = (path.parent / os.readlink(path)).absolute()
        chain.append(path)
    return chain


def namespace_wrapper(python312: Path, scratch: Path) -> list[str]:
    """The command prefix that runs a command where ``/usr/bin/python3`` is ``python312``.

    A private mount namespace (``unshare --mount --propagation private``) gets a tmpfs at
    ``scratch`` and an overlay on ``/usr/bin`` whose upper layer holds a copy of
    ``python312`` as ``python3.12`` and points ``python3`` at it; nothing outside the namespace
    changes, and it ends with the command. A copy, not a link: a venv records the real path
    of the interpreter that made it, and a venv made from a venv (a part rebuilt while the
    stage holds an earlier venv, whose ``bin/python3`` craft-parts puts first on PATH) takes its
    ``home`` from there. With the copy it is ``/usr/bin``, as on core24; the interpreter finds
    its standard library by its compiled-in prefix."""
    script = (
        'mount -t tmpfs snapbuild-pack "$1" && mkdir "$1/upper" "$1/work" '
        '&& { [ "$2" = /usr/bin/python3.12 ] || cp "$2" "$1/upper/python3.12"; } '
        '&& ln -s python3.12 "$1/upper/python3" '
        "&& mount -t overlay snapbuild-pack "
        '-o "lowerdir=/usr/bin,upperdir=$1/upper,workdir=$1/work" /usr/bin '
        "&& /usr/bin/python3 -c 'import venv' "
        '|| { echo "snapbuild-pack: cannot set up the build namespace" >&2; exit 125; }; '
        'shift 2; exec "$@"'
    )
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        script,
        "snapbuild-pack",
        str(scratch),
        str(python312),
    ]
