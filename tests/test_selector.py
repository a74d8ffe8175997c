"""The selector on constructed hosts: verdict wording, unknown facts, memory fit and
context step-down, experimental engines, forcing an engine, and purity."""

from __future__ import annotations

import pytest
from support.hosts import GIB, host, intel_igpu, intel_npu, nvidia
from support.manifests import GEMMA3_4B

import hwprobe
from hwprobe.profile import HostProfile
from snapbuild.manifest.loader import load_manifest
from snapbuild.selection.selector import PRECEDENCE, select
from snapcommon.errors import UsageError


def test_nvidia_with_enough_vram_gets_cuda_and_q8_when_fast_enough() -> None:
    decision = select(load_manifest(GEMMA3_4B), host(gpus=(nvidia(12 * GIB),)))
    assert decision.selected is not None
    assert (decision.selected.engine, decision.selected.context_size) == ("cuda-q8", 8192)
    assert decision.selected.why == (
        "cuda-q8 and runner-up cuda both reach the sufficient 40 tokens/s; "
        "Q8_0 keeps more precision than Q4_K_M"
    )
    cand = decision.candidate("cuda-q8")
    assert cand is not None and cand.reasons == (
        "snap built for amd64",
        "NVIDIA GeForce RTX at 0000:01:00.0 (discrete)",
        "compute capability 8.6 ≥ 5.0",
        "images: projector 812 MiB counted in the weights, image encoder 1.2 GiB in the compute",
        "NVIDIA VRAM 12.0 GiB ≥ 7.1 GiB needed at context 8192 (full-context peak, margin 4.9 GiB)",
    )
    assert decision.precedence == PRECEDENCE


def test_small_nvidia_gpu_is_rejected_for_memory_with_both_figures() -> None:
    decision = select(load_manifest(GEMMA3_4B), host(gpus=(nvidia(2 * GIB),)))
    cuda = decision.candidate("cuda")
    assert cuda is not None and cuda.blockers == (
        "NVIDIA VRAM 2.0 GiB < 5.3 GiB needed even at the minimum context 2048 (5.4 GiB at 8192)",
    )
    assert decision.selected is not None and decision.selected.device == "cpu"


def test_unknown_vram_is_accepted_with_a_warning_and_ranked_after_verified_fits() -> None:
    unknown = nvidia(None, device="0x9999", cc=None)
    decision = select(load_manifest(GEMMA3_4B), host(gpus=(unknown,)))
    assert decision.selected is not None and decision.selected.engine == "cuda"
    cuda = decision.candidate("cuda")
    assert cuda is not None and cuda.reasons[-1] == (
        "NVIDIA VRAM unknown (NVML unavailable or no driver answer): 5.4 GiB needed at "
        "context 8192, fit not verified"
    )
    messages = [w.message for w in decision.warnings]
    assert "cuda: VRAM of the GPU unknown; 5.4 GiB needed, fit not verified" in messages


def test_nominal_vram_of_a_known_device_is_used_when_nvml_is_missing() -> None:
    mx250 = nvidia(None, device="0x1d13", cc=None)
    decision = select(load_manifest(GEMMA3_4B), host(gpus=(mx250,)))
    cuda = decision.candidate("cuda")
    assert cuda is not None and cuda.blockers == (
        "NVIDIA VRAM (nominal for device 0x1d13, not read from the driver) 2.0 GiB < 5.3 GiB "
        "needed even at the minimum context 2048 (5.4 GiB at 8192)",
    )


def test_avx_only_cpu_verdict() -> None:
    decision = select(load_manifest("smollm2"), host(flags=("avx", "sse4_2")))
    avx2 = decision.candidate("cpu-avx2")
    assert avx2 is not None and avx2.blockers == ("needs AVX2, FMA, F16C: CPU has AVX only",)
    assert decision.selected is not None and decision.selected.engine == "cpu"


def test_npu_driver_not_loaded_is_not_selected() -> None:
    decision = select(load_manifest(GEMMA3_4B), host(npus=(intel_npu(False),)))
    npu = decision.candidate("openvino-npu")
    assert npu is not None and npu.blockers == (
        "NPU driver not loaded (Intel NPU (Lunar Lake) at 0000:00:0b.0): install "
        "intel-npu-driver (the snap or the linux-npu-driver packages) and reboot",
    )


def test_npu_with_driver_ranks_after_the_integrated_gpu_and_after_image_reading_cpus() -> None:
    """gemma3 reads images; OpenVINO 2025.2 on the NPU would serve it text only, so the CPU
    engines (llama.cpp with the projector) rank above it despite the accelerator class."""
    decision = select(load_manifest(GEMMA3_4B), host(gpus=(intel_igpu(),), npus=(intel_npu(True),)))
    ranked = [c.engine for c in decision.candidates if c.rank is not None]
    assert ranked == [
        "openvino-gpu",
        "vulkan",
        "cpu-avx2",
        "cpu-x86-64",
        "cpu-avx2-q8",
        "openvino-npu",
    ]
    npu = decision.candidate("openvino-npu")
    assert npu is not None and npu.context_size == 4096
    assert "Intel NPU (Lunar Lake) at 0000:00:0b.0, driver intel_vpu loaded" in npu.reasons


def test_context_steps_down_to_the_largest_that_fits() -> None:
    decision = select(load_manifest("smollm2"), host(ram=int(0.21 * GIB)))
    assert decision.selected is not None
    cand = decision.candidate(decision.selected.engine)
    assert cand is not None and cand.memory is not None
    assert decision.selected.context_size == 1280
    assert cand.memory.required <= cand.memory.available  # type: ignore[operator]
    assert cand.reasons[-1] == (
        "RAM available 215 MiB ≥ 208 MiB needed at context 1280 "
        "(full-context peak, margin 7 MiB; stepped down from 4096: 364 MiB needed there)"
    )


