"""Unpacking the llama.cpp tree that the pinned binding's sdist vendors, into a cache that has
never been used (as on a new CI machine): only ``vendor/llama.cpp`` is kept, under the archive's
digest, and a second call reuses it. The archive is a real tar.gz written here with the layout
of llama-cpp-python's sdist; no download happens because it is already in the cache."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from snapbuild.recipes.native import fetch_source
from snapcommon.errors import UsageError


def _sdist(path: Path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_a_new_cache_gets_the_vendored_tree_and_nothing_else(tmp_path: Path) -> None:
    cache = tmp_path / "never-used"
    (cache / "sdist").mkdir(parents=True)
    archive = cache / "sdist" / "llama_cpp_python-9.9.9.tar.gz"
    _sdist(
        archive,
        {
            "llama_cpp_python-9.9.9/pyproject.toml": b"[project]\n",
            "llama_cpp_python-9.9.9/vendor/llama.cpp/CMakeLists.txt": b"project(llama.cpp)\n",
            "llama_cpp_python-9.9.9/vendor/llama.cpp/src/llama.cpp": b"// source\n",
        },
    )
    source = fetch_source("llama-cpp-python==9.9.9", cache)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    assert source.digest == digest
    assert source.tree == cache / "src" / digest[:16] / "llama.cpp"
    found = sorted(p.relative_to(cache / "src").as_posix() for p in (cache / "src").rglob("*"))
    assert found == [
        digest[:16],
        f"{digest[:16]}/llama.cpp",
        f"{digest[:16]}/llama.cpp/CMakeLists.txt",
        f"{digest[:16]}/llama.cpp/src",
        f"{digest[:16]}/llama.cpp/src/llama.cpp",
    ]  # no staging folder left behind
    (source.tree / "src" / "llama.cpp").write_text("// kept\n")
    assert fetch_source("llama-cpp-python==9.9.9", cache) == source  # reused, not unpacked again
    assert (source.tree / "src" / "llama.cpp").read_text() == "// kept\n"


def test_an_archive_without_the_vendored_tree_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "sdist").mkdir()
    _sdist(tmp_path / "sdist" / "llama_cpp_python-9.9.9.tar.gz", {"x-9.9.9/setup.py": b""})
    with pytest.raises(UsageError, match="vendors no llama.cpp tree"):
        fetch_source("llama-cpp-python==9.9.9", tmp_path)


def test_a_tree_stamped_with_the_abbreviated_commit_is_the_same_build(tmp_path: Path) -> None:
    """Lengthening the pin to the full hash keeps using the tree built under the short one (a
    llama.cpp build takes tens of minutes); another archive or other parameters do not."""
    import json

    from runtimes.catalog import load_catalog
    from snapbuild.recipes.native import NativeSource, built_before, built_from, recipe_for

    component, recipe, _ = recipe_for(load_catalog(), "llama.cpp-cpu")
    source = NativeSource(tmp_path / "src", "d" * 64)
    old = tmp_path / "components" / f"{component}-0123456789abcdef"
    old.mkdir(parents=True)
    record = {"recipe": {**built_from(recipe), "source_commit": recipe.source_commit[:9]}}
    (old / "snapbuild-native.json").write_text(json.dumps({**record, "source": source.digest}))
    assert built_before(tmp_path / "components", component, recipe, source) == old
    other = NativeSource(source.tree, "e" * 64)
    assert built_before(tmp_path / "components", component, recipe, other) is None
    record["recipe"]["cmake_parameters"] = ["-DGGML_NATIVE=ON"]
    (old / "snapbuild-native.json").write_text(json.dumps({**record, "source": source.digest}))
    assert built_before(tmp_path / "components", component, recipe, source) is None
