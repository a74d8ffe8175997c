"""A transformer sentence encoder in ONNX with random weights, for batching tests and benchmarks.

Unlike :func:`support.tiny_models.write_tiny_onnx_embedder` (a bag of byte embeddings), every
token here attends to every other through self-attention, so a padded position that is not
masked out *changes* the real tokens' states: the model is what tells a correct attention mask
in a padded batch from a wrong one. The layout is BERT's (token + position embeddings, pre-norm
attention and feed-forward blocks) and ``width=384, layers=6, heads=12, feed_forward=1536`` is
all-MiniLM-L6-v2's shape, so the benchmark pays a realistic cost per text. The output is
``last_hidden_state`` (batch x sequence x width), which the ONNX Runtime adapter mean-pools over
the attention mask and normalises, as sentence-transformers does for MiniLM.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def write_tiny_onnx_encoder(
    path: Path,
    *,
    width: int = 32,
    layers: int = 2,
    heads: int = 4,
    feed_forward: int = 64,
    max_length: int = 512,
    seed: int = 0,
) -> Path:
    """Write the encoder to ``path``: inputs ``input_ids`` and ``attention_mask`` (int64,
    batch x sequence), UTF-8 bytes as token ids (metadata ``snapbuild.tokenizer: bytes``)."""
    import onnx  # test-only dependency
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    head = width // heads
    weights: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        weights.append(numpy_helper.from_array(value, name))
        return name

    def rand(name: str, *shape: int, scale: float = 0.08) -> str:
        return const(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], **attrs))
        return output

    def dense(x: str, name: str, rows: int, cols: int) -> str:
        product = node("MatMul", [x, rand(f"{name}.w", rows, cols)], f"{name}.mm")
        return node("Add", [product, const(f"{name}.b", np.zeros(cols, np.float32))], name)

    def norm(x: str, name: str) -> str:
        gamma = const(f"{name}.g", np.ones(width, np.float32))
        beta = const(f"{name}.b", np.zeros(width, np.float32))
        return node("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=1e-5)

    split = const("split_heads", np.array([0, 0, heads, head], np.int64))
    merge = const("merge_heads", np.array([0, 0, width], np.int64))
    # embeddings: tokens + positions 0..S-1
    tokens = node("Gather", [rand("tok_table", 256, width, scale=1.0), "input_ids"], "tok")
    shape = node("Shape", ["input_ids"], "ids_shape")
    seq = node("Gather", [shape, const("one_i", np.array(1, np.int64))], "seq_len")
    zero, step = const("zero_i", np.array(0, np.int64)), const("step_i", np.array(1, np.int64))
    positions = node("Range", [zero, seq, step], "positions")
    pos_table = rand("pos_table", max_length, width, scale=0.5)
    x = node("Add", [tokens, node("Gather", [pos_table, positions], "pos")], "x0")
    # additive mask: 0 for real tokens, -10000 for padding, broadcast over heads and queries
    mask_f = node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    inverted = node("Sub", [const("one_f", np.array(1.0, np.float32)), mask_f], "inv_mask")
    scaled = node("Mul", [inverted, const("neg_f", np.array(-10000.0, np.float32))], "neg_mask")
    bias = node("Unsqueeze", [scaled, const("mask_axes", np.array([1, 2], np.int64))], "bias")
    scale = const("attn_scale", np.array(1.0 / np.sqrt(head), np.float32))
    for i in range(layers):
        p = f"l{i}"
        h = norm(x, f"{p}.ln1")

        def heads_of(name: str, perm: list[int], h: str = h, p: str = p) -> str:
            projected = dense(h, f"{p}.{name}", width, width)
            shaped = node("Reshape", [projected, split], f"{p}.{name}.split")
            return node("Transpose", [shaped], f"{p}.{name}.t", perm=perm)

        q = heads_of("q", [0, 2, 1, 3])
        k = heads_of("k", [0, 2, 3, 1])
        v = heads_of("v", [0, 2, 1, 3])
        scores = node("Mul", [node("MatMul", [q, k], f"{p}.qk"), scale], f"{p}.scores")
        probs = node("Softmax", [node("Add", [scores, bias], f"{p}.masked")], f"{p}.p", axis=-1)
        context = node("Transpose", [node("MatMul", [probs, v], f"{p}.ctx")], f"{p}.ctx.t",
                       perm=[0, 2, 1, 3])  # fmt: skip
        merged = node("Reshape", [context, merge], f"{p}.merged")
        x = node("Add", [x, dense(merged, f"{p}.o", width, width)], f"{p}.x1")
        hidden = node("Relu", [dense(norm(x, f"{p}.ln2"), f"{p}.ff1", width, feed_forward)],
                      f"{p}.act")  # fmt: skip
        x = node("Add", [x, dense(hidden, f"{p}.ff2", feed_forward, width)], f"{p}.x2")
    norm(x, "last_hidden_state")
    graph = helper.make_graph(
        nodes,
        "tiny-encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info(
                "attention_mask", TensorProto.INT64, ["batch", "sequence"]
            ),
        ],
        [
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", width]
            )
        ],
        initializer=weights,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="snapbuild-tests"
    )
    model.ir_version = 8
    helper.set_model_props(
        model, {"snapbuild.tokenizer": "bytes", "snapbuild.max-length": str(max_length)}
    )
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
