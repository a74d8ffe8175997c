"""GGUF files of chosen shapes (layers, heads, KV heads, F32/F16/Q8_0) with random weights.

The memory estimator is calibrated against what llama.cpp really allocates for models of
different shapes; real models of every shape are too big to ship, so these files carry random
weights and the tiny byte-level tokenizer of :mod:`support.tiny_models` (llama.cpp refuses a
llama model without tokenizer metadata). Used by tests/test_estimate*.py and
benchmarks/memory_fit.py.

Two layouts: ``llama`` (every layer attends to the whole context) and ``gemma3``, the one
architecture here with sliding-window attention, so the estimator's "sliding-window layers
hold only their window" is checked against what llama.cpp allocates. llama.cpp turns SWA on for
gemma3 when ``gemma3.attention.sliding_window`` is set, and then (no
``sliding_window_pattern`` key) makes 5 of every 6 layers local: layer ``i`` is global when
``i % 6 == 5`` (``llama_model_gemma3::load_arch_hparams``, ``set_swa_pattern(6)``), the rule
:func:`snapbuild.estimate.gguf_shape.sliding_layers` applies. gemma3 layers also carry Q/K norms and
post-attention / post-feed-forward norms, which llama.cpp requires.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from support.tiny_models import add_chatml_tokenizer, add_decoder_metadata, tokenizer_vocab


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
    architecture: str = "llama",
    sliding_window: int | None = None,
    vocab: int | None = None,
    tied: bool = False,
) -> Path:
    """Write a GGUF whose matrices are ``dtype`` (F32, F16 or Q8_0).

    ``architecture`` is ``llama`` or ``gemma3``; ``sliding_window`` (gemma3 only) turns on
    llama.cpp's interleaved sliding-window attention with that window. ``vocab`` pads the tiny
    tokenizer with unreachable filler tokens up to a realistic vocabulary (32k, 128k, 262k),
    which is what sizes llama.cpp's logits; ``tied`` drops ``output.weight`` (llama.cpp then
    reuses the token embeddings, as Gemma does), which with a narrow embedding keeps a
    262k-token file at a few tens of MB.
    """
    import gguf

    if architecture not in ("llama", "gemma3"):
        raise ValueError(f"architecture must be llama or gemma3, not {architecture!r}")
    if sliding_window is not None and architecture != "gemma3":
        raise ValueError("sliding_window needs architecture='gemma3' (llama has no SWA)")
    rng = np.random.default_rng(seed)
    tokens, types, merges = tokenizer_vocab()
    if vocab is not None:
        if vocab < len(tokens):
            raise ValueError(f"vocab must be at least {len(tokens)}, not {vocab}")
        tokens = tokens + [f"filler{i:06d}" for i in range(vocab - len(tokens))]
        types = types + [1] * (vocab - len(types))
    head_dim = embedding // heads
    writer = gguf.GGUFWriter(str(path), architecture)
    swa = f"-swa{sliding_window}" if sliding_window else ""
    prefix = "shape" if architecture == "llama" else architecture
    writer.add_name(f"{prefix}-{layers}x{embedding}-{heads}h{kv_heads}kv{swa}-{dtype}")
    add_decoder_metadata(
        writer,
        embedding=embedding,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        feed_forward=feed_forward,
        context=context,
    )
    if sliding_window is not None:
        writer.add_sliding_window(sliding_window)
    file_types = {
        "F32": gguf.LlamaFileType.ALL_F32,
        "F16": gguf.LlamaFileType.MOSTLY_F16,
        "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    }
    writer.add_file_type(file_types[dtype])
    add_chatml_tokenizer(writer, tokens, types, merges)

    def matrix(name: str, rows: int, cols: int) -> None:
        data = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.05).astype(np.float32)
        if dtype == "F32":
            writer.add_tensor(name, data)
        elif dtype == "F16":
            writer.add_tensor(name, data.astype(np.float16))
        else:
            packed = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(name, packed, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def norm(name: str, size: int = embedding) -> None:
        writer.add_tensor(name, np.ones(size, dtype=np.float32))

    kv = kv_heads * head_dim
    n_vocab = len(tokens)
    matrix("token_embd.weight", n_vocab, embedding)
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
        if architecture == "gemma3":
            norm(f"blk.{i}.attn_q_norm.weight", head_dim)
            norm(f"blk.{i}.attn_k_norm.weight", head_dim)
            norm(f"blk.{i}.post_attention_norm.weight")
            norm(f"blk.{i}.post_ffw_norm.weight")
    norm("output_norm.weight")
    if not tied:
        matrix("output.weight", n_vocab, embedding)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
