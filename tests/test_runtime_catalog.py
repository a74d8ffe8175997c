"""The runtime catalog (runtimes/catalog.yaml) and the code reading it agree."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import get_args

import yaml

from runtimes.catalog import CATALOG_PATH, RuntimeCatalog, load_catalog
from snapbuild.manifest.model import Architecture, GpuVendor
from snapbuild.project.naming import name_problems

CATALOG = load_catalog()
PINNED = re.compile(r"^[a-z0-9][a-z0-9._-]*==[0-9][0-9A-Za-z.]*$")
# interfaces snapd provides under these names (the rest must be declared plugs)
STANDARD_INTERFACES = {"opengl", "hardware-observe", "network", "network-bind", "home"}
GGML_FLAGS = {
    "llama.cpp-cpu": ["-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON", "-DGGML_NATIVE=OFF"],
    # GPU builds load their backend as a module too (from the component's usr/bin), with one
    # baseline CPU module for what stays on the CPU
    "llama.cpp-cuda": ["-DGGML_CUDA=ON", "-DGGML_BACKEND_DL=ON"],
    "llama.cpp-vulkan": ["-DGGML_VULKAN=ON", "-DGGML_BACKEND_DL=ON"],
    "llama.cpp-rocm": ["-DGGML_HIP=ON", "-DGGML_BACKEND_DL=ON"],
}


def test_catalog_ids() -> None:
    assert CATALOG.ids == (
        "llama.cpp-cpu",
        "llama.cpp-cuda",
        "llama.cpp-vulkan",
        "llama.cpp-rocm",
        "openvino-cpu",
        "openvino-gpu",
        "openvino-npu",
        "onnxruntime-cpu",
        "onnxruntime-cuda",
        "onnxruntime-openvino",
    )


def test_catalog_file_round_trips_through_the_model() -> None:
    raw = yaml.safe_load(CATALOG_PATH.read_text())
    assert RuntimeCatalog.model_validate(raw) == CATALOG
    assert len(raw["runtimes"]) == len(CATALOG.runtimes)


def test_adapter_modules_exist() -> None:
    for entry in CATALOG.runtimes:
        module, _, cls = entry.adapter.partition(":")
        assert cls and importlib.util.find_spec(module) is not None, entry.adapter


def test_vendors_architectures_and_component_names_are_known() -> None:
    vendors, arches = set(get_args(GpuVendor)), set(get_args(Architecture))
    for entry in CATALOG.runtimes:
        assert set(entry.gpu_vendors) <= vendors, entry.id
        assert set(entry.architectures) <= arches, entry.id
        assert bool(entry.vendors) == (entry.device != "cpu"), entry.id
    project = {"name": "probe", "components": {e.component: {} for e in CATALOG.runtimes}}
    assert name_problems(project) == []


def test_every_runtime_has_a_pinned_build_recipe() -> None:
    for entry in CATALOG.runtimes:
        recipe = entry.build
        assert recipe is not None and (recipe.native or recipe.python), entry.id
        if recipe.native is not None:
            assert recipe.native.source.startswith("https://github.com/ggml-org/llama.cpp")
            # the full hash with a shallow fetch, as craft-parts advises for large repositories
            assert re.fullmatch(r"[0-9a-f]{40}", recipe.native.source_commit), entry.id
            assert recipe.native.source_depth == 1, entry.id
        if recipe.python is not None:
            for package in recipe.python.python_packages:
                assert PINNED.match(package), f"{entry.id}: {package} is not pinned"


def test_llama_cpp_variants_have_their_ggml_flags() -> None:
    families = {e.id: e for e in CATALOG.runtimes if e.family == "llama.cpp"}
    assert sorted(families) == sorted(GGML_FLAGS)
    tags = set()
    for runtime_id, flags in GGML_FLAGS.items():
        native = families[runtime_id].build.native  # type: ignore[union-attr]
        assert native is not None
        params = list(native.cmake_parameters)
        assert [p for p in params if p.startswith("-DGGML_") and p in flags] == flags
        shared = {"-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON"}
        others = {f for fs in GGML_FLAGS.values() for f in fs} - set(flags) - shared
        assert not others & set(params), runtime_id
        tags.add(native.source_commit)
    assert len(tags) == 1, "every llama.cpp variant builds the same upstream commit"


def test_the_snap_ships_the_llama_cpp_binding_the_tests_use() -> None:
    """The catalog's llama-cpp-python pin is the one pyproject installs for the tests and the
    one installed here, so what CI exercises is what the snap ships."""
    from importlib.metadata import version

    import tomllib

    pyproject = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    (extra,) = pyproject["project"]["optional-dependencies"]["llamacpp"]
    pins = {
        package
        for entry in CATALOG.runtimes
        if entry.family == "llama.cpp" and entry.build and entry.build.python
        for package in entry.build.python.python_packages
        if package.startswith("llama-cpp-python")
    }
    assert pins == {extra} == {f"llama-cpp-python=={version('llama-cpp-python')}"}


def test_runtimes_sharing_a_component_share_its_build() -> None:
    by_component: dict[str, list] = {}
    for entry in CATALOG.runtimes:
        by_component.setdefault(entry.component, []).append(entry)
    for component, entries in by_component.items():
        assert all(e.build == entries[0].build for e in entries), component
        assert len({e.architectures for e in entries}) == 1, component
        assert len({e.family for e in entries}) == 1, component


def test_interfaces_are_standard_or_declared() -> None:
    for entry in CATALOG.runtimes:
        for interface in entry.interfaces:
            assert interface in STANDARD_INTERFACES | set(CATALOG.plug_definitions), interface
    used = {i for e in CATALOG.runtimes for i in e.interfaces}
    assert set(CATALOG.plug_definitions) <= used, "a declared plug no runtime uses"


def test_variants_cover_every_runtime() -> None:
    from snapbuild.manifest.model import Engine
    from snapbuild.project.plan import in_variant

    assert [v.name for v in CATALOG.variants] == ["cpu", "nvidia", "amd", "intel"]
    for entry in CATALOG.runtimes:
        engine = Engine(name="e1", summary="s", runtime=entry.id, artifact="a1")
        homes = [v.name for v in CATALOG.variants if in_variant(engine, entry, v)]
        if entry.device == "cpu":
            assert homes == ["cpu", "nvidia", "amd", "intel"], entry.id
        else:
            assert sorted(homes) == sorted(entry.vendors), entry.id


def test_gpu_runtimes_use_snapcrafts_gpu_extension() -> None:
    """GPU runtimes reach Mesa/Vulkan/NVIDIA userspace through the gpu extension; no bare
    gpu-2404 plug is declared, and the NPU plug names the driver snap's custom device."""
    for entry in CATALOG.runtimes:
        assert entry.extensions == (("gpu",) if entry.device == "gpu" else ()), entry.id
    assert "gpu-2404" not in CATALOG.plug_definitions
    assert CATALOG.plug_definitions["intel-npu"] == {
        "interface": "custom-device",
        "custom-device": "intel-npu-device",
    }
