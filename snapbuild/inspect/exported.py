"""Manifest facts of exported models: an ONNX model or an OpenVINO IR directory.

Neither format states a model's architecture in a form as complete as GGUF metadata; exporters
(optimum, optimum-intel) copy the Hugging Face ``config.json`` beside the weights, and that file
is where the facts come from. The weights say the rest: parameters (element counts of the
constants) and quantization (their most common element type). Facts missing from both stay
unknown, which the selector reports rather than guesses.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from snapbuild.inspect.gguf import FileFacts
from snapbuild.manifest.model import ModelKind
from snapcommon.errors import UsageError, optional_module

# config.json key -> ModelFacts field, in order of preference (text_config first for VLMs)
CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "attention_heads": ("num_attention_heads", "n_head"),
    "kv_heads": ("num_key_value_heads",),
    "head_size": ("head_dim",),
    "embedding_size": ("hidden_size", "n_embd", "d_model"),
    "feed_forward_size": ("intermediate_size", "n_inner"),
    "vocab_size": ("vocab_size",),
    "context_length": ("max_position_embeddings", "n_positions"),
    "sliding_window": ("sliding_window",),
}
ONNX_QUANT = {1: "fp32", 10: "fp16", 16: "fp16", 2: "int8", 3: "int8", 21: "int4", 22: "int4"}
IR_QUANT = {"f32": "fp32", "f16": "fp16", "bf16": "fp16", "u8": "int8", "i8": "int8"}
IR_QUANT.update({"u4": "int4", "i4": "int4", "nf4": "int4"})
_IR_CONST = re.compile(r'<data\b[^>]*element_type="(\w+)"[^>]*shape="([\d,\s]*)"')


def config_facts(config_file: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """Facts from a Hugging Face ``config.json`` (its ``text_config`` for multimodal models)."""
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {config_file}", details=str(exc)) from None
    inner = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    facts: dict[str, Any] = {}
    sources: dict[str, str] = {}
    arch = inner.get("model_type") or config.get("model_type")
    if isinstance(arch, str):
        facts["architecture"] = arch.removesuffix("_text")
        sources["architecture"] = "config.json model_type"
    for name, keys in CONFIG_KEYS.items():
        for key in keys:
            for where, scope in (("text_config.", inner), ("", config)):
                value = scope.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    facts.setdefault(name, value)
                    sources.setdefault(name, f"config.json {where}{key}")
    if "head_size" not in facts and facts.get("embedding_size") and facts.get("attention_heads"):
        facts["head_size"] = facts["embedding_size"] // facts["attention_heads"]
        sources["head_size"] = "config.json hidden_size / num_attention_heads"
    return facts, sources


def _dominant(counts: dict[str, int]) -> str | None:
    return max(counts, key=lambda k: counts[k]) if counts else None


def read_onnx_facts(source: Path) -> FileFacts:
    """Facts of an ONNX model (a ``.onnx`` file, or a directory holding one)."""
    model_file = _one(source, "*.onnx", "an ONNX model (.onnx)")
    onnx = optional_module("onnx", "reading ONNX models")
    try:
        model = onnx.load(str(model_file), load_external_data=False)
    except Exception as exc:
        raise UsageError(
            f"{model_file} is not a readable ONNX model",
            details=str(exc).splitlines()[0] if str(exc) else None,
            resolution="export the model again (optimum-cli export onnx)",
        ) from None
    counts: dict[str, int] = {}
    parameters = 0
    for init in model.graph.initializer:
        size = 1
        for d in init.dims:
            size *= int(d)
        parameters += size
        quant = ONNX_QUANT.get(int(init.data_type), "fp32")
        counts[quant] = counts.get(quant, 0) + size
    facts, sources = _config_beside(model_file)
    meta = {p.key: p.value for p in model.metadata_props}
    if "context_length" not in facts and meta.get("snapbuild.max-length", "").isdigit():
        facts["context_length"] = int(meta["snapbuild.max-length"])
        sources["context_length"] = "model metadata snapbuild.max-length"
    outputs = model.graph.output
    dims = outputs[0].type.tensor_type.shape.dim if outputs else []
    if "embedding_size" not in facts and dims and dims[-1].dim_value > 0:
        facts["embedding_size"] = int(dims[-1].dim_value)
        sources["embedding_size"] = f"the output {outputs[0].name!r}'s last dimension"
    facts["parameters"] = parameters
    sources["parameters"] = "the initializers' element counts"
    return _exported(model_file, "onnx", facts, sources, _dominant(counts), "embeddings", source)


def read_ir_facts(source: Path) -> FileFacts:
    """Facts of an OpenVINO IR directory (its ``*.xml`` graphs and ``config.json``)."""
    if not source.is_dir():
        raise UsageError(
            f"{source} is not a directory",
            resolution="give the OpenVINO IR directory (with openvino_model.xml and .bin files)",
        )
    graphs = sorted(p for p in source.glob("*.xml") if "tokenizer" not in p.name)
    graphs = [p for p in graphs if "detokenizer" not in p.name]
    if not graphs:
        raise UsageError(
            f"{source} holds no OpenVINO IR model (*.xml)",
            resolution="export the model with optimum-cli export openvino",
        )
    counts: dict[str, int] = {}
    parameters = 0
    for xml in graphs:
        for element, shape in _IR_CONST.findall(xml.read_text(encoding="utf-8", errors="replace")):
            size = 1
            for d in (s for s in shape.replace(" ", "").split(",") if s):
                size *= int(d)
            if element in IR_QUANT and size > 1:
                parameters += size
                counts[IR_QUANT[element]] = counts.get(IR_QUANT[element], 0) + size
    facts, sources = _config_beside(graphs[0])
    if parameters:
        facts["parameters"] = parameters
        sources["parameters"] = "the IR constants' element counts"
    kind: ModelKind = "chat" if _has_chat_template(source) else "completion"
    return _exported(graphs[0], "openvino-ir", facts, sources, _dominant(counts), kind, source)


def _has_chat_template(directory: Path) -> bool:
    config = directory / "tokenizer_config.json"
    if config.is_file():
        try:
            if json.loads(config.read_text(encoding="utf-8")).get("chat_template"):
                return True
        except ValueError:
            pass
    tokenizer = directory / "openvino_tokenizer.xml"
    return tokenizer.is_file() and "chat_template" in tokenizer.read_text(errors="replace")


def _config_beside(model_file: Path) -> tuple[dict[str, Any], dict[str, str]]:
    config = model_file.parent / "config.json"
    return config_facts(config) if config.is_file() else ({}, {})


def _exported(
    model_file: Path,
    fmt: str,
    facts: dict[str, Any],
    sources: dict[str, str],
    quant: str | None,
    kind: ModelKind,
    source: Path,
) -> FileFacts:
    notes: list[str] = []
    if "architecture" not in facts:
        facts["architecture"] = "unknown"
        sources["architecture"] = "(no config.json)"
        notes.append(
            f"no config.json beside {model_file.name}: the architecture and most sizes are unknown"
        )
    return FileFacts(
        path=source,
        format=fmt,
        facts=facts,
        sources=sources,
        quantization=quant,
        quantization_source="the weights' most common element type",
        kind=kind,
        notes=tuple(notes),
    )


def _one(source: Path, pattern: str, what: str) -> Path:
    if source.is_file():
        return source
    found = sorted(source.glob(pattern)) if source.is_dir() else []
    if len(found) != 1:
        raise UsageError(
            f"{source} does not hold exactly one {what}",
            details=f"found: {', '.join(p.name for p in found) or 'none'}",
            resolution=f"give the path of {what}",
        )
    return found[0]
