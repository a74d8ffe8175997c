"""Generated models for the `snapbuild new` tests: GGUFs with a chosen vocabulary of special
tokens and with or without a chat template (the template decision depends on both), and a tiny
OpenVINO IR directory with the ``config.json`` exporters write beside it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from support.tiny_models import MERGES, _byte_symbols, add_decoder_metadata

LAYERS, EMBEDDING, HEADS, KV_HEADS, FEED_FORWARD, CONTEXT = 2, 64, 4, 2, 128, 512


def write_chat_gguf(
    path: Path,
    *,
    specials: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    chat_template: str | None = None,
    architecture: str = "llama",
    license_id: str | None = "apache-2.0",
    seed: int = 0,
) -> Path:
    """A random-weight llama-layout GGUF (F16) whose vocabulary ends in ``specials`` (the first
    is BOS, the last EOS), with ``chat_template`` or none."""
    import gguf

    rng = np.random.default_rng(seed)
    tokens = _byte_symbols() + [left + right for left, right in MERGES]
    types = [1] * len(tokens) + [3] * len(specials)
    tokens += list(specials)
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("Tiny Chat")
    writer.add_basename("tiny-chat")
    if license_id:
        writer.add_license(license_id)
    add_decoder_metadata(
        writer,
        embedding=EMBEDDING,
        layers=LAYERS,
        heads=HEADS,
        kv_heads=KV_HEADS,
        feed_forward=FEED_FORWARD,
        context=CONTEXT,
    )
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([f"{a} {b}" for a, b in MERGES])
    writer.add_bos_token_id(tokens.index(specials[0]))
    writer.add_eos_token_id(tokens.index(specials[-1]))
    writer.add_add_bos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.2).astype(np.float16)

    kv = KV_HEADS * (EMBEDDING // HEADS)
    writer.add_tensor("token_embd.weight", matrix(len(tokens), EMBEDDING))
    for i in range(LAYERS):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(EMBEDDING, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", matrix(EMBEDDING, EMBEDDING))
        writer.add_tensor(f"blk.{i}.attn_k.weight", matrix(kv, EMBEDDING))
        writer.add_tensor(f"blk.{i}.attn_v.weight", matrix(kv, EMBEDDING))
        writer.add_tensor(f"blk.{i}.attn_output.weight", matrix(EMBEDDING, EMBEDDING))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(EMBEDDING, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", matrix(FEED_FORWARD, EMBEDDING))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", matrix(FEED_FORWARD, EMBEDDING))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", matrix(EMBEDDING, FEED_FORWARD))
    writer.add_tensor("output_norm.weight", np.ones(EMBEDDING, dtype=np.float32))
    writer.add_tensor("output.weight", matrix(len(tokens), EMBEDDING))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_tiny_ir(directory: Path) -> Path:
    """An OpenVINO IR (one MatMul with an int8-free f16 weight) plus a Hugging Face config.json
    of a small qwen2 model, as optimum-intel lays out an export."""
    import openvino as ov
    import openvino.opset13 as ops

    directory.mkdir(parents=True, exist_ok=True)
    data = ops.parameter([1, 64], np.float32, name="input")
    weight = ops.constant(np.ones((64, 32), dtype=np.float16))
    out = ops.matmul(data, ops.convert(weight, np.float32), False, False)
    ov.save_model(ov.Model([out], [data], "tiny"), directory / "openvino_model.xml", False)
    config = {
        "model_type": "qwen2",
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "hidden_size": 896,
        "intermediate_size": 4864,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
        "sliding_window": None,
    }
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory
