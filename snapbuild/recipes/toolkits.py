"""Stand-ins for a recipe's build-packages that this build machine's apt cannot provide.

The snap builds its runtime parts on Ubuntu 24.04; development machines and CI here run Debian
12, whose Vulkan headers are too old for the pinned llama.cpp and whose apt has no CUDA
toolkit. ``snapbuild/data/toolkits.yaml`` says, per runtime, what stands in (Debian 13's Vulkan
headers, NVIDIA's CUDA 13 wheels from PyPI), when it is needed (the machine lacks the real
thing), how it is fetched (apt or pip, the ordinary clients, into the native cache, never
installed system-wide) and what it adds to the build (cmake parameters, environment). The recipe
is never changed; the stand-in's identity joins the build's cache key and stamp.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from snapbuild.paths import read_data
from snapcommon.errors import SnapbuildError
from snapcommon.model import KebabModel

DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
DEBIAN_MIRROR = "http://deb.debian.org/debian"


class NeededWhen(KebabModel):
    """When the machine lacks the real build-package: a header without a symbol, or a command."""

    header: str | None = None
    header_lacks: str | None = None
    command_missing: str | None = None
    headers_absent: tuple[str, ...] = ()  # needed when none of these exists


class DebianSource(KebabModel):
    """A package of another Debian release, downloaded with apt and unpacked privately."""

    suite: str
    package: str
    version: str


class PypiSource(KebabModel):
    """Pinned wheels installed with pip into a private folder; ``root`` is the toolkit in it."""

    packages: tuple[str, ...] = Field(min_length=1)
    root: str


class Toolkit(KebabModel):
    """One stand-in."""

    name: str
    runtimes: tuple[str, ...] = Field(min_length=1)
    stands_in_for: str  # the recipe's build-package it replaces here
    needed_when: NeededWhen
    debian: DebianSource | None = None
    pypi: PypiSource | None = None
    environment: dict[str, str] = Field(default_factory=dict)  # "{root}" is the unpacked root
    cmake_parameters: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _one_source(self) -> Toolkit:
        if (self.debian is None) == (self.pypi is None):
            raise ValueError(f"toolkit {self.name}: give exactly one of debian or pypi")
        return self

    @property
    def pins(self) -> tuple[str, ...]:
        """What is fetched, exactly: the cache key's part."""
        if self.debian is not None:
            return (f"{self.debian.package}={self.debian.version} ({self.debian.suite})",)
        assert self.pypi is not None
        return self.pypi.packages


class ToolkitTable(KebabModel):
    """``snapbuild/data/toolkits.yaml``."""

    schema_version: Literal[1]
    toolkits: tuple[Toolkit, ...]


@cache
def toolkit_table() -> ToolkitTable:
    """The table, validated once per process."""
    return ToolkitTable.model_validate(read_data("toolkits.yaml"))


@dataclass(frozen=True)
class Prepared:
    """A stand-in ready on this machine: what the build adds, and what identifies it."""

    name: str
    root: Path
    cmake_parameters: tuple[str, ...]
    environment: dict[str, str]
    identity: str  # the pins, for the cache key and the stamp


def toolkit_for(runtime_id: str) -> Toolkit | None:
    """The stand-in the table names for ``runtime_id`` (None: none)."""
    return next((t for t in toolkit_table().toolkits if runtime_id in t.runtimes), None)


def needed(toolkit: Toolkit) -> bool:
    """Whether this machine lacks the build-package the toolkit stands in for."""
    when = toolkit.needed_when
    if when.command_missing and shutil.which(when.command_missing) is None:
        return True
    if when.headers_absent and not any(Path(h).is_file() for h in when.headers_absent):
        return True
    if when.header and when.header_lacks:
        header = Path(when.header)
        return not header.is_file() or when.header_lacks not in header.read_text(errors="replace")
    return False


