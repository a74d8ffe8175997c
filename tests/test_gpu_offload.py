"""The GPU code path that every llama.cpp GPU engine shares (CUDA, ROCm, Vulkan), without a GPU:
the selector's verdict on a software Vulkan device, the plan a forced engine gets on the device's
reported memory, the device llama-server is held to (in each backend's own terms), the flags and
environment it starts with, the backend module taken from the component, and the report read
back from llama-server's log. tests/test_vulkan_engine.py runs the same path for real on lavapipe.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import hwprobe
from hwprobe.profile import GpuFacts, HostProfile, PciIds, VulkanDeviceFacts, VulkanFacts
from runtimes.catalog import load_catalog
from runtimes.llamaserver.offload import DeviceChoice, read_report, usable
from runtimes.llamaserver.supervisor import ServerBinary, ServingConfig, server_command
from snapbuild.manifest.loader import load_manifest
from snapbuild.selection.decision import Selected
from snapbuild.selection.selector import select
from snapbuild.serving.launch import serve_options
from snapbuild.serving.offload import device_choice
from snapcommon.errors import UsageError
from snaps.manager import forced_selection

LAVAPIPE = "epyc-kvm+lavapipe"


@pytest.fixture(scope="module")
def lavapipe_host(machines_dir: Path) -> HostProfile:
    return hwprobe.probe(str(machines_dir / LAVAPIPE / "machine-root"))


def _gpu(slot: str, vendor: str = "nvidia", device: str = "0x2330") -> GpuFacts:
    ids = {"nvidia": "0x10de", "amd": "0x1002", "intel": "0x8086"}[vendor]
    pci = PciIds(slot=slot, pci_class="0x0302", vendor_id=ids, device_id=device)
    return GpuFacts(vendor=vendor, name="GPU", pci=pci, integrated=False, vram=80 * 2**30)


def _vk(
    index: int, kind: str, slot: str | None = None, device: str = "0x2330"
) -> VulkanDeviceFacts:
    software = kind == "cpu"
    return VulkanDeviceFacts(
        index=index,
        name="llvmpipe" if software else f"GPU {index}",
        device_type=kind,  # type: ignore[arg-type]
        software=software,
        vendor_id="0x10005" if software else "0x10de",
        device_id="0x0000" if software else device,
        memory=2 * 2**30,
        pci_slot=slot,
    )


def _selected(engine: str, runtime: str, slot: str | None) -> Selected:
    return Selected(
        engine=engine,
        runtime=runtime,
        device="gpu",
        context_size=4096,
        artifact="smollm2-q4-1",
        quantization="Q4_1",
        slot=slot,
        why="test",
    )


def test_a_software_vulkan_device_rejects_the_vulkan_engine_and_the_cpu_engine_wins(
    lavapipe_host: HostProfile,
) -> None:
    decision = select(load_manifest("smollm2"), lavapipe_host)
    assert decision.selected is not None and decision.selected.engine == "cpu-avx2"
    vulkan = decision.candidate("vulkan")
    assert vulkan is not None and not vulkan.compatible
    (blocker,) = vulkan.blockers
    assert blocker.startswith("needs an AMD/Intel/NVIDIA GPU (llama.cpp-vulkan): none found; ")
    assert "llvmpipe (LLVM 15.0.6, 256 bits) is a software Vulkan device that runs on the CPU" in (
        blocker
    )
    # the memory fit is judged on the device's reported memory, for a forced run's plan
    assert vulkan.memory is not None
    assert (vulkan.memory.pool, vulkan.memory.available) == ("vram", 2 * 2**30)
    assert vulkan.memory.overhead == 614000000  # the Vulkan device overhead of the data file
    cuda = decision.candidate("cuda")
    assert cuda is not None and cuda.memory is None  # CUDA does not run on Vulkan devices


def test_a_real_gpu_beside_lavapipe_is_the_vulkan_engines_device(
    lavapipe_host: HostProfile,
) -> None:
    vulkan = VulkanFacts(devices=(_vk(0, "cpu"), _vk(1, "discrete-gpu", "0000:65:00.0")))
    host = dataclasses.replace(lavapipe_host, gpus=(_gpu("0000:65:00.0"),), vulkan=vulkan)
    decision = select(load_manifest("smollm2"), host, engine="vulkan")
    assert decision.selected is not None and decision.selected.slot == "0000:65:00.0"
    choice = device_choice("llama.cpp-vulkan", decision.selected, host)
    assert choice is not None
    assert (choice.device, dict(choice.env)) == ("Vulkan0", {"GGML_VK_VISIBLE_DEVICES": "1"})


def test_the_forced_plan_is_made_in_the_devices_reported_memory(lavapipe_host: HostProfile) -> None:
    manifest = load_manifest("smollm2")
    decision = forced_selection(select(manifest, lavapipe_host), "vulkan", manifest)
    selected = decision.selected
    assert selected is not None and selected.engine == "vulkan" and selected.device == "gpu"
    assert selected.serving is not None
    assert selected.serving.required <= 2 * 2**30 < forced_plan_at(16, lavapipe_host)
    assert 1 <= selected.serving.slots < 16  # the GPU's preferred 16 slots do not fit in 2 GiB


def test_a_forced_ladder_size_is_planned_for_that_size(lavapipe_host: HostProfile) -> None:
    """gemma3 is a ladder: forcing Vulkan on lavapipe runs the size asked, its own model shape
    planned in the device's 2 GiB; a size the ladder lacks is refused."""
    ladder = load_manifest("gemma3")
    decision = select(ladder, lavapipe_host)
    small = forced_selection(decision, "vulkan", ladder, "270m").selected
    assert small is not None and (small.engine, small.option) == ("vulkan", "270m")
    assert small.serving is not None and small.serving.required <= 2 * 2**30
    assert "forced by the user (`use-model --force`)" in small.why
    with pytest.raises(UsageError, match="not in this snap"):
        forced_selection(decision, "vulkan", ladder, "99b")


