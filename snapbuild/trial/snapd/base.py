"""The base snap's Python: a host Python 3.12 laid out where core24 has its own.

A snapcraft-built core24 snap does not carry an interpreter: its venv has
``bin/python3 -> /usr/bin/python3.12`` and ``pyvenv.cfg`` says ``home = /usr/bin``, so it runs
on the base snap's ``/usr/bin/python3.12`` and stdlib ``/usr/lib/python3.12``. The harness uses
the host's ``/usr`` for the base, and a Debian 12 ``/usr`` has no Python 3.12. So, when the host
lacks it there, :class:`HostPython` lays a host Python 3.12 (a pyenv build, say) out as core24
has it: inside the snap's namespace, ``/usr`` becomes a read-only overlay of the host's ``/usr``
and a small stub tree holding the missing mount points, and the interpreter, its stdlib (with
``lib-dynload``) and, for a shared build, ``libpython3.12.so.1.0`` (in the multiarch library
directory the loader searches) are bound onto them read-only; ``/usr/bin/python3`` points to it,
as on core24. Python finds its prefix from where its executable is, so ``sys.base_prefix`` is
``/usr``, and the pyenv tree itself stays invisible. The stdlib's own ``site-packages`` is
covered by an empty directory: core24's has nothing a venv sees.

:meth:`HostPython.run` runs a command on the host with the same ``/usr`` (in a private mount
namespace): how a venv is created so that its ``pyvenv.cfg`` says ``home = /usr/bin``.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapbuild.trial.snapd.errors import HarnessError
from snapbuild.trial.snapd.kernel import (
    MS_RDONLY,
    bind,
    mount,
    remount,
    spawn,
    tmpfs,
    unmount,
    unshare_mounts,
)

BASE_PYTHON = "3.12"  # core24's
OVERRIDE_VAR = "SNAPBUILD_BASE_PYTHON"  # a python3.12 to use instead of searching for one
_PROBE = (
    "import json, os, sys, sysconfig as c; print(json.dumps({"
    "'executable': os.path.realpath(sys.executable), 'base_prefix': sys.base_prefix,"
    "'version': '%d.%d' % sys.version_info[:2], 'stdlib': c.get_path('stdlib'),"
    "'shared': bool(c.get_config_var('Py_ENABLE_SHARED')), 'libdir': c.get_config_var('LIBDIR'),"
    "'soname': c.get_config_var('INSTSONAME'), 'multiarch': c.get_config_var('MULTIARCH')}))"
)


@dataclass(frozen=True)
class HostPython:
    """A Python 3.12 of this host and where core24 keeps each of its pieces."""

    executable: str  # the real interpreter (links resolved)
    stdlib: str  # its lib/python3.12
    libpython: str | None  # the shared library of a shared build (links resolved)
    soname: str  # its name as the interpreter asks for it: libpython3.12.so.1.0
    multiarch: str  # x86_64-linux-gnu, ... ("" for a build that does not say)
    native: bool  # already at /usr/bin/python3.12 with /usr as prefix: nothing to lay out

    @property
    def name(self) -> str:
        return f"python{BASE_PYTHON}"

    def binds(self) -> list[tuple[str, str]]:
        """(host path, path under /usr) of what is bound read-only."""
        pairs = [(self.executable, f"bin/{self.name}"), (self.stdlib, f"lib/{self.name}")]
        if self.libpython:
            libdir = f"lib/{self.multiarch}" if self.multiarch else "lib"
            pairs.append((self.libpython, f"{libdir}/{self.soname}"))
        return pairs

    def write_stub(self, stub: str) -> None:
        """The mount points the host's /usr lacks, and core24's ``python3`` link."""
        for source, inside in self.binds():
            path = Path(stub, inside)
            path.parent.mkdir(parents=True, exist_ok=True)
            if os.path.isdir(source):
                path.mkdir()
            else:
                path.touch()
        Path(stub, "bin", "python3").symlink_to(self.name)

    def mount_usr(self, target: str, stub: str) -> None:
        """Make ``target`` the host's /usr with this Python laid out in it, read-only.

        ``stub`` is an empty directory on a private tmpfs; it may be unmounted afterwards (the
        overlay keeps its own reference to each layer)."""
        if any(c in p for p in (stub, "/usr") for c in ":,"):
            raise HarnessError(f"the stub directory {stub!r} must not hold ':' or ','")
        self.write_stub(stub)
        mount("overlay", target, "overlay", MS_RDONLY, f"lowerdir={stub}:/usr")
        for source, inside in self.binds():
            bind(source, f"{target}/{inside}", readonly=True)
        site = f"{target}/lib/{self.name}/site-packages"
        if os.path.isdir(site):
            tmpfs(site, "0555")
            remount(site, readonly=True)

    def run(
        self, argv: Sequence[str], *, capture_output: bool = False, **popen: Any
    ) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` on this host with /usr as core24's (a private mount namespace that
        changes nothing else); e.g. ``/usr/bin/python3.12 -m venv DIR``. Takes what
        ``subprocess.run`` takes but ``check``, ``input`` and ``timeout``."""
        if capture_output:
            popen.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if self.native:
            return subprocess.run(list(argv), check=False, **popen)
        with tempfile.TemporaryDirectory(prefix="snapbuild-base-") as stub:

            def prepare() -> None:
                unshare_mounts()
                tmpfs(stub)
                self.mount_usr("/usr", stub)
                unmount(stub)

            proc = spawn(list(argv), prepare, **popen)
            out, err = proc.communicate()
            return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def _probe(candidate: str) -> dict[str, Any] | None:
    try:
        out = subprocess.run(
            [candidate, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=30, check=False
        )
        found: dict[str, Any] = json.loads(out.stdout) if out.returncode == 0 else {}
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    return found if found.get("version") == BASE_PYTHON else None


def _candidates() -> list[str]:
    """Where a Python 3.12 may be, best first: the override, the system's, PATH (not a pyenv
    shim, which answers only when 3.12 is selected, and slowly), pyenv's versions, /usr/local."""
    pyenv_root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    found = [
        os.environ.get(OVERRIDE_VAR, ""),
        f"/usr/bin/python{BASE_PYTHON}",
        which if "/shims/" not in (which := shutil.which(f"python{BASE_PYTHON}") or "") else "",
        *sorted(glob.glob(f"{pyenv_root}/versions/{BASE_PYTHON}.*/bin/python{BASE_PYTHON}"))[::-1],
        f"/usr/local/bin/python{BASE_PYTHON}",
    ]
    return [c for c in dict.fromkeys(found) if c and os.path.exists(c)]


@functools.cache
def find_host_python() -> HostPython:
    """The host's Python 3.12 for the base snap's place (once per process), or a
    :class:`HarnessError` saying how to get one."""
    override = os.environ.get(OVERRIDE_VAR)
    for candidate in _candidates():
        info = _probe(candidate)
        if info is None:
            if candidate == override:
                raise HarnessError(f"{OVERRIDE_VAR}={override} is not a Python {BASE_PYTHON}")
            continue
        shared = bool(info["shared"] and info["soname"])
        return HostPython(
            executable=info["executable"],
            stdlib=info["stdlib"],
            libpython=os.path.realpath(f"{info['libdir']}/{info['soname']}") if shared else None,
            soname=info["soname"] or "",
            multiarch=info["multiarch"] or "",
            native=info["executable"] == f"/usr/bin/python{BASE_PYTHON}"
            and info["base_prefix"] == "/usr",
        )
    raise HarnessError(
        f"no Python {BASE_PYTHON} on this host for the base snap (core24) to stand in for",
        details=f"looked at: {', '.join(_candidates()) or 'nothing found'}; a core24 snap's venv "
        f"runs /usr/bin/python{BASE_PYTHON}",
        resolution=f"install Python {BASE_PYTHON} (pyenv install {BASE_PYTHON}, or use Ubuntu "
        f"24.04), or set {OVERRIDE_VAR} to one; or run without the base Python "
        "(base_python=None, --no-base-python)",
    )
