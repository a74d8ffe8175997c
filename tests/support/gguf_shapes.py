"""GGUF files of chosen shapes (layers, heads, KV heads, F32/F16/Q8_0) with random weights.

The memory estimator is calibrated against what llama.cpp really allocates for models of
different shapes; real models of every shape are too big to ship, so these files carry random
weights and the tiny byte-level tokenizer of :mod:`support.tiny_models` (llama.cpp refuses a
llama model without tokenizer metadata). Used by tests/test_estimate*.py and
benchmarks/memory_fit.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from support.tiny_models import CHATML_TEMPLATE, tokenizer_vocab


def write_shape_gguf(
    path: Path,
    *,
    embedding: int = 256,
    layers: int = 4,
    heads: int = 8,
    kv_heads: int = 2,
    feed_forward: int = 512,
    context: int = 8192,
    dtype: str = "F16",
    seed: int = 0,
) -> Path:
    """Write a llama-architecture GGUF whose matrices are ``dtype`` (F32, F16 or Q8_0)."""
    import gguf

    rng = np.random.default_rng(seed)
    tokens, types, merges = tokenizer_vocab()
    head_dim = embedding // heads
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"shape-{layers}x{embedding}-{heads}h{kv_heads}kv-{dtype}")
    writer.add_context_length(context)
    writer.add_embedding_length(embedding)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(feed_forward)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    file_types = {
        "F32": gguf.LlamaFileType.ALL_F32,
        "F16": gguf.LlamaFileType.MOSTLY_F16,
        "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    }
    writer.add_file_type(file_types[dtype])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_pad_token_id(tokens.index("<|endoftext|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)

    def matrix(name: str, rows: int, cols: int) -> None:
        data = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.05).astype(np.float32)
        if dtype == "F32":
            writer.add_tensor(name, data)
        elif dtype == "F16":
            writer.add_tensor(name, data.astype(np.float16))
        else:
            packed = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(name, packed, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def norm(name: str) -> None:
        writer.add_tensor(name, np.ones(embedding, dtype=np.float32))

    kv = kv_heads * head_dim
    vocab = len(tokens)
    matrix("token_embd.weight", vocab, embedding)
    for i in range(layers):
        norm(f"blk.{i}.attn_norm.weight")
        matrix(f"blk.{i}.attn_q.weight", embedding, embedding)
        matrix(f"blk.{i}.attn_k.weight", kv, embedding)
        matrix(f"blk.{i}.attn_v.weight", kv, embedding)
        matrix(f"blk.{i}.attn_output.weight", embedding, embedding)
        norm(f"blk.{i}.ffn_norm.weight")
        matrix(f"blk.{i}.ffn_gate.weight", feed_forward, embedding)
        matrix(f"blk.{i}.ffn_up.weight", feed_forward, embedding)
        matrix(f"blk.{i}.ffn_down.weight", embedding, feed_forward)
    norm("output_norm.weight")
    matrix("output.weight", vocab, embedding)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
