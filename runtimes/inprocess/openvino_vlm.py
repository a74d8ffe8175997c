"""OpenVINO GenAI with images: ``VLMPipeline`` for IRs that carry a vision-embeddings model.

An OpenVINO IR exported for a vision-language model (optimum-intel writes
``openvino_vision_embeddings_model.xml`` beside ``openvino_language_model.xml``) is served by
``openvino_genai.VLMPipeline``; any other artifact falls back to :class:`OpenVinoAdapter`'s
``LLMPipeline`` unchanged, so the catalog can name this adapter for every OpenVINO engine.

Images arrive already checked by the gateway (:mod:`runtimes.gateway.images`: PNG or JPEG bytes
inside
canonical ``data:`` URLs). Each becomes a ``uint8`` tensor ``[1, height, width, 3]`` (RGB), the
layout GenAI's samples feed, and the prompt gets GenAI's universal tag ``<ov_genai_image_N>``
where the image stood in the conversation, so several images per message keep their order.
The pipeline applies the model's own chat template, which knows its image tokens.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from runtimes.engine import LoadOptions, Modality
from runtimes.inprocess.adapter import Delta, Message, SamplingParams
from runtimes.inprocess.openvino import OpenVinoAdapter, load_failure

VISION_MODEL = "openvino_vision_embeddings_model.xml"


def has_vision_model(artifact: Path) -> bool:
    """Whether the artifact is an IR directory with a vision-embeddings model."""
    return artifact.is_dir() and (artifact / VISION_MODEL).is_file()


def image_tensor(data: bytes) -> Any:
    """Decoded RGB pixels as the ``ov.Tensor`` ``[1, H, W, 3]`` (uint8) VLMPipeline reads."""
    import numpy as np
    import openvino
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        pixels = np.asarray(img.convert("RGB"), dtype=np.uint8)
    return openvino.Tensor(np.ascontiguousarray(pixels[np.newaxis]))


def vlm_history(messages: Sequence[Message]) -> tuple[list[dict[str, str]], list[bytes]]:
    """The chat history with ``<ov_genai_image_N>`` tags where images were, and the images in
    the order the tags number them."""
    history: list[dict[str, str]] = []
    images: list[bytes] = []
    for message in messages:
        tags = ""
        for data in message.images:
            tags += f"<ov_genai_image_{len(images)}>"
            images.append(data)
        history.append({"role": message.role, "content": tags + message.content})
    return history, images


class OpenVinoVisionAdapter(OpenVinoAdapter):
    """VLMPipeline for a vision IR, LLMPipeline (the parent) for anything else."""

    def __init__(self, options: LoadOptions) -> None:
        super().__init__(options)
        self.vision = has_vision_model(options.artifact)
        if self.vision and self.batched:  # VLMPipeline has no continuous-batching variant here
            self.batched = False
            self.notes.append("vision pipeline: one request at a time")

    @property
    def inputs(self) -> tuple[Modality, ...]:
        """What it takes in: images too when the IR has its vision-embeddings model."""
        return ("text", "vision") if self.vision else ("text",)

    def load(self) -> None:
        if not self.vision:
            super().load()
            return
        import openvino_genai

        device = self.device
        try:
            self.pipe = openvino_genai.VLMPipeline(str(self.options.artifact), device)
        except Exception as exc:  # OpenVINO raises plain RuntimeError with long texts
            raise load_failure(
                f"OpenVINO could not load the vision model {self.options.artifact} on {device}",
                exc,
                "check the IR is complete (snapbuild fetch) and the device present",
            ) from exc
        self.tokenizer = self.pipe.get_tokenizer()

    def chat(
        self, messages: Sequence[Message], params: SamplingParams, cancel: threading.Event
    ) -> Iterator[Delta]:
        if not self.vision:
            return super().chat(messages, params, cancel)
        history, images = vlm_history(messages)
        prompt = self.tokenizer.apply_chat_template(history, add_generation_prompt=True)
        tensors = [image_tensor(data) for data in images]

        def run(config: Any, streamer: Any) -> Any:
            return self.pipe.generate(
                prompt, images=tensors, generation_config=config, streamer=streamer
            )

        return self._complete_one(prompt, params, cancel, run)
