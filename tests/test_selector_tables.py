"""The selector's tables are arguments: ``select(manifest, host, tables=...)`` judges under a
given runtime catalog, hardware table and serving and batching tables, explains the different
Decision in their terms, and leaves the packaged tables (and their loaders' caches) as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from support.hosts import GIB, host, intel_igpu, nvidia
from support.manifests import GEMMA3_4B

from runtimes.catalog import RuntimeCatalog, load_catalog
from snapbuild.manifest.loader import load_manifest
from snapbuild.selection.hardware import HardwareTable, hardware_table
from snapbuild.selection.selector import select
from snapbuild.selection.tables import SelectionTables, packaged_tables
from snapbuild.serving.batching import batching_table
from snapbuild.serving.plan import serving_table

LOADERS: tuple[Callable[[], object], ...] = (
    load_catalog,
    hardware_table,
    serving_table,
    batching_table,
    packaged_tables,
)


@pytest.fixture(autouse=True)
def packaged_tables_untouched() -> Iterator[None]:
    """After each test every loader still returns the very object it cached before, and that
    object still equals a fresh read of the packaged file."""
    before = [loader() for loader in LOADERS]
    yield
    assert all(loader() is cached for loader, cached in zip(LOADERS, before, strict=True))
    fresh = [loader.__wrapped__() for loader in LOADERS]  # type: ignore[attr-defined]
    assert fresh == before


def _no_cuda_nor_vulkan_on_nvidia(catalog: RuntimeCatalog) -> RuntimeCatalog:
    """The packaged catalog without llama.cpp's CUDA build, and with a Vulkan build that drives
    AMD and Intel GPUs only."""
    runtimes = tuple(
        r.model_copy(update={"gpu_vendors": ("amd", "intel")}) if r.id == "llama.cpp-vulkan" else r
        for r in catalog.runtimes
        if r.id != "llama.cpp-cuda"
    )
    return catalog.model_copy(update={"runtimes": runtimes})


def _server_hardware(table: HardwareTable) -> HardwareTable:
    """An 8-channel amd64 server's bandwidth, a lower sufficient speed, another vendor name."""
    bandwidth = table.bandwidth.model_copy(
        update={"cpu_by_architecture": {**table.bandwidth.cpu_by_architecture, "amd64": 300e9}}
    )
    return table.model_copy(
        update={
            "bandwidth": bandwidth,
            "sufficient_tokens_per_second": 35.0,
            "vendor_names": {**table.vendor_names, "nvidia": "Nvidia Corporation"},
        }
    )


def test_a_given_catalog_and_hardware_table_give_a_different_explained_decision() -> None:
    """An NVIDIA desktop, judged under a catalog with no llama.cpp build for NVIDIA and a hardware
    table of an 8-channel server that calls 35 tokens/s sufficient: the CPU's Q8_0 engine wins
    (both CPU quantizations now reach that speed), every verdict names the vendor as the given
    table does, and the packaged decision (CUDA, Q8_0) is unchanged afterwards."""
    manifest, machine = load_manifest(GEMMA3_4B), host(gpus=(nvidia(12 * GIB),))
    packaged = select(manifest, machine)
    assert packaged.selected is not None and packaged.selected.engine == "cuda-q8"
    tables = packaged_tables().model_copy(
        update={
            "catalog": _no_cuda_nor_vulkan_on_nvidia(load_catalog()),
            "hardware": _server_hardware(hardware_table()),
        }
    )

    decision = select(manifest, machine, tables=tables)

    assert decision.selected is not None
    assert (decision.selected.engine, decision.selected.why) == (
        "cpu-avx2-q8",
        "cpu-avx2-q8 and runner-up cpu-avx2 both reach the sufficient 35 tokens/s; "
        "Q8_0 keeps more precision than Q4_K_M",
    )
    nvidia_gpu = "Nvidia Corporation GeForce RTX at 0000:01:00.0 is Nvidia Corporation"
    assert [
        (c.engine, c.rank, c.estimated_tokens_per_second, c.blockers) for c in decision.candidates
    ] == [
        ("cpu-avx2-q8", 1, 43.6, ()),
        ("cpu-avx2", 2, 72.3, ()),
        ("cpu-x86-64", 3, 72.3, ()),
        ("cuda", None, None, ("runtime 'llama.cpp-cuda' is not in the runtime catalog",)),
        ("cuda-q8", None, None, ("runtime 'llama.cpp-cuda' is not in the runtime catalog",)),
        ("rocm", None, None, (f"needs an AMD GPU (llama.cpp-rocm): {nvidia_gpu}, not AMD",)),
        (
            "vulkan",
            None,
            None,
            (f"needs an AMD/Intel GPU (llama.cpp-vulkan): {nvidia_gpu}, not AMD/Intel",),
        ),
        (
            "openvino-gpu",
            None,
            None,
            (f"needs an Intel GPU (openvino-gpu): {nvidia_gpu}, not Intel",),
        ),
        ("openvino-npu", None, None, ("needs an Intel NPU (openvino-npu): none found",)),
        (
            "cpu-arm64",
            None,
            72.3,
            (
                "needs arm64: machine is amd64",
                "needs arm64 features asimd, asimddp: machine is amd64",
            ),
        ),
        (
            "cpu-arm64-q8",
            None,
            43.6,
            (
                "needs arm64: machine is amd64",
                "needs arm64 features asimd, asimddp: machine is amd64",
            ),
        ),
    ]
    assert decision.precedence == packaged.precedence
    # the same call without tables is the packaged decision again: nothing was left behind
    assert select(manifest, machine) == packaged


