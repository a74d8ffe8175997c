"""A component's prime directory into a ``.comp`` file, as snapd's ``snap pack`` makes it.

snapcraft packs each component with ``snap pack <dir> <out>`` and, when that fails, runs ``snap
refresh --edge snapd`` and tries again. The snapd here (2.57, Debian 12) predates components, and
refreshing snapd is not something a build may do to a machine, so this module does what newer
snapd's packer does for a directory holding ``meta/component.yaml`` (snapd ``snap/pack`` and
``snap/squashfs``), learnt from its source, not copied:

- the file is ``<snap>+<component>_<version>.comp``, or ``<snap>+<component>.comp`` when
  component.yaml has no ``version`` (snapcraft writes one only when the component declares it);
- the container check: the top directory and ``meta`` are world-readable and searchable,
  ``meta/component.yaml`` exists and is a world-readable regular file, nothing under ``meta``
  is a device, pipe or socket; every file and directory can be read by the packer;
- ``mksquashfs . FILE -noappend -comp C -no-fragments -no-progress -wildcards -ef EXCLUDES
  -all-root -no-xattrs`` run in the directory, with snapd's exclude list;
- a file smaller than 16 KiB is grown to 16 KiB (the kernel scans a loop device for a partition
  table; smaller images make it log errors).
"""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from pathlib import Path

import yaml

from snapcommon.errors import SnapbuildError

MINIMUM_SIZE = 16384
COMPRESSIONS = ("xz", "lzo")
# snapd's excludes, in mksquashfs' -wildcards syntax: version-control and editor leftovers at
# the top level ("anchored"), and backup, swap and packed-snap files anywhere ("...").
EXCLUDES = (
    "DEBIAN", ".arch-ids", ".arch-inventory", ".bzr", ".bzr-builddeb", ".bzr.backup",
    ".bzr.tags", ".bzrignore", ".cvsignore", ".git", ".gitattributes", ".gitignore",
    ".gitmodules", ".hg", ".hgignore", ".hgsigs", ".hgtags", ".shelf", ".svn", "CVS",
    "DEADJOE", "RCS", "_MTN", "_darcs", "{arch}", ".snapignore",
    "... .[#~]*", "... *.snap", "... *.click", "... .*.sw?", "... *~", "... ,,*",
)  # fmt: skip


class ComponentPackError(SnapbuildError):
    """A component directory snapd would refuse to pack, or a failed mksquashfs."""


def component_file_name(prime: Path) -> str:
    """The ``.comp`` name snapd gives the component in ``prime`` (from meta/component.yaml)."""
    meta = prime / "meta" / "component.yaml"
    try:
        data = yaml.safe_load(meta.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ComponentPackError(f"cannot read {meta}", details=str(exc)) from exc
    full = data.get("component") if isinstance(data, dict) else None
    snap, plus, name = str(full or "").partition("+")
    if not (snap and plus and name) or "+" in name:
        raise ComponentPackError(
            f"{meta}: `component` must be <snap>+<component>, not {full!r}",
            resolution="write meta/component.yaml with snapcraft (snapbuild pack does)",
        )
    version = data.get("version")
    return f"{full}_{version}.comp" if version else f"{full}.comp"


def container_problems(prime: Path) -> list[str]:
    """What snapd's component container check and its pre-build read check would refuse."""
    problems: list[str] = []
    for directory in (prime, prime / "meta"):
        if not directory.is_dir() or directory.is_symlink():
            problems.append(f"{directory} is missing (or not a directory)")
        elif stat.S_IMODE(directory.stat().st_mode) & 0o555 != 0o555:
            problems.append(f"{directory} should be world-readable and searchable")
    meta_file = prime / "meta" / "component.yaml"
    if not meta_file.is_file():
        problems.append(f"{meta_file} does not exist")
    for path in sorted((prime / "meta").rglob("*")) if (prime / "meta").is_dir() else []:
        mode = path.lstat().st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISBLK(mode) or stat.S_ISCHR(mode):
            problems.append(f"{path} should be a regular file (or a symlink)")
        elif stat.S_ISDIR(mode) and stat.S_IMODE(mode) & 0o555 != 0o555:
            problems.append(f"{path} should be world-readable and searchable")
        elif stat.S_ISREG(mode) and stat.S_IMODE(mode) & 0o444 != 0o444:
            problems.append(f"{path} should be world-readable")
    for root, dirs, files in os.walk(prime):
        for name in dirs + files:
            path = Path(root, name)
            if not path.is_symlink() and not os.access(path, os.R_OK):
                problems.append(f"{path} cannot be read")
    return problems


def pack_component(prime: Path, out: Path, compression: str = "lzo") -> Path:
    """Pack the component in ``prime`` into ``out`` (created); the ``.comp`` file's path."""
    if compression not in COMPRESSIONS:
        raise ComponentPackError(
            f"cannot use compression {compression!r}",
            resolution=f"use one of {', '.join(COMPRESSIONS)}",
        )
    problems = container_problems(prime)
    if problems:
        raise ComponentPackError(
            f"{prime} is not a component snapd can pack", details="\n".join(problems)
        )
    out.mkdir(parents=True, exist_ok=True)
    target = (out / component_file_name(prime)).resolve()
    with tempfile.NamedTemporaryFile("w", prefix=".snap-pack-exclude-", suffix=".txt") as ex:
        ex.write("\n".join(EXCLUDES) + "\n")
        ex.flush()
        argv = [
            "mksquashfs",
            ".",
            str(target),
            "-noappend",
            "-comp",
            compression,
            "-no-fragments",
            "-no-progress",
            "-wildcards",
            "-ef",
            ex.name,
            "-all-root",
            "-no-xattrs",
        ]
        try:
            done = subprocess.run(argv, cwd=prime, capture_output=True, text=True)
        except FileNotFoundError as exc:
            raise ComponentPackError(
                "cannot pack components: mksquashfs is not installed",
                resolution="apt-get install squashfs-tools",
            ) from exc
    if done.returncode != 0:
        raise ComponentPackError(
            f"mksquashfs failed for {prime}",
            details=(done.stderr or done.stdout).strip()[-2000:],
        )
    if target.stat().st_size < MINIMUM_SIZE:
        os.truncate(target, MINIMUM_SIZE)
    return target
