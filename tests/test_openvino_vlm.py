"""The OpenVINO vision adapter's pieces, with the real OpenVINO: the history VLMPipeline gets
(image tags in order), the tensors (exact pixels, GenAI's [1, H, W, 3] uint8 layout), and the
fallback to LLMPipeline for an artifact without a vision-embeddings model.

No VLMPipeline model is generated here: an IR with a vision-embeddings model is written by
optimum-intel's exporter from a transformers checkpoint (torch), which the test environment
does not have; the gemma3 int4 IR is 3 GB."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.tiny_vision import write_png

from runtimes.catalog import load_catalog
from runtimes.engine import LoadOptions
from runtimes.inprocess.adapter import Message

ov = pytest.importorskip("openvino")
pytest.importorskip("openvino_genai")

from runtimes.inprocess.openvino_vlm import (  # noqa: E402 - after the skips
    VISION_MODEL,
    OpenVinoVisionAdapter,
    image_tensor,
    vlm_history,
)


def test_history_tags_images_in_order() -> None:
    messages = [
        Message("system", "Be brief."),
        Message("user", "Compare these.", (b"first", b"second")),
        Message("assistant", "They differ."),
        Message("user", "And this one?", (b"third",)),
    ]
    history, images = vlm_history(messages)
    assert history == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "<ov_genai_image_0><ov_genai_image_1>Compare these."},
        {"role": "assistant", "content": "They differ."},
        {"role": "user", "content": "<ov_genai_image_2>And this one?"},
    ]
    assert images == [b"first", b"second", b"third"]


def test_image_tensor_is_rgb_uint8_with_the_exact_pixels(tmp_path: Path) -> None:
    from PIL import Image

    png = write_png(tmp_path / "a.png", width=7, height=5, seed=3)
    tensor = image_tensor(png.read_bytes())
    assert isinstance(tensor, ov.Tensor)
    assert list(tensor.shape) == [1, 5, 7, 3]
    assert tensor.element_type == ov.Type.u8
    with Image.open(png) as img:
        expected = np.asarray(img.convert("RGB"))
    assert np.array_equal(tensor.data[0], expected)


def test_vision_is_decided_by_the_ir_files(tmp_path: Path) -> None:
    ir = tmp_path / "ir"
    ir.mkdir()
    options = LoadOptions(artifact=ir, runtime="openvino-cpu")
    assert OpenVinoVisionAdapter(options).inputs == ("text",)
    (ir / VISION_MODEL).write_text("<net/>", encoding="utf-8")
    assert OpenVinoVisionAdapter(options).inputs == ("text", "vision")
    gguf = LoadOptions(artifact=tmp_path / "model.gguf", runtime="openvino-cpu")
    assert OpenVinoVisionAdapter(gguf).inputs == ("text",)


def test_catalog_serves_openvino_through_the_vision_adapter() -> None:
    catalog = load_catalog()
    for runtime in ("openvino-cpu", "openvino-gpu", "openvino-npu"):
        entry = catalog.get(runtime)
        assert entry is not None
        assert entry.adapter == "runtimes.inprocess.openvino_vlm:OpenVinoVisionAdapter"
    assert catalog.get("openvino-npu").inputs == ("text",)  # type: ignore[union-attr]
