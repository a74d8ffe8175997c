"""Sliding-window attention: the estimator's KV cache against the one llama.cpp allocates.

A tiny random-weight gemma3 GGUF (12 layers, window 256: llama.cpp makes layers 5 and 11 global,
the other 10 local) is loaded through the project's own llama.cpp adapter, found through the
runtime catalog as the server finds it, so these tests fail if the adapter stops passing
``swa_full=False`` (llama.cpp would then size every local layer for the whole context). The
adapter loads quietly (``verbose=False``), so the tests install their own llama.cpp log callback
for the load and read the two ``llama_kv_cache: size = ...`` lines llama.cpp logs for its global
and its sliding-window caches.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.gguf_shapes import write_shape_gguf
from support.llama import captured_llama_log

from runtimes.engine import LoadOptions
from runtimes.inprocess.adapter import adapter_class
from snapbuild.estimate.gguf_shape import read_gguf_shape
from snapbuild.estimate.memory import kv_cache_bytes

llama_cpp = pytest.importorskip("llama_cpp")

WINDOW = 256
KV_LINE = re.compile(r"llama_kv_cache: size =\s+([\d.]+) MiB \(\s*(\d+) cells,\s+(\d+) layers")


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("swa") / "gemma3-swa.gguf"
    # head size 64, 2 KV heads: 512 bytes per cell and layer, so every logged size is exact
    return write_shape_gguf(
        path,
        architecture="gemma3",
        sliding_window=WINDOW,
        layers=12,
        embedding=256,
        heads=4,
        kv_heads=2,
        feed_forward=512,
    )


@pytest.fixture
def llama_log() -> Iterator[list[str]]:
    """Everything llama.cpp logs while the fixture is active."""
    with captured_llama_log() as lines:
        yield lines


def test_gemma3_facts_match_llama_cpps_layer_pattern(gemma3: Path) -> None:
    shape = read_gguf_shape(gemma3)
    assert (shape.architecture, shape.layers, shape.sliding_window) == ("gemma3", 12, WINDOW)
    assert shape.sliding_window_layers == 10  # layers 5 and 11 attend to the whole context


@pytest.mark.slow
@pytest.mark.parametrize(
    ("context", "caches"),
    [
        # (MiB, cells, layers) of the global cache, then of the sliding-window cache: local
        # layers hold the window plus one 512-token batch, padded to 256 cells, at any context
        (1024, [(1.0, 1024, 2), (3.75, 768, 10)]),
        (8192, [(8.0, 8192, 2), (3.75, 768, 10)]),
    ],
)
def test_llama_cpp_allocates_the_sliding_window_kv_cache_we_estimate(
    gemma3: Path,
    llama_log: list[str],
    context: int,
    caches: list[tuple[float, int, int]],
) -> None:
    runtime = "llama.cpp-cpu"
    options = LoadOptions(artifact=gemma3, runtime=runtime, context_size=context, threads=1)
    adapter = adapter_class(runtime)(options)
    adapter.load()
    try:
        logged = [
            (float(mib), int(cells), int(layers))
            for mib, cells, layers in KV_LINE.findall("".join(llama_log))
        ]
    finally:
        adapter.close()
    assert logged == caches, "".join(llama_log)[-3000:]
    estimate_mib = kv_cache_bytes(read_gguf_shape(gemma3), context, "llama.cpp") / 2**20
    assert sum(mib for mib, _, _ in logged) == estimate_mib
