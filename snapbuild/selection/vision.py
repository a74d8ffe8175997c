"""What reading images costs and who can do it: the selector's view of vision models.

A vision engine loads an image encoder beside its weights (llama.cpp's projector GGUF, OpenVINO's
vision-embeddings model inside its IR). Its memory is the projector's weights plus the encoder's
working set for one image; the image's tokens themselves sit in the context the KV estimate
already counts. Whether a runtime can read images at all on a machine is runtime-catalog data
(``inputs`` of a runtime entry), so the ranking can put an engine that would serve the model
text-only below one that serves all of it.
"""

from __future__ import annotations

from snapbuild.manifest.model import Engine, Manifest, VisionFacts

F32 = 4


def projector_bytes(manifest: Manifest, engine: Engine) -> int:
    """The projector's file size (0 without one): it is loaded whole, like the weights."""
    return manifest.artifact(engine.projector).size if engine.projector else 0


def encoder_compute_bytes(vision: VisionFacts) -> int:
    """The encoder's largest working set for one image, in f32: attention scores over all
    patches (every head at once, no flash attention: the upper bound), the MLP's activations
    and a few copies of the hidden state."""
    patches = (vision.image_size // vision.patch_size) ** 2
    scores = patches * patches * vision.attention_heads * F32
    mlp = 2 * patches * vision.feed_forward_size * F32
    hidden = 4 * patches * vision.embedding_size * F32
    return scores + mlp + hidden


def vision_compute_bytes(manifest: Manifest, engine: Engine) -> int:
    """Compute memory an engine that reads images needs on top of the text model's."""
    vision = manifest.model.vision
    if vision is None or "vision" not in manifest.engine_inputs(engine):
        return 0
    return encoder_compute_bytes(vision)


def is_vision_model(manifest: Manifest) -> bool:
    """Whether any engine of the manifest reads images (an artifact an engine loads does)."""
    used = {n for e in manifest.engines for n in (e.artifact, e.projector) if n}
    return any("vision" in a.inputs for a in manifest.artifacts if a.name in used)


def missing_inputs(
    manifest: Manifest, engine: Engine, runtime_inputs: tuple[str, ...]
) -> tuple[str, ...]:
    """What the model takes in (on its best engines) that this engine will not serve here:
    its files do not read it, or its runtime cannot on this machine."""
    if not is_vision_model(manifest):
        return ()
    served = set(manifest.engine_inputs(engine)) & set(runtime_inputs)
    return () if "vision" in served else ("vision",)
