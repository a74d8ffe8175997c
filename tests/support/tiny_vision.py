"""A tiny vision-language model llama.cpp really loads: a tiny decoder plus a Gemma 3 projector.

The projector is a GGUF in the layout llama.cpp's multimodal library (``tools/mtmd``, clip.cpp)
reads for ``clip.projector_type = gemma3``: a SigLIP-style ViT (patch convolution, learned
position embeddings, pre-norm blocks with biased attention and a GELU MLP, a post layer norm)
followed by Gemma 3's projector (average pooling by ``projector.scale_factor``, an RMS norm
``mm.soft_emb_norm`` and the ``mm.input_projection`` matrix into the language model's width).
Real Gemma 3 uses 896-pixel images, 14-pixel patches and a 4x pool (256 image tokens); this one
uses 32-pixel images, 8-pixel patches and a 2x pool, so an image is 4 tokens and encodes in
microseconds. Weights are random: answers are gibberish, but every pixel goes through the real
decoder, the real ViT graph and the real embedding injection.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from .tiny_models import write_tiny_gguf

TEXT_EMBEDDING = 64
IMAGE_SIZE = 32
PATCH_SIZE = 8
POOL = 2
VISION_EMBEDDING = 32
VISION_HEADS = 4
VISION_FEED_FORWARD = 64
VISION_LAYERS = 2
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE // POOL) ** 2


def write_tiny_gemma3_mmproj(
    path: Path, *, text_embedding: int = TEXT_EMBEDDING, seed: int = 1
) -> Path:
    """Write the projector GGUF. numpy shapes are ggml's ``ne`` reversed (rows, columns)."""
    import gguf  # test-only dependency

    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_name("tiny-gemma3-mmproj")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_clip_has_vision_encoder(True)
    writer.add_clip_projector_type(gguf.VisionProjectorType.GEMMA3)
    writer.add_vision_image_size(IMAGE_SIZE)
    writer.add_vision_patch_size(PATCH_SIZE)
    writer.add_vision_embedding_length(VISION_EMBEDDING)
    writer.add_vision_feed_forward_length(VISION_FEED_FORWARD)
    writer.add_vision_block_count(VISION_LAYERS)
    writer.add_vision_head_count(VISION_HEADS)
    writer.add_vision_projection_dim(text_embedding)
    writer.add_vision_attention_layernorm_eps(1e-6)
    writer.add_vision_use_gelu(True)
    writer.add_vision_image_mean([0.5, 0.5, 0.5])
    writer.add_vision_image_std([0.5, 0.5, 0.5])
    writer.add_vision_projector_scale_factor(POOL)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.2).astype(np.float16)

    def vector(size: int, value: float = 0.0) -> np.ndarray:
        return np.full(size, value, dtype=np.float32)

    width = VISION_EMBEDDING
    patches = (IMAGE_SIZE // PATCH_SIZE) ** 2
    conv = rng.standard_normal((width, 3, PATCH_SIZE, PATCH_SIZE)) * 0.05
    writer.add_tensor("v.patch_embd.weight", conv.astype(np.float16))
    writer.add_tensor("v.patch_embd.bias", vector(width))
    position = rng.standard_normal((patches, width)) * 0.02
    writer.add_tensor("v.position_embd.weight", position.astype(np.float32))
    for i in range(VISION_LAYERS):
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            writer.add_tensor(f"v.blk.{i}.{name}.weight", matrix(width, width))
            writer.add_tensor(f"v.blk.{i}.{name}.bias", vector(width))
        for norm in ("ln1", "ln2"):
            writer.add_tensor(f"v.blk.{i}.{norm}.weight", vector(width, 1.0))
            writer.add_tensor(f"v.blk.{i}.{norm}.bias", vector(width))
        writer.add_tensor(f"v.blk.{i}.ffn_up.weight", matrix(VISION_FEED_FORWARD, width))
        writer.add_tensor(f"v.blk.{i}.ffn_up.bias", vector(VISION_FEED_FORWARD))
        writer.add_tensor(f"v.blk.{i}.ffn_down.weight", matrix(width, VISION_FEED_FORWARD))
        writer.add_tensor(f"v.blk.{i}.ffn_down.bias", vector(width))
    writer.add_tensor("v.post_ln.weight", vector(width, 1.0))
    writer.add_tensor("v.post_ln.bias", vector(width))
    writer.add_tensor("mm.soft_emb_norm.weight", vector(width, 1.0))
    # ggml ne = [text, vision]: the graph multiplies by its transpose, vision -> text width.
    writer.add_tensor("mm.input_projection.weight", matrix(width, text_embedding))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_tiny_vision_model(directory: Path) -> tuple[Path, Path]:
    """The language model and its projector, side by side in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    model = write_tiny_gguf(directory / "tiny-vision-lm.gguf", embedding=TEXT_EMBEDDING)
    projector = write_tiny_gemma3_mmproj(directory / "tiny-vision-mmproj.gguf")
    return model, projector


def write_png(path: Path, *, width: int = 48, height: int = 40, seed: int = 0) -> Path:
    """A small RGB PNG with random pixels (Pillow)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels, "RGB").save(path, format="PNG")
    return path


def vision_manifest(directory: Path, name: str = "tinyvision") -> Path:
    """A manifest whose one llama.cpp engine loads the tiny model and its projector."""
    import yaml

    from .serving import tiny_manifest

    model, projector = write_tiny_vision_model(directory)
    path = tiny_manifest(directory, name, model, runtime="llama.cpp-cpu", fmt="gguf")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["artifacts"].append(
        {
            "name": "projector",
            "format": "gguf",
            "quantization": "F16",
            "role": "projector",
            "inputs": ["vision"],
            "files": [
                {
                    "path": projector.name,
                    "url": "https://example.invalid/" + projector.name,
                    "sha256": hashlib.sha256(projector.read_bytes()).hexdigest(),
                    "size": projector.stat().st_size,
                    "local": {"path": str(projector)},
                }
            ],
        }
    )
    data["engines"][0]["projector"] = "projector"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
