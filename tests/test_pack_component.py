"""Components packed as snapd's ``snap pack`` packs them (snapbuild/pack/component.py): the file
name from meta/component.yaml, the container check, mksquashfs with snapd's options, the 16 KiB
minimum size. The result is read back with ``unsquashfs``, as snapd mounts it: squashfs, every
file owned by root."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from snapbuild.pack.component import (
    MINIMUM_SIZE,
    ComponentPackError,
    component_file_name,
    container_problems,
    pack_component,
)

needs_squashfs = pytest.mark.skipif(
    shutil.which("mksquashfs") is None or shutil.which("unsquashfs") is None,
    reason="packing components needs squashfs-tools: apt-get install squashfs-tools",
)


def _tree(root: Path, component_yaml: str = "component: tiny+weights\ntype: standard\n") -> Path:
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "component.yaml").write_text(component_yaml)
    (root / "model").mkdir()
    (root / "model" / "tiny.gguf").write_bytes(b"GGUF" + bytes(100))
    (root / "model" / "tiny.gguf~").write_text("an editor's backup: snapd leaves it out\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "link").symlink_to("model/tiny.gguf")
    return root


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("component: tiny+weights\ntype: standard\n", "tiny+weights.comp"),
        ("component: tiny+weights\ntype: standard\nversion: '2.1'\n", "tiny+weights_2.1.comp"),
    ],
)
def test_file_name_is_snap_plus_component_and_the_version_when_declared(
    tmp_path: Path, text: str, name: str
) -> None:
    assert component_file_name(_tree(tmp_path, text)) == name


@pytest.mark.parametrize("full", ["weights", "tiny+", "+weights", "a+b+c"])
def test_a_component_name_without_its_snap_is_refused(tmp_path: Path, full: str) -> None:
    with pytest.raises(ComponentPackError, match="<snap>\\+<component>"):
        component_file_name(_tree(tmp_path, f"component: {full}\ntype: standard\n"))


def test_the_container_check_finds_what_snapd_refuses(tmp_path: Path) -> None:
    root = _tree(tmp_path / "c")
    assert container_problems(root) == []
    (root / "meta" / "component.yaml").chmod(0o600)
    (root / "meta").chmod(0o700)
    problems = container_problems(root)
    assert f"{root / 'meta'} should be world-readable and searchable" in problems
    assert f"{root / 'meta' / 'component.yaml'} should be world-readable" in problems
    (root / "meta").chmod(0o755)
    (root / "meta" / "component.yaml").unlink()
    assert container_problems(root) == [f"{root / 'meta' / 'component.yaml'} does not exist"]
    with pytest.raises(ComponentPackError, match="not a component snapd can pack"):
        pack_component(root, tmp_path / "out")


def test_only_xz_and_lzo(tmp_path: Path) -> None:
    with pytest.raises(ComponentPackError, match="cannot use compression 'gzip'"):
        pack_component(_tree(tmp_path / "c"), tmp_path / "out", "gzip")


@needs_squashfs
def test_a_tiny_component_is_a_root_owned_squashfs_of_at_least_16_kib(tmp_path: Path) -> None:
    root = _tree(tmp_path / "c")
    (root / "model" / "tiny.gguf").chmod(0o640)
    packed = pack_component(root, tmp_path / "out")
    assert packed == (tmp_path / "out" / "tiny+weights.comp").resolve()
    assert packed.stat().st_size == MINIMUM_SIZE  # grown: mksquashfs wrote less
    assert packed.read_bytes()[:4] == b"hsqs"  # the squashfs magic snapd checks
    listing = subprocess.run(
        ["unsquashfs", "-lln", str(packed)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    entries = {line.split(" squashfs-root", 1)[1]: line for line in listing if line}
    # snapd's excludes: .git at the top level, editor backups anywhere
    assert sorted(entries) == [
        "", "/link -> model/tiny.gguf", "/meta", "/meta/component.yaml", "/model",
        "/model/tiny.gguf",
    ]  # fmt: skip
    for line in entries.values():
        assert line.split()[1] == "0/0", line  # -all-root
    assert entries["/model/tiny.gguf"].startswith("-rw-r-----")  # modes kept


@needs_squashfs
def test_a_component_bigger_than_16_kib_is_not_padded(tmp_path: Path) -> None:
    root = _tree(tmp_path / "c")
    (root / "model" / "big.bin").write_bytes(os.urandom(64 * 1024))  # does not compress
    packed = pack_component(root, tmp_path / "out", "xz")
    assert packed.stat().st_size > MINIMUM_SIZE
    assert packed.stat().st_size % 4096 == 0  # mksquashfs' own 4 KiB padding
