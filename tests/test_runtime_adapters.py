"""The adapters on their own: catalog agreement, stop strings, cancellation between tokens,
reported (never silent) fallbacks, and clear load failures."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from support.tiny_models import (
    write_tiny_llama_gguf,
    write_tiny_onnx_embedder,
    write_tiny_openvino_gguf,
)

from runtimes.catalog import load_catalog
from runtimes.engine import LoadOptions, RuntimeFailure
from runtimes.inprocess.adapter import (
    Message,
    RuntimeAdapter,
    SamplingParams,
    StopMatcher,
    adapter_class,
)
from runtimes.inprocess.onnx import PROVIDERS
from runtimes.inprocess.openvino import DEVICES


def test_catalog_and_adapters_agree() -> None:
    for entry in load_catalog().runtimes:
        cls = adapter_class(entry.id)
        assert issubclass(cls, RuntimeAdapter)
        assert cls.capabilities == frozenset(entry.capabilities), entry.id
        if entry.family == "onnxruntime":
            assert entry.id in PROVIDERS
        if entry.family == "openvino":
            assert entry.device in DEVICES
    onnx_ids = {e.id for e in load_catalog().runtimes if e.family == "onnxruntime"}
    assert set(PROVIDERS) == onnx_ids


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        (["Hello", " wor", "ld"], (["Hello", " wor", "ld"], False)),
        (["Hel", "lo ST", "OP more"], (["Hel", "lo ", ""], True)),
        (["a S", "x"], (["a ", "Sx"], False)),
        (["STOP"], ([""], True)),
    ],
)
def test_stop_matcher_holds_back_possible_stops(
    pieces: list[str], expected: tuple[list[str], bool]
) -> None:
    matcher = StopMatcher(["STOP"])
    out, hit = [], False
    for piece in pieces:
        text, hit = matcher.feed(piece)
        out.append(text)
        if hit:
            break
    assert (out, hit) == expected


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("models")
    return {
        "llama.cpp-cpu": write_tiny_llama_gguf(tmp / "l.gguf"),
        "openvino-cpu": write_tiny_openvino_gguf(tmp / "q.gguf"),
        "onnxruntime-cpu": write_tiny_onnx_embedder(tmp / "e.onnx"),
        "garbage": _garbage(tmp / "bad.gguf"),
    }


def _garbage(path: Path) -> Path:
    path.write_bytes(b"GGUF" + b"\x00" * 64)
    return path


def _adapter(runtime: str, path: Path, device: str = "cpu") -> RuntimeAdapter:
    adapter = adapter_class(runtime)(
        LoadOptions(artifact=path, runtime=runtime, device=device, context_size=256, threads=1)
    )
    adapter.load()
    return adapter


@pytest.mark.parametrize("runtime", ["llama.cpp-cpu", "openvino-cpu"])
def test_cancel_stops_between_tokens(runtime: str, models: dict[str, Path]) -> None:
    adapter = _adapter(runtime, models[runtime])
    cancel = threading.Event()
    params = SamplingParams(max_tokens=200, ignore_eos=True, seed=0)
    deltas = []
    for delta in adapter.chat([Message("user", "go")], params, cancel):
        deltas.append(delta)
        if len(deltas) == 3:
            cancel.set()
    last = deltas[-1]
    assert last.finish_reason == "cancelled"
    # far short of max_tokens (200); a runtime's generator may run a few pieces ahead of a
    # consumer that a loaded machine slows down (OpenVINO's streamer thread does)
    assert last.usage is not None and last.usage.completion_tokens < 100


@pytest.mark.parametrize("runtime", ["llama.cpp-cpu", "openvino-cpu"])
def test_usage_counts_are_exact(runtime: str, models: dict[str, Path]) -> None:
    adapter = _adapter(runtime, models[runtime])
    params = SamplingParams(max_tokens=7, ignore_eos=True, temperature=0)
    deltas = list(adapter.complete("hello world", params, threading.Event()))
    assert [d.finish_reason for d in deltas].count(None) == len(deltas) - 1
    assert deltas[-1].finish_reason == "length"
    assert deltas[-1].usage is not None
    assert (deltas[-1].usage.prompt_tokens, deltas[-1].usage.completion_tokens) == (
        adapter.count_tokens("hello world"),
        7,
    )


def test_onnx_reports_provider_fallback(models: dict[str, Path]) -> None:
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has CUDA: no fallback to observe")
    adapter = _adapter("onnxruntime-cuda", models["onnxruntime-cpu"], device="gpu")
    have = ", ".join(sorted(onnxruntime.get_available_providers()))
    assert adapter.notes == [
        f"CUDAExecutionProvider not available in this onnxruntime build (has {have}); "
        "running on CPU"
    ]
    info = adapter.describe()
    assert info["execution-provider"] == "CPUExecutionProvider"
    assert info["notes"] == adapter.notes
    assert len(adapter.embed(["x"]).vectors[0]) == 16


def test_llama_reports_gpu_fallback(models: dict[str, Path]) -> None:
    import llama_cpp

    adapter = _adapter("llama.cpp-cuda", models["llama.cpp-cpu"], device="gpu")
    if llama_cpp.llama_supports_gpu_offload():
        assert (adapter.describe()["gpu-layers"], adapter.notes) == (-1, [])
    else:
        assert adapter.describe()["gpu-layers"] == 0
        assert adapter.notes == ["this llama.cpp build cannot offload to a GPU; running on the CPU"]


@pytest.mark.parametrize("runtime", ["llama.cpp-cpu", "openvino-cpu", "onnxruntime-cpu"])
def test_load_failure_names_the_file(runtime: str, models: dict[str, Path]) -> None:
    bad = models["garbage"]
    with pytest.raises(RuntimeFailure) as caught:
        _adapter(runtime, bad)
    assert str(bad) in caught.value.brief
