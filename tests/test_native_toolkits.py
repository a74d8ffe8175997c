"""Stand-ins for build-packages this machine's apt lacks (snapbuild/data/toolkits.yaml): the table
against the catalog and the code, when a stand-in is needed, and that it only ever adds to a
build's cache key (a plain build keeps its key, so the CPU tree `make install` cached stays)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtimes.catalog import load_catalog
from snapbuild.recipes import native
from snapbuild.recipes.toolkits import NeededWhen, Toolkit, needed, toolkit_for, toolkit_table
from snapcommon.errors import UsageError


def test_every_stand_in_names_a_native_runtime_and_a_build_package_of_its_recipe() -> None:
    catalog = load_catalog()
    for toolkit in toolkit_table().toolkits:
        for runtime in toolkit.runtimes:
            entry = catalog.get(runtime)
            assert entry is not None and entry.build is not None and entry.build.native is not None
            assert toolkit.stands_in_for in entry.build.native.build_packages, runtime
    assert toolkit_for("llama.cpp-cpu") is None
    cuda = toolkit_for("llama.cpp-cuda")
    assert cuda is not None and cuda.pypi is not None
    assert all("==13.0." in pin for pin in cuda.pins)  # one CUDA release, the H100 host's driver's
    assert "-DCMAKE_CUDA_ARCHITECTURES=90-real" in cuda.cmake_parameters


def test_a_stand_in_is_needed_only_where_the_machine_lacks_the_real_thing(tmp_path: Path) -> None:
    header = tmp_path / "vulkan_core.h"
    header.write_text("#define VK_EXT_layer_settings 1\n")
    base = {
        "name": "t",
        "runtimes": ["x"],
        "stands-in-for": "p",
        "pypi": {"packages": ["a"], "root": "r"},
    }

    def kit(**when: object) -> Toolkit:
        return Toolkit.model_validate({**base, "needed-when": NeededWhen.model_validate(when)})

    assert not needed(kit(header=str(header), header_lacks="VK_EXT_layer_settings"))
    assert needed(kit(header=str(header), header_lacks="VK_EXT_something_newer"))
    assert needed(kit(header=str(tmp_path / "absent.h"), header_lacks="X"))
    assert needed(kit(command_missing="no-such-command-here"))
    assert needed(kit(command_missing="sh", headers_absent=[str(tmp_path / "cublas_v2.h")]))
    assert not needed(kit(command_missing="sh", headers_absent=[str(header)]))


def test_a_toolkit_has_exactly_one_source() -> None:
    with pytest.raises(ValueError, match="give exactly one of debian or pypi"):
        Toolkit.model_validate(
            {"name": "t", "runtimes": ["x"], "stands-in-for": "p", "needed-when": {}}
        )


def test_machine_inputs_leave_a_plain_builds_key_alone() -> None:
    _, recipe, _ = native.recipe_for(load_catalog(), "llama.cpp-cpu")
    source = native.NativeSource(Path("/src"), "0" * 64)
    assert native.machine_inputs(None, ()) == {}
    plain = native.build_key(recipe, source)
    assert native.build_key(recipe, source, {}) == plain
    cuda = toolkit_for("llama.cpp-cuda")
    assert native.build_key(recipe, source, native.machine_inputs(cuda, ())) != plain
    defined = native.machine_inputs(None, ("CMAKE_CUDA_ARCHITECTURES=89-real",))
    assert native.build_key(recipe, source, defined) != plain


def test_define_must_be_name_equals_value() -> None:
    assert native._define("CMAKE_CUDA_ARCHITECTURES=90-real") == "CMAKE_CUDA_ARCHITECTURES=90-real"
    with pytest.raises(UsageError, match="is not NAME=VALUE"):
        native._define("-DFOO")


def test_a_tree_stamped_with_the_abbreviated_commit_is_found_with_its_own_machine_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The full-hash pin (main) and the stand-ins' keys (toolkits) together: a GPU tree built
    under the abbreviated pin with a stand-in is the same build for the same stand-in and
    definitions, and for no other; plan_build points at it, so nothing is recompiled."""
    import json

    component, recipe, _ = native.recipe_for(load_catalog(), "llama.cpp-cuda")
    cuda = toolkit_for("llama.cpp-cuda")
    source = native.NativeSource(tmp_path / "src", "d" * 64)
    inputs = native.machine_inputs(cuda, ())
    old = tmp_path / "components" / f"{component}-0123456789abcdef"
    old.mkdir(parents=True)
    short = {**native.built_from(recipe), "source_commit": recipe.source_commit[:9]}
    stamp = {"runtime": "llama.cpp-cuda", "recipe": short, "source": source.digest, **inputs}
    (old / native.STAMP).write_text(json.dumps(stamp))
    components = tmp_path / "components"
    assert native.built_before(components, component, recipe, source, inputs) == old
    assert native.built_before(components, component, recipe, source) is None  # no stand-in
    defined = native.machine_inputs(cuda, ("CMAKE_CUDA_ARCHITECTURES=89-real",))
    assert native.built_before(components, component, recipe, source, defined) is None
    monkeypatch.setattr(native, "needed", lambda toolkit: True)  # this machine lacks cuBLAS
    planned = native.plan_build("llama.cpp-cuda", cache=tmp_path, source=source)
    assert planned.built and planned.root == old
