"""Read the facts the memory estimator needs from a local GGUF file.

A GGUF carries its architecture in metadata (``<arch>.block_count``, head counts, sizes) and
every tensor's type and shape, so an estimate for a local file needs no manifest. Reading is
done with the ``gguf`` package's memory-mapped reader: nothing is loaded but the header.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from snapbuild.estimate import ModelShape, token_heap_bytes
from snapcommon.errors import UsageError


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return None
    try:
        return field.contents()
    except Exception:  # pragma: no cover - malformed field: treat as absent
        return None


def _first_int(value: Any) -> int | None:
    """Head counts may be one number or one per layer; the estimator wants the largest."""
    if value is None:
        return None
    if isinstance(value, list):
        return max(int(v) for v in value) if value else None
    return int(value)


def read_gguf_shape(path: Path) -> ModelShape:
    """The model's shape and tensor bytes, from a GGUF header."""
    try:
        from gguf import GGUFReader
    except ImportError as exc:  # pragma: no cover - gguf is a test/dev dependency
        raise UsageError(
            "reading GGUF files needs the gguf package",
            resolution="pip install gguf",
        ) from exc
    try:
        reader = GGUFReader(str(path), "r")
    except FileNotFoundError:
        raise UsageError(
            f"no such file: {path}", resolution="give the path of a .gguf file"
        ) from None
    except Exception as exc:
        raise UsageError(
            f"{path} is not a readable GGUF file",
            details=str(exc),
            resolution="give a model file in GGUF format (llama.cpp's format)",
        ) from None
    arch = _field(reader, "general.architecture")
    if not isinstance(arch, str):
        raise UsageError(
            f"{path} has no general.architecture metadata",
            resolution="convert the model with a current llama.cpp convert_hf_to_gguf.py",
        )

    def get(key: str) -> Any:
        return _field(reader, f"{arch}.{key}")

    layers = _first_int(get("block_count"))
    heads = _first_int(get("attention.head_count"))
    kv_heads = _first_int(get("attention.head_count_kv")) or heads
    embd = _first_int(get("embedding_length"))
    if layers is None or heads is None or embd is None:
        raise UsageError(
            f"{path} lacks the attention metadata needed for an estimate",
            details=f"{arch}.block_count={layers}, {arch}.attention.head_count={heads}, "
            f"{arch}.embedding_length={embd}",
            resolution="use a GGUF converted by llama.cpp, or give the facts in a manifest",
        )
    key_len = _first_int(get("attention.key_length")) or embd // heads
    val_len = _first_int(get("attention.value_length")) or key_len
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    vocab = _first_int(get("vocab_size"))
    if vocab is None:
        vocab = len(tokens.data) if tokens is not None else None
    merges, heap = vocab_tables(reader)
    window = _first_int(get("attention.sliding_window"))
    swa_layers = sliding_layers(arch, layers, window, get("attention.sliding_window_pattern"))
    weights = sum(int(t.n_bytes) for t in reader.tensors)
    return ModelShape(
        architecture=arch,
        layers=layers,
        attention_heads=heads,
        kv_heads=kv_heads,
        key_size=key_len,
        value_size=val_len,
        embedding_size=embd,
        feed_forward_size=_first_int(get("feed_forward_length")),
        vocab_size=vocab,
        vocab_merges=merges,
        vocab_heap_bytes=heap,
        context_length=_first_int(get("context_length")),
        sliding_window=window,
        sliding_window_layers=swa_layers,
        weights=weights,
    )


def vocab_tables(reader: Any) -> tuple[int | None, int]:
    """BPE merges (0 without any, None without a tokenizer) and the heap bytes of the token
    texts too long to be stored inline: what sizes llama.cpp's vocabulary tables."""
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is None:
        return None, 0
    merges = reader.fields.get("tokenizer.ggml.merges")
    heap = token_heap_bytes(len(tokens.parts[i]) for i in tokens.data)
    return (len(merges.data) if merges is not None else 0), heap


SWA_LAYOUTS = Path(__file__).with_name("data") / "swa_layouts.yaml"


@cache
def swa_periods() -> dict[str, int]:
    """Architectures whose sliding-window layout llama.cpp fixes in code (data: one global layer
    in every ``period``), from ``data/swa_layouts.yaml``."""
    import yaml

    data = yaml.safe_load(SWA_LAYOUTS.read_text(encoding="utf-8"))
    return {str(arch): int(entry["period"]) for arch, entry in data["architectures"].items()}


def sliding_layers(arch: str, layers: int, window: int | None, pattern: Any) -> int:
    if not window:
        return 0
    if isinstance(pattern, list):  # one boolean per layer (newer converters)
        return sum(1 for p in pattern if p)
    period = int(pattern) if isinstance(pattern, int) and pattern > 0 else swa_periods().get(arch)
    if not period:
        return 0
    # layer i is global when (i + 1) % period == 0
    return sum(1 for i in range(layers) if (i + 1) % period != 0)
