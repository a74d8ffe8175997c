"""A GGUF file's manifest facts: architecture, quantization, chat template, licence.

``snapbuild new`` writes these into a manifest, and ``validate``/``make`` compare a manifest
with them. Every value comes from the file (metadata keys llama.cpp reads, the tensors' element
counts); the one fact llama.cpp keeps in code, how many layers use the sliding window, comes from
``data/swa_layouts.yaml`` through :func:`snapbuild.estimate.gguf_shape.sliding_layers`. Each fact
carries
the key it was read from, so a disagreement can say what the file says and where.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtimes.chat_templates import TemplateChoice, template_for
from runtimes.gguf_file import MERGES_KEY, TOKENS_KEY, GgufFile, is_gguf
from snapbuild.estimate.gguf_shape import sliding_layers
from snapbuild.manifest.model import ModelKind

__all__ = ["FileFacts", "is_gguf", "projector_inputs", "quantization_name", "read_gguf_facts"]


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


def projector_inputs(path: Path) -> tuple[str, ...]:
    """What a projector GGUF (llama.cpp's mmproj, ``general.architecture: clip``) reads:
    ``vision`` and/or ``audio`` by its ``clip.has_*_encoder`` keys; empty for anything else."""
    gguf = GgufFile.open(path)
    if gguf.value("general.architecture") != "clip":
        return ()
    found = [("vision", "clip.has_vision_encoder"), ("audio", "clip.has_audio_encoder")]
    return tuple(name for name, key in found if gguf.value(key))


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
    gguf = GgufFile.open(path)
    arch = gguf.architecture()
    facts: dict[str, Any] = {"architecture": arch}
    sources: dict[str, str] = {"architecture": "general.architecture"}

    def take(name: str, key: str, value: Any = None) -> Any:
        got = gguf.integer(key) if value is None else value
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
        take("vocab_size", f"{TOKENS_KEY} (count)", gguf.token_count())
    if gguf.has(TOKENS_KEY):
        take("vocab_merges", f"{MERGES_KEY} (count)", gguf.merge_count())
    take("context_length", f"{arch}.context_length")
    window_key = f"{arch}.attention.sliding_window"
    window = gguf.integer(window_key) or None  # 0: no sliding window
    if window:
        take("sliding_window", window_key, window)
    if window and layers:
        pattern = gguf.value(f"{arch}.attention.sliding_window_pattern")
        take(
            "sliding_window_layers",
            f"{arch}.attention.sliding_window_pattern"
            if pattern is not None
            else f"llama.cpp's {arch} layout (snapbuild/data/swa_layouts.yaml)",
            sliding_layers(arch, layers, window, pattern),
        )
    parameters = sum(int(t.n_elements) for t in gguf.tensors)
    if parameters:  # a vocabulary-only GGUF has none
        take("parameters", "the tensors' element counts", parameters)
    quant, quant_source = quantization_name(
        gguf.integer("general.file_type"), [t.tensor_type.name for t in gguf.tensors]
    )
    template = template_for(gguf, supplied_template)
    kind: ModelKind
    if gguf.value(f"{arch}.pooling_type") is not None:
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
        license=gguf.text("general.license"),
        name=gguf.text("general.name"),
        basename=gguf.text("general.basename"),
    )
