"""Read the facts the memory estimator needs from a local GGUF file.

A GGUF carries its architecture in metadata (``<arch>.block_count``, head counts, sizes) and
every tensor's type and shape, so an estimate for a local file needs no manifest. The header is
read by :class:`runtimes.gguf_file.GgufFile`, the project's one GGUF reader.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from runtimes.gguf_file import GgufFile
from snapbuild.estimate.common import token_heap_bytes
from snapbuild.estimate.shape import ModelShape
from snapbuild.estimate.tables import read_data
from snapcommon.errors import UsageError
from snapcommon.model import KebabModel


def read_gguf_shape(path: Path) -> ModelShape:
    """The model's shape and tensor bytes, from a GGUF header."""
    gguf = GgufFile.open(path)
    arch = gguf.architecture()

    def get(key: str) -> int | None:
        return gguf.integer(f"{arch}.{key}")

    layers = get("block_count")
    heads = get("attention.head_count")
    kv_heads = get("attention.head_count_kv") or heads
    embd = get("embedding_length")
    if layers is None or heads is None or embd is None:
        raise UsageError(
            f"{path} lacks the attention metadata needed for an estimate",
            details=f"{arch}.block_count={layers}, {arch}.attention.head_count={heads}, "
            f"{arch}.embedding_length={embd}",
            resolution="use a GGUF converted by llama.cpp, or give the facts in a manifest",
        )
    key_len = get("attention.key_length") or embd // heads
    val_len = get("attention.value_length") or key_len
    vocab = get("vocab_size")
    if vocab is None:
        vocab = gguf.token_count()
    merges, heap = vocab_tables(gguf)
    window = get("attention.sliding_window") or None  # 0: no sliding window
    pattern = gguf.value(f"{arch}.attention.sliding_window_pattern")
    return ModelShape(
        architecture=arch,
        layers=layers,
        attention_heads=heads,
        kv_heads=kv_heads,
        key_size=key_len,
        value_size=val_len,
        embedding_size=embd,
        feed_forward_size=get("feed_forward_length"),
        vocab_size=vocab,
        vocab_merges=merges,
        vocab_heap_bytes=heap,
        context_length=get("context_length"),
        sliding_window=window,
        sliding_window_layers=sliding_layers(arch, layers, window, pattern),
        weights=sum(int(t.n_bytes) for t in gguf.tensors),
    )


def vocab_tables(gguf: GgufFile) -> tuple[int | None, int]:
    """BPE merges (0 without any, None without a tokenizer) and the heap bytes of the token
    texts too long to be stored inline: what sizes llama.cpp's vocabulary tables."""
    if gguf.token_count() is None:
        return None, 0
    return gguf.merge_count(), token_heap_bytes(gguf.token_lengths())


class SwaLayout(KebabModel):
    """One global layer in every ``period`` (the others use the sliding window)."""

    period: int = Field(ge=2)  # 1 would make every layer global: no sliding window at all


class SwaLayouts(KebabModel):
    """The whole of ``snapbuild/data/swa_layouts.yaml``."""

    schema_version: Literal[1]
    architectures: dict[str, SwaLayout]  # GGUF general.architecture -> layout


@cache
def swa_periods() -> dict[str, int]:
    """Architectures whose sliding-window layout llama.cpp fixes in code, with their period,
    from ``data/swa_layouts.yaml`` (validated once per process)."""
    table = SwaLayouts.model_validate(read_data("swa_layouts.yaml"))
    return {arch: layout.period for arch, layout in table.architectures.items()}


def sliding_layers(arch: str, layers: int, window: int | None, pattern: Any) -> int:
    """How many of ``layers`` use the sliding window: the file's per-layer pattern, else one
    global layer in every ``period`` (the file's, else llama.cpp's for ``arch``). Counted
    arithmetically, never layer by layer: a header may claim any number of layers."""
    if not window:
        return 0
    if isinstance(pattern, list):  # one boolean per layer (newer converters)
        return min(layers, sum(1 for p in pattern if p))
    period = int(pattern) if isinstance(pattern, int) and pattern > 0 else swa_periods().get(arch)
    if not period:
        return 0
    # layer i is global when (i + 1) % period == 0: layers // period of them
    return layers - layers // period