def test_nothing_fits_means_no_engine() -> None:
    decision = select(load_manifest(GEMMA3_4B), host(ram=GIB))
    assert decision.selected is None
    assert all(not c.compatible for c in decision.candidates)


def test_experimental_engines_only_when_asked() -> None:
    igpu_host = host(gpus=(intel_igpu(),))
    plain = select(load_manifest("minilm"), igpu_host)
    assert plain.selected is not None and plain.selected.engine == "cpu"
    ov = plain.candidate("openvino")
    assert ov is not None and ov.blockers == ("experimental: considered only with --experimental",)
    asked = select(load_manifest("minilm"), igpu_host, include_experimental=True)
    assert asked.selected is not None and asked.selected.engine == "openvino"


def test_forcing_an_engine() -> None:
    manifest = load_manifest(GEMMA3_4B)
    forced = select(manifest, host(gpus=(nvidia(12 * GIB),)), engine="cpu-avx2")
    assert forced.selected is not None and forced.selected.engine == "cpu-avx2"
    assert forced.selected.why == "cpu-avx2 was asked for by name and is compatible"
    refused = select(manifest, host(), engine="cuda")
    assert refused.selected is None
    with pytest.raises(UsageError) as info:
        select(manifest, host(), engine="metal")
    assert info.value.brief == "gemma3 has no engine named 'metal'"


def test_select_never_probes_the_live_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> HostProfile:
        raise AssertionError("the selector probed the machine")

    monkeypatch.setattr(hwprobe, "probe", refuse)
    assert select(load_manifest("smollm2"), host()).selected is not None


def test_cuda_engine_needs_nvidia_even_without_a_written_requirement() -> None:
    # minilm's cuda engine lists no requirement: the runtime catalog implies an NVIDIA GPU
    decision = select(load_manifest("minilm"), host(gpus=(intel_igpu(),)))
    cuda = decision.candidate("cuda")
    assert cuda is not None and cuda.blockers == (
        "needs an NVIDIA GPU (onnxruntime-cuda): Intel Arc 140V at 0000:00:02.0 is Intel, "
        "not NVIDIA",
    )


def test_a_vision_model_prefers_an_engine_that_reads_images_and_says_why() -> None:
    """The NPU outranks the CPU by accelerator class, but would serve gemma3 text only."""
    full = load_manifest(GEMMA3_4B)
    manifest = full.model_copy(
        update={"engines": tuple(e for e in full.engines if e.name in ("openvino-npu", "cpu-avx2"))}
    )
    decision = select(manifest, host(npus=(intel_npu(True),)))
    assert decision.selected is not None
    assert decision.selected.engine == "cpu-avx2"
    assert decision.selected.why == (
        "cpu-avx2 reads images, runner-up openvino-npu would serve this vision model text only: "
        "serving every input decides first"
    )
    npu = decision.candidate("openvino-npu")
    assert npu is not None and npu.compatible and npu.rank == 2
    assert "serves text only: openvino-npu here cannot read images" in npu.reasons
    cpu_engine = decision.candidate("cpu-avx2")
    assert cpu_engine is not None
    assert (
        "images: projector 812 MiB counted in the weights, image encoder 1.2 GiB in the compute"
        in cpu_engine.reasons
    )
    assert decision.precedence[0].startswith("serves every input the model takes")


def test_projector_and_image_encoder_are_part_of_the_memory_fit() -> None:
    full = load_manifest(GEMMA3_4B)
    engine = full.engine("cpu-avx2")
    assert engine is not None
    text_only = full.model_copy(
        update={
            "engines": (engine.model_copy(update={"projector": None}),),
            "model": full.model.model_copy(update={"vision": None}),
        }
    )
    with_images = select(full, host()).candidate("cpu-avx2")
    without = select(text_only, host()).candidate("cpu-avx2")
    assert with_images is not None and without is not None
    assert with_images.memory is not None and without.memory is not None
    assert with_images.memory.weights - without.memory.weights == 851_000_000
    # SigLIP at 896 px, 14 px patches: 4096 patches; scores 4096^2 x 16 heads x 4 bytes + MLP
    # 2 x 4096 x 4304 x 4 + hidden 4 x 4096 x 1152 x 4
    encoder = 4096 * 4096 * 16 * 4 + 2 * 4096 * 4304 * 4 + 4 * 4096 * 1152 * 4
    assert with_images.memory.compute - without.memory.compute == encoder


def test_when_only_the_text_model_fits_the_engine_serves_text_only() -> None:
    """3.5 GiB free: Q4_K_M fits at the minimum context, its projector and encoder do not."""
    decision = select(load_manifest(GEMMA3_4B), host(ram=int(3.5 * GIB)))
    assert decision.selected is not None
    assert (decision.selected.engine, decision.selected.inputs) == ("cpu-avx2", ("text",))
    cand = decision.candidate("cpu-avx2")
    assert cand is not None and cand.memory is not None
    assert (
        "images: projector and image encoder (2.0 GiB) do not fit beside the model in 3.5 GiB: "
        "serves text only"
    ) in cand.reasons
    assert cand.memory.weights == 2_490_000_000  # the projector is not loaded
    roomy = select(load_manifest(GEMMA3_4B), host(ram=16 * GIB)).selected
    assert roomy is not None and roomy.inputs == ("text", "vision")
