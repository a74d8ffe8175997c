"""Manifests the tests share beside the shipped ones.

``GEMMA3_4B`` is Gemma 3 4B as one model: the shipped ``gemma3`` manifest before it became a
ladder, kept verbatim (name ``gemma3``) so that the single-model selector, builder and snap are
still judged on a real vision model with GGUF, projector and OpenVINO engines, against the
goldens recorded before ladders existed.
"""

from __future__ import annotations

from pathlib import Path

MANIFESTS = Path(__file__).resolve().parent.parent / "data" / "manifests"
GEMMA3_4B = str(MANIFESTS / "gemma3-4b.yaml")
