"""The llama.cpp-cuda recipe compiles, without a GPU: the catalog's cmake part built as snapcraft
builds it, against the CUDA toolkit from NVIDIA's PyPI wheels (snapbuild/data/toolkits.yaml:
CUDA 13.0, one architecture, sm_90), then the component's layout and what libggml-cuda.so links.

The compile takes long on two cores (see docs/building.md), so this runs when the build is
cached already (a warm cache, e.g. after `make native-cuda`) or when SNAPBUILD_BUILD_CUDA=1 asks
for it; otherwise it skips and says so. The toolkit's pins and the architecture join the cache
key, so a cached tree is exactly this build.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from runtimes.catalog import load_catalog
from runtimes.component_tree import ComponentTree
from snapbuild.recipes.native import STAMP, build_component, built_from, plan_build, recipe_for
from snapbuild.recipes.toolkits import toolkit_for

pytestmark = pytest.mark.slow
BUILD_VAR = "SNAPBUILD_BUILD_CUDA"
# what a backend module may need besides CUDA's libraries: the tree's own GGML base, the C and
# C++ runtimes of the base snap, and the recipe's other stage-package (libgomp1)
SYSTEM = re.compile(
    r"^(libggml-base|libstdc\+\+|libgcc_s|libc|libm|libdl|libpthread|librt|libgomp)\.so"
)
# the host's NVIDIA driver, reached through the snap's opengl interface: at this commit ggml-cuda
# reaches it through the CUDA runtime and names no libcuda.so.1 itself
DRIVER = "libcuda.so.1"


@pytest.fixture(scope="module")
def cuda_tree() -> ComponentTree:
    planned = plan_build("llama.cpp-cuda")
    if not planned.built and os.environ.get(BUILD_VAR) != "1":
        pytest.skip(
            f"the CUDA recipe's build is not cached here ({planned.root.name}); "
            f"{BUILD_VAR}=1 compiles it (`make native-cuda`), which takes long on 2 cores"
        )
    return ComponentTree(build_component("llama.cpp-cuda"))


def _needed(library: Path) -> list[str]:
    out = subprocess.run(
        ["readelf", "-d", str(library)], capture_output=True, text=True, check=True
    ).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)


def test_the_cuda_component_has_the_layout_the_loader_reads(cuda_tree: ComponentTree) -> None:
    stamp = json.loads((cuda_tree.root / STAMP).read_text())
    _, recipe, _ = recipe_for(load_catalog(), "llama.cpp-cuda")
    built, wanted = dict(stamp["recipe"]), built_from(recipe)
    # a tree built when the pin was abbreviated is the same build (native.built_before)
    assert recipe.source_commit.startswith(built.pop("source_commit"))
    wanted.pop("source_commit")
    assert built == wanted
    assert cuda_tree.problems() == []
    for module in ("libggml-cuda.so", "libggml-cpu.so"):
        assert (cuda_tree.bin_dir / module).is_file(), module
    libs = {p.name for p in (cuda_tree.root / "usr" / "lib").glob("lib*.so")}
    assert {"libllama.so", "libggml.so", "libggml-base.so", "libmtmd.so"} <= libs
    stand_in = toolkit_for("llama.cpp-cuda")
    if "toolkit" in stamp:  # built with the PyPI toolkit: its pins are on record
        assert stand_in is not None and stamp["toolkit"] == ", ".join(stand_in.pins)


def test_libggml_cuda_links_the_libraries_the_recipe_stages(cuda_tree: ComponentTree) -> None:
    needed = _needed(cuda_tree.bin_dir / "libggml-cuda.so")
    cuda = [n for n in needed if n != DRIVER and not SYSTEM.match(n)]
    _, recipe, _ = recipe_for(load_catalog(), "llama.cpp-cuda")
    staged = {re.sub(r"\d+$", "", p) for p in recipe.stage_packages if p != "libgomp1"}
    stems = {n.split(".so")[0].lower() for n in cuda}
    # every CUDA library it needs is one the recipe stages (libcudart12 -> libcudart.so.12...),
    # of one CUDA release (.so.13 here, built with CUDA 13; .so.12 in the snap, with 12.0)
    assert stems and stems <= staged, (needed, staged)
    assert len({n.rsplit(".", 1)[1] for n in cuda}) == 1
    # what else it needs: the tree's GGML base and the C/C++ runtimes (and at most the driver)
    assert all(n in cuda or n == DRIVER or SYSTEM.match(n) for n in needed), needed
    # llama-server itself links no CUDA: the backend is a module loaded from usr/bin
    assert not [n for n in _needed(cuda_tree.server) if "cuda" in n or "cublas" in n]


def test_the_staged_libraries_are_all_reached(cuda_tree: ComponentTree) -> None:
    """What the recipe stages and libggml-cuda.so does not name itself is what those libraries
    need (cuBLAS needs cuBLASLt): nothing staged for nothing, nothing missing."""
    planned = plan_build("llama.cpp-cuda")
    if planned.toolkit is None:
        pytest.skip("built with this machine's own CUDA toolkit")
    from snapbuild.recipes.native import native_cache
    from snapbuild.recipes.toolkits import prepare

    lib = prepare(planned.toolkit, native_cache()).root / "lib"
    direct = [n for n in _needed(cuda_tree.bin_dir / "libggml-cuda.so") if n.startswith("libcu")]
    reached = {n.split(".so")[0].lower() for n in direct}
    for name in direct:
        reached |= {n.split(".so")[0].lower() for n in _needed(lib / name) if n.startswith("libcu")}
    _, recipe, _ = recipe_for(load_catalog(), "llama.cpp-cuda")
    assert reached == {re.sub(r"\d+$", "", p) for p in recipe.stage_packages if p != "libgomp1"}


def test_every_cuda_library_resolves_in_the_toolkit_but_the_driver(
    cuda_tree: ComponentTree,
) -> None:
    planned = plan_build("llama.cpp-cuda")
    if planned.toolkit is None:
        pytest.skip("built with this machine's own CUDA toolkit")
    from snapbuild.recipes.native import native_cache
    from snapbuild.recipes.toolkits import prepare

    lib = prepare(planned.toolkit, native_cache()).root / "lib"
    env = {**os.environ, "LD_LIBRARY_PATH": f"{cuda_tree.library_path()}:{lib}"}
    out = subprocess.run(
        ["ldd", str(cuda_tree.bin_dir / "libggml-cuda.so")],
        capture_output=True, text=True, env=env, check=False,
    ).stdout  # fmt: skip
    missing = [line.split()[0] for line in out.splitlines() if "not found" in line]
    assert set(missing) <= {DRIVER}  # at most the host's driver, as in the snap
    assert "libcudart.so.13 => " + str(lib) in out  # the toolkit's runtime, not another
