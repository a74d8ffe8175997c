"""What every engine shares, whichever way it runs (llama-server child or in-process adapter):
how to load it (:class:`LoadOptions`) and how it fails (:class:`RuntimeFailure`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from snapcommon.errors import SnapbuildError

Capability = Literal["chat", "completion", "embeddings"]


class RuntimeFailure(SnapbuildError):
    """A runtime failed to load or run a model (exit 1): names the model file and runtime."""


@dataclass(frozen=True)
class LoadOptions:
    """How to load: the artifact, the runtime id (catalog), device, context and threads."""

    artifact: Path
    runtime: str
    device: str = "cpu"  # cpu, gpu, npu
    context_size: int = 4096
    threads: int | None = None  # None: the runtime's own default
    gpu_layers: int | None = None  # llama.cpp offload; None: all layers when the build can
    # llama.cpp engines serve through llama-server: its component tree (usr/bin/llama-server,
    # usr/lib), or the binary itself; None: $SNAPBUILD_LLAMA_ROOT
    llama_root: Path | None = None
    llama_server: Path | None = None
    chat_template: str | None = None  # the manifest's model.chat-template (runtimes.chat_templates)
    projector: Path | None = None  # llama.cpp's mmproj beside the weights: the engine reads images
    # concurrent serving (issue 13), from the Decision's batching plan; 1: one at a time
    sequences: int = 1  # continuous: sequences decoding together; micro-batch: texts per batch
    batch_window_ms: float = 5.0  # micro-batch: how long concurrent requests are gathered
    # continuous: tokens per paged-KV block on this runtime (the selector's batching table,
    # snapbuild/data/batching.yaml), so the cache holds ``sequences`` full contexts
    kv_block_tokens: int | None = None
    # OpenVINO INFERENCE_PRECISION_HINT; None: the device's default (bf16 on CPUs with AMX or
    # AVX512-BF16, whose rounding depends on the batch shape); "f32": batch-invariant math
    inference_precision: str | None = None