def test_given_serving_and_batching_tables_plan_the_concurrency_recorded() -> None:
    """Fewer preferred llama-server slots and a lower OpenVINO GPU limit: the Decision's plans
    follow them, each saying why."""
    manifest, machine = load_manifest(GEMMA3_4B), host(gpus=(intel_igpu(),))
    packaged = packaged_tables()
    serving = packaged.serving.model_copy(
        update={"preferred_slots": {"cpu": 2, "gpu": 4, "npu": 1}}
    )
    gpu_rule = packaged.batching.runtimes["openvino-gpu"].model_copy(update={"max_sequences": 4})
    batching = packaged.batching.model_copy(
        update={"runtimes": {**packaged.batching.runtimes, "openvino-gpu": gpu_rule}}
    )
    tables = packaged.model_copy(update={"serving": serving, "batching": batching})

    decision = select(manifest, machine, tables=tables)

    assert decision.selected is not None and decision.selected.engine == "openvino-gpu"
    assert decision.selected.batching is not None
    assert (decision.selected.batching.sequences, decision.selected.batching.why) == (
        4,
        "4 sequences of 8192 tokens (610 MiB of KV cache): 10.5 GiB free after the "
        "one-sequence fit holds 64 more 168 MiB KV caches, capped at the runtime's 4",
    )
    assert [
        (c.engine, c.rank, c.serving.slots if c.serving else None) for c in decision.candidates
    ] == [
        ("openvino-gpu", 1, None),
        ("vulkan", 2, 4),
        ("cpu-avx2", 3, 2),
        ("cpu-x86-64", 4, 2),
        ("cpu-avx2-q8", 5, 2),
        *(
            (name, None, None)
            for name in ("cuda", "cuda-q8", "rocm", "openvino-npu", "cpu-arm64", "cpu-arm64-q8")
        ),
    ]
    cpu_plan = decision.candidate("cpu-avx2")
    assert cpu_plan is not None and cpu_plan.serving is not None
    assert cpu_plan.serving.why == (
        "2 slots, the device's preferred number, fit in f16 (3.76 GiB of 16.00 GiB)"
    )


def test_tables_validate_as_one_value() -> None:
    """A third party can hand over its tables as data: each part keeps its own schema."""
    data = packaged_tables().model_dump(by_alias=True)
    assert SelectionTables.model_validate(data) == packaged_tables()
    data["hardware"] = {**data["hardware"], "sufficient-tokens-per-second": -1}
    with pytest.raises(ValueError, match="sufficient-tokens-per-second"):
        SelectionTables.model_validate(data)