def forced_plan_at(slots: int, host: HostProfile) -> int:
    """What ``slots`` f16 slots of the forced engine's context would need."""
    from snapbuild.estimate.shape import model_shape
    from snapbuild.serving.plan import option

    manifest = load_manifest("smollm2")
    engine = manifest.engine("vulkan")
    assert engine is not None
    shape = model_shape(manifest, engine)
    assert shape is not None
    context = select(manifest, host).candidate("vulkan").memory.context_size  # type: ignore[union-attr]
    return option(shape, context, "f16", slots, runtime="llama.cpp-vulkan", pool="vram").required


def test_the_forced_software_device_is_named_to_ggml_and_held(lavapipe_host: HostProfile) -> None:
    manifest = load_manifest("smollm2")
    decision = forced_selection(select(manifest, lavapipe_host), "vulkan", manifest)
    assert decision.selected is not None
    options = serve_options(
        manifest, decision.selected, artifact=Path("/m.gguf"), machine=lavapipe_host
    )
    assert options.serving is not None and options.serving.offload is not None
    choice = options.serving.offload
    assert (choice.backend, choice.device, dict(choice.env)) == (
        "vulkan",
        "Vulkan0",
        {"GGML_VK_VISIBLE_DEVICES": "0"},  # ggml-vulkan skips CPU-type devices unless named
    )
    assert "llvmpipe" in choice.why and "software" in choice.why
    binary = ServerBinary(Path("/c/usr/bin/llama-server"), ())
    argv = server_command(binary, Path("/m.gguf"), options.serving, "/s.sock", device="gpu")
    assert argv[argv.index("--gpu-layers") + 1] == "999"
    assert argv[argv.index("--device") + 1] == "Vulkan0"
    assert argv[argv.index("--parallel") + 1] == str(decision.selected.serving.slots)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("runtime", "env"),
    [
        ("llama.cpp-cuda", {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1"}),
        ("llama.cpp-rocm", {"HIP_VISIBLE_DEVICES": "1"}),
    ],
)
def test_cuda_and_rocm_count_the_vendors_gpus_in_pci_order(
    lavapipe_host: HostProfile, runtime: str, env: dict[str, str]
) -> None:
    vendor = "nvidia" if runtime.endswith("cuda") else "amd"
    gpus = (
        _gpu("0000:b1:00.0", vendor),
        _gpu("0000:17:00.0", vendor),
        _gpu("0000:65:00.0", vendor),
    )
    host = dataclasses.replace(lavapipe_host, gpus=gpus)
    choice = device_choice(runtime, _selected("e", runtime, "0000:65:00.0"), host)
    assert choice is not None and dict(choice.env) == env
    assert choice.device == ("CUDA0" if vendor == "nvidia" else "ROCm0")
    assert choice.why == "the GPU at 0000:65:00.0 (device 1 in PCI order)"


def test_vulkan_matches_by_pci_ids_when_the_driver_gives_no_address(
    lavapipe_host: HostProfile,
) -> None:
    vulkan = VulkanFacts(devices=(_vk(0, "discrete-gpu", device="0x2684"), _vk(1, "discrete-gpu")))
    gpus = (_gpu("0000:01:00.0", device="0x2684"), _gpu("0000:02:00.0"))
    host = dataclasses.replace(lavapipe_host, gpus=gpus, vulkan=vulkan)
    choice = device_choice(
        "llama.cpp-vulkan", _selected("v", "llama.cpp-vulkan", "0000:02:00.0"), host
    )
    assert choice is not None and dict(choice.env) == {"GGML_VK_VISIBLE_DEVICES": "1"}
    twins = dataclasses.replace(host, gpus=(_gpu("0000:01:00.0"), _gpu("0000:02:00.0")))
    twins = dataclasses.replace(
        twins, vulkan=VulkanFacts(devices=(_vk(0, "discrete-gpu"), _vk(1, "discrete-gpu")))
    )
    unsure = device_choice(
        "llama.cpp-vulkan", _selected("v", "llama.cpp-vulkan", "0000:02:00.0"), twins
    )
    assert unsure is not None and unsure.env == ()  # two identical GPUs: the backend's default
    assert unsure.why.startswith("the vulkan backend's own first device")


def test_cpu_engines_get_no_device_choice(lavapipe_host: HostProfile) -> None:
    selected = _selected("cpu", "llama.cpp-cpu", None).model_copy(update={"device": "cpu"})
    assert device_choice("llama.cpp-cpu", selected, lavapipe_host) is None


def test_every_llama_cpp_gpu_recipe_builds_its_offload_backend_as_a_module() -> None:
    flags = {"cuda": "-DGGML_CUDA=ON", "vulkan": "-DGGML_VULKAN=ON", "hip": "-DGGML_HIP=ON"}
    for entry in load_catalog().runtimes:
        if entry.family != "llama.cpp" or entry.device != "gpu":
            continue
        assert entry.offload is not None, entry.id
        assert entry.build is not None and entry.build.native is not None
        params = entry.build.native.cmake_parameters
        assert flags[entry.offload.backend] in params and "-DGGML_BACKEND_DL=ON" in params
        assert entry.offload.module == f"libggml-{entry.offload.backend}.so"


def test_a_cpu_build_standing_in_for_a_gpu_component_runs_on_the_cpu_and_says_so(
    tmp_path: Path,
) -> None:
    choice = DeviceChoice("vulkan", "Vulkan0", (("GGML_VK_VISIBLE_DEVICES", "0"),))
    assert usable(choice, tmp_path) == (
        None,
        "the component has no libggml-vulkan.so beside llama-server (a CPU build stands in): "
        "running on the CPU instead of Vulkan0",
    )
    (tmp_path / "libggml-vulkan.so").write_bytes(b"")
    assert usable(choice, tmp_path) == (choice, None)
    env = choice.environment({"GGML_BACKEND_PATH": "/elsewhere/libggml-x.so", "HOME": "/h"})
    assert env == {"HOME": "/h", "GGML_VK_VISIBLE_DEVICES": "0"}


def test_the_offload_report_reads_llama_servers_log() -> None:
    lines = [
        "llama_model_load_from_file_impl: using device Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits))"
        " (unknown id) - 2048 MiB free",
        "load_tensors: offloading 30 repeating layers to GPU",
        "load_tensors: offloaded 31/31 layers to GPU",
        "load_tensors:      Vulkan0 model buffer size =    93.81 MiB",
        "load_tensors:   CPU_Mapped model buffer size =    16.15 MiB",
        "llama_kv_cache:    Vulkan0 KV buffer size =   360.00 MiB",
        "sched_reserve:    Vulkan0 compute buffer size =   102.00 MiB",
        "sched_reserve: Vulkan_Host compute buffer size =    17.00 MiB",
    ]
    report = read_report(lines)
    assert (report.device, report.description, report.device_id) == (
        "Vulkan0",
        "llvmpipe (LLVM 15.0.6, 256 bits)",
        "unknown id",
    )
    assert report.free_at_load == 2048 * 2**20
    assert (report.layers, report.layers_total, report.complete) == (31, 31, True)
    assert report.on_device("KV") == 360 * 2**20
    assert report.on_device("model") == round(93.81 * 2**20)
    assert report.buffers["CPU_Mapped model"] == round(16.15 * 2**20)
    partial = read_report(["load_tensors: offloaded 12/31 layers to GPU"])
    assert partial.complete is False
    assert partial.shortfall() == (
        "llama-server put 12 of 31 layers on the device: the rest run on the CPU"
    )
    assert report.shortfall() is None


def test_serving_config_without_a_plan_still_carries_the_device(lavapipe_host: HostProfile) -> None:
    manifest = load_manifest("smollm2")
    decision = forced_selection(select(manifest, lavapipe_host), "vulkan")  # no manifest: no plan
    assert decision.selected is not None and decision.selected.serving is None
    options = serve_options(manifest, decision.selected, artifact=Path("/m"), machine=lavapipe_host)
    assert options.serving == ServingConfig(
        context_per_slot=options.load.context_size,
        offload=options.serving.offload,  # type: ignore[union-attr]
    )
    assert options.serving is not None and options.serving.offload is not None


def test_the_child_keeps_the_gpu_2404_wrappers_environment(tmp_path: Path) -> None:
    """What the wrapper set (mesa-2404's and the host driver's libraries, the ICD manifests'
    folders, Vulkan layers) reaches llama-server; the component's libraries only go first."""
    (tmp_path / "usr" / "lib").mkdir(parents=True)
    wrapper = {
        "LD_LIBRARY_PATH": "/snap/x/1/gpu-2404/usr/lib/x86_64-linux-gnu:/var/lib/snapd/lib/gl",
        "XDG_DATA_DIRS": "/usr/share:/snap/x/1/gpu-2404/usr/share:/var/lib/snapd/lib",
        "VK_LAYER_PATH": "/snap/x/1/gpu-2404/usr/share/vulkan/implicit_layer.d/",
    }
    server = ServerBinary(tmp_path / "usr" / "bin" / "llama-server", (tmp_path / "usr" / "lib",))
    choice = DeviceChoice("cuda", "CUDA0", (("CUDA_VISIBLE_DEVICES", "0"),))
    env = choice.environment(server.env(wrapper))
    assert env["LD_LIBRARY_PATH"] == f"{tmp_path}/usr/lib:{wrapper['LD_LIBRARY_PATH']}"
    assert env["XDG_DATA_DIRS"] == wrapper["XDG_DATA_DIRS"]
    assert env["VK_LAYER_PATH"] == wrapper["VK_LAYER_PATH"]
    assert env["CUDA_VISIBLE_DEVICES"] == "0"


def test_serve_force_takes_the_option_asked_else_the_size_the_selector_runs(
    lavapipe_host: HostProfile,
) -> None:
    """`snapbuild serve gemma3 --engine vulkan --force [--option O]`: the manifest that serves is
    that size's view, the forced winner runs it."""
    from snapbuild.commands.serving import _choose_engine

    ladder = load_manifest("gemma3")
    view, selected, _ = _choose_engine(ladder, lavapipe_host, "vulkan", "1b", True)
    assert (selected.engine, selected.option, view.name) == ("vulkan", "1b", ladder.name)
    assert view.engine("vulkan") is not None and not view.is_ladder
    _, auto, _ = _choose_engine(ladder, lavapipe_host, "vulkan", None, True)
    assert (auto.engine, auto.option) == ("vulkan", "4b")  # 4b/cpu-avx2 is the selector's pick
    with pytest.raises(UsageError, match="--force needs --engine"):
        _choose_engine(ladder, lavapipe_host, None, None, True)
