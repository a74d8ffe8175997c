"""A GGUF file's manifest facts: architecture, quantization, chat template, licence.

``snapbuild new`` writes these into a manifest, and ``validate``/``make`` compare a manifest
with them. Every value comes from the file (metadata keys llama.cpp reads, the tensors' element
counts); the one fact llama.cpp keeps in code, how many layers use the sliding window, comes from
``data/swa_layouts.yaml`` through :func:`snapbuild.gguf_info.sliding_layers`. Each fact carries
the key it was read from, so a disagreement can say what the file says and where.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtimes.templates import TemplateChoice, choose_template
from snapbuild.gguf_info import sliding_layers
from snapbuild.manifest import ModelKind
from snapcommon.errors import UsageError

GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class FileFacts:
    """What one model file states, as manifest values with their source keys."""

    path: Path
    format: str  # gguf, onnx, openvino-ir
    facts: dict[str, Any]  # ModelFacts field name (snake_case) -> value
    sources: dict[str, str]  # field name -> where the file says it (a metadata key)
    quantization: str | None
    quantization_source: str
    kind: ModelKind
    template: TemplateChoice | None = None
    license: str | None = None  # as the file states it (e.g. general.license)
    name: str | None = None  # a human name (general.name)
    basename: str | None = None  # a short model name (general.basename)
    notes: tuple[str, ...] = field(default=())


def is_gguf(path: Path) -> bool:
    """Whether ``path`` starts with the GGUF magic."""
    with path.open("rb") as fh:
        return fh.read(4) == GGUF_MAGIC


def _reader(path: Path) -> Any:
    try:
        from gguf import GGUFReader
    except ImportError as exc:  # pragma: no cover - gguf ships with snapbuild's extras
        raise UsageError(
            "reading GGUF files needs the gguf package", resolution="pip install gguf"
        ) from exc
    if not is_gguf(path):
        with path.open("rb") as fh:
            head = fh.read(4)
        raise UsageError(
            f"{path} is not a GGUF file",
            details=f"it starts with {head!r}, not {GGUF_MAGIC!r}",
            resolution="give a model file in GGUF format (llama.cpp's convert_hf_to_gguf.py "
            "writes one)",
        )
    try:
        return GGUFReader(str(path), "r")
    except Exception as exc:
        raise UsageError(
            f"{path} is not a readable GGUF file",
            details=str(exc),
            resolution="the file may be truncated: download it again",
        ) from None


def projector_inputs(path: Path) -> tuple[str, ...]:
    """What a projector GGUF (llama.cpp's mmproj, ``general.architecture: clip``) reads:
    ``vision`` and/or ``audio`` by its ``clip.has_*_encoder`` keys; empty for anything else."""
    reader = _reader(path)
    if _value(reader, "general.architecture") != "clip":
        return ()
    found = [("vision", "clip.has_vision_encoder"), ("audio", "clip.has_audio_encoder")]
    return tuple(name for name, key in found if _value(reader, key))


def _value(reader: Any, key: str) -> Any:
    item = reader.fields.get(key)
    if item is None:
        return None
    try:
        return item.contents()
    except Exception:  # malformed field: treat as absent
        return None


def _int(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, list):  # per-layer values: the largest is what memory is sized for
        return max(int(v) for v in value) if value else None
    return int(value)


def quantization_name(file_type: int | None, tensor_types: list[str]) -> tuple[str | None, str]:
    """The quantization name (the table's spelling) and where it came from."""
    import gguf

    if file_type is not None:
        try:
            name = gguf.LlamaFileType(file_type).name
        except ValueError:
            name = ""
        if name:
            return name.removeprefix("MOSTLY_").removeprefix("ALL_"), "general.file_type"
    matrices = [t for t in tensor_types if t not in ("F32",)]
    if matrices:
        most = max(set(matrices), key=matrices.count)
        return most, "the most common tensor type"
    return ("F32" if tensor_types else None), "the tensor types"


def read_gguf_facts(path: Path, supplied_template: str | None = None) -> FileFacts:
    """Everything a manifest states about a GGUF, read from its header."""
    reader = _reader(path)
    arch = _value(reader, "general.architecture")
    if not isinstance(arch, str):
        raise UsageError(
            f"{path} has no general.architecture metadata",
            resolution="convert the model with a current llama.cpp convert_hf_to_gguf.py",
        )
    facts: dict[str, Any] = {"architecture": arch}
    sources: dict[str, str] = {"architecture": "general.architecture"}

    def take(name: str, key: str, value: Any = None) -> Any:
        got = _int(_value(reader, key)) if value is None else value
        if got is not None:
            facts[name] = got
            sources[name] = key
        return got

    layers = take("layers", f"{arch}.block_count")
    heads = take("attention_heads", f"{arch}.attention.head_count")
    take("kv_heads", f"{arch}.attention.head_count_kv")
    embd = take("embedding_size", f"{arch}.embedding_length")
    if take("head_size", f"{arch}.attention.key_length") is None and heads and embd:
        facts["head_size"] = embd // heads
        sources["head_size"] = f"{arch}.embedding_length / {arch}.attention.head_count"
    take("feed_forward_size", f"{arch}.feed_forward_length")
    if take("vocab_size", f"{arch}.vocab_size") is None:
        tokens = reader.fields.get("tokenizer.ggml.tokens")
        if tokens is not None:
            take("vocab_size", "tokenizer.ggml.tokens (count)", len(tokens.data))
    if "tokenizer.ggml.tokens" in reader.fields:
        merges = reader.fields.get("tokenizer.ggml.merges")
        take("vocab_merges", "tokenizer.ggml.merges (count)", len(merges.data) if merges else 0)
    take("context_length", f"{arch}.context_length")
    window = take("sliding_window", f"{arch}.attention.sliding_window")
    if window and layers:
        pattern = _value(reader, f"{arch}.attention.sliding_window_pattern")
        take(
            "sliding_window_layers",
            f"{arch}.attention.sliding_window_pattern"
            if pattern is not None
            else f"llama.cpp's {arch} layout (snapbuild/data/swa_layouts.yaml)",
            sliding_layers(arch, layers, window, pattern),
        )
    take(
        "parameters", "the tensors' element counts", sum(int(t.n_elements) for t in reader.tensors)
    )
    quant, quant_source = quantization_name(
        _int(_value(reader, "general.file_type")), [t.tensor_type.name for t in reader.tensors]
    )
    vocab = _token_set(reader)
    metadata = {k: _value(reader, k) for k in ("general.architecture", "tokenizer.chat_template")}
    template = choose_template(metadata, vocab.__contains__, supplied_template)
    kind: ModelKind
    if _value(reader, f"{arch}.pooling_type") is not None:
        kind = "embeddings"
    else:
        kind = "chat" if template.template is not None else "completion"
    return FileFacts(
        path=path,
        format="gguf",
        facts=facts,
        sources=sources,
        quantization=quant,
        quantization_source=quant_source,
        kind=kind,
        template=template,
        license=_str(_value(reader, "general.license")),
        name=_str(_value(reader, "general.name")),
        basename=_str(_value(reader, "general.basename")),
    )


def _token_set(reader: Any) -> frozenset[str]:
    tokens = _value(reader, "tokenizer.ggml.tokens")
    return frozenset(str(t) for t in tokens) if isinstance(tokens, list) else frozenset()


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None