def prepare(toolkit: Toolkit, cache_root: Path) -> Prepared:
    """Fetch the stand-in once into ``cache_root/toolkits`` (reused after); what it adds."""
    identity = ", ".join(toolkit.pins)
    folder = cache_root / "toolkits" / f"{toolkit.name}-{_digest(identity)}"
    done = folder / ".complete"
    if not done.is_file():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        if toolkit.debian is not None:
            _fetch_debian(toolkit.debian, folder)
        else:
            assert toolkit.pypi is not None
            _fetch_pypi(toolkit.pypi, folder)
        done.write_text(identity + "\n", encoding="utf-8")
    root = _root(toolkit, folder)
    fill = {"root": str(root)}
    return Prepared(
        name=toolkit.name,
        root=root,
        cmake_parameters=tuple(p.format(**fill) for p in toolkit.cmake_parameters),
        environment={k: v.format(**fill) for k, v in toolkit.environment.items()},
        identity=identity,
    )


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _root(toolkit: Toolkit, folder: Path) -> Path:
    if toolkit.pypi is not None:
        return folder / "site" / toolkit.pypi.root
    return folder / "sdk"


def _run(argv: list[str], what: str, cwd: Path | None = None) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SnapbuildError(
            f"cannot {what}: `{' '.join(argv[:4])} ...` exited {done.returncode}",
            details=(done.stderr or done.stdout).strip()[-2000:],
            resolution="check that the package registry is reachable, then build again",
        )


def _fetch_debian(source: DebianSource, folder: Path) -> None:
    """``apt-get download`` with a private configuration for ``source.suite`` (the machine's
    own apt sources and state are untouched), then ``dpkg-deb -x``; headers into ``sdk/``."""
    apt = folder / "apt"
    for sub in ("lists/partial", "cache/archives/partial", "parts", "deb"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    (apt / "status").touch()
    (apt / "parts" / f"{source.suite}.sources").write_text(
        f"Types: deb\nURIs: {DEBIAN_MIRROR}\nSuites: {source.suite}\nComponents: main\n"
        f"Signed-By: {DEBIAN_KEYRING}\n",
        encoding="utf-8",
    )
    options = [
        "-o", "Dir::Etc::SourceList=/dev/null", "-o", f"Dir::Etc::SourceParts={apt / 'parts'}",
        "-o", f"Dir::State::Lists={apt / 'lists'}", "-o", f"Dir::Cache={apt / 'cache'}",
        "-o", f"Dir::State::status={apt / 'status'}", "-o", "APT::Sandbox::User=root",
    ]  # fmt: skip
    _run(["apt-get", *options, "update", "-qq"], f"read Debian {source.suite}'s package lists")
    wanted = f"{source.package}={source.version}"
    _run(["apt-get", *options, "download", wanted], f"download {wanted}", cwd=apt / "deb")
    unpacked = folder / "unpacked"
    for deb in (apt / "deb").glob("*.deb"):
        _run(["dpkg-deb", "-x", str(deb), str(unpacked)], f"unpack {deb.name}")
    (folder / "sdk").mkdir()
    os.replace(unpacked / "usr" / "include", folder / "sdk" / "include")
    shutil.rmtree(apt, ignore_errors=True)
    shutil.rmtree(unpacked, ignore_errors=True)


def _fetch_pypi(source: PypiSource, folder: Path) -> None:
    """``pip install --no-deps --target``, then the layout CMake and nvcc expect of a CUDA
    root: ``lib64`` beside ``lib``, unversioned library links, and a link-time stub of the
    driver library (NVIDIA's toolkits ship one in ``lib64/stubs``; the wheels do not)."""
    site = folder / "site"
    _run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
         *source.packages],
        "install the toolkit's wheels",
    )  # fmt: skip
    root = site / source.root
    lib = root / "lib"
    if lib.is_dir() and not (root / "lib64").exists():
        (root / "lib64").symlink_to("lib")
    for versioned in sorted(lib.glob("lib*.so.*")):
        plain = lib / (versioned.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(versioned.name)
    if (root / "bin" / "nvcc").is_file():
        _driver_stub(lib / "stubs")


def _driver_stub(stubs: Path) -> None:
    """An empty ``libcuda.so`` whose SONAME is the driver's (``libcuda.so.1``): enough to link a
    backend module, whose driver symbols are bound at run time by the host's real driver."""
    stubs.mkdir(parents=True, exist_ok=True)
    source = stubs / "stub.c"
    source.write_text("/* link-time stand-in for the NVIDIA driver library */\n")
    _run(
        ["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(stubs / "libcuda.so"),
         str(source)],
        "build the CUDA driver stub",
    )  # fmt: skip
    source.unlink()
