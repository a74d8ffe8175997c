"""The llama.cpp tree ``snapbuild pack`` ships is what snapcraft's cmake plugin would build.

``snapbuild pack`` serves the rendered cmake part from the tree snapbuild.recipes.native built,
instead of compiling llama.cpp again (tens of minutes). That is sound when the recipe runs what
the plugin would run, which this checks against craft-parts itself: the ``CMakePlugin`` of the
rendered part, planned by the driver in snapcraft's venv, gives its build commands, and they
must be the recipe's ``build_steps`` token for token (generator, every cmake parameter, the
build with the same job count, the DESTDIR install), with the part's source and install
directories in place of the recipe's. The source is the same tree (the binding's sdist vendors
llama.cpp at the recipe's commit; tests/test_native_source.py) and the part's override-build
removes the recipe's ``remove-after-install`` files.

Not byte-identical, and why: the compiler records absolute source paths (``__FILE__`` in
GGML_ABORT and asserts: libggml-base.so alone holds nine), and those differ between
``~/.cache/snapbuild/native/src/...`` and ``parts/runtime-llamacpp-cpu/src``. The plugin's
environment adds only ``CMAKE_PREFIX_PATH=<stage>``, empty of anything cmake looks for.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from support import oracle

from runtimes.catalog import load_catalog
from snapbuild.pack import plan
from snapbuild.pack.host import HostError
from snapbuild.recipes.native import build_steps, recipe_for


def test_the_recipe_runs_the_cmake_plugins_commands(tmp_path: Path) -> None:
    python = oracle.require() / "bin" / "python"
    work = tmp_path / "work"
    try:
        plans = plan("smollm2", variant="cpu", snapcraft=python, work=work)
    except HostError as exc:
        pytest.skip(f"snapbuild pack cannot run here: {exc.brief}")
    cmake = plans["runtime-llamacpp-cpu"]
    assert cmake["plugin"] == "cmake"
    commands = [shlex.split(c) for c in cmake["build-commands"]]
    jobs = int(commands[1][-1].removeprefix("-j"))
    part = work / "craft" / "parts" / "runtime-llamacpp-cpu"
    _, recipe, _ = recipe_for(load_catalog(), "llama.cpp-cpu")
    expected = [
        [f"{k}={v}" for k, v in step.env] + list(step.argv)
        for step in build_steps(recipe, part / "src", part / "install", jobs)
    ]
    assert commands == expected
    assert "export CMAKE_PREFIX_PATH=" in cmake["environment"]
    assert set(cmake["build-packages"]) <= {"cmake", "gcc", "make"}
    rendered = (work / "project" / "snap" / "snapcraft.yaml").read_text()
    for path in recipe.remove_after_install:
        assert f'rm -f "$CRAFT_PART_INSTALL/{path}"' in rendered
