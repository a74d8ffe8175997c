"""The selector's answer: ranked candidates with reasons, and the winner.

This is a stable JSON contract (``snapbuild select --json``, the install hook's decision record
under ``$SNAP_DATA``, fleet plans), so keys are kebab-case and versioned with the model.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from hwprobe.profile import ProbeWarning
from snapcommon.model import KebabModel

DeviceClass = Literal["cpu", "gpu", "npu"]
Input = Literal["text", "vision", "audio"]


def _absent(value: Any) -> bool:
    """Left out of the JSON: a ladder's fields on a single model's decision (None or empty), so
    a single model's Decision reads exactly as it did before ladders existed."""
    return value is None or value == ()


def ladder_field(default: Any = None) -> Any:
    """A field only a ladder's decision fills in (left out of the JSON otherwise)."""
    return Field(default=default, exclude_if=_absent)


class MemoryEstimate(KebabModel):
    """Bytes an engine needs at a context size, and what the host has for it."""

    weights: int
    kv_cache: int
    compute: int  # compute buffers
    overhead: int  # runtime and framework overhead
    required: int  # weights + kv-cache + compute + overhead, with headroom applied
    available: int | None  # None: the host's memory for this device is unknown
    pool: Literal["vram", "ram"]  # what it is measured against
    context_size: int


class Serving(KebabModel):
    """How a llama.cpp engine serves (llama-server): slots, context per slot, KV-cache type."""

    slots: int  # parallel sequences decoded in one batch (llama-server -np)
    context_per_slot: int
    kv_cache_type: str  # f16, q8_0...
    flash_attention: bool
    cache_reuse: int  # min reused prompt chunk (llama-server --cache-reuse); 0: off
    kv_cache: int  # bytes of KV cache for all slots
    required: int  # weights + all slots' KV + compute + overhead, with headroom (+ prompt cache)
    why: str
    prompt_cache: int = 0  # bytes of llama-server's prompt cache (--cache-ram); 0: off

    def summary(self) -> str:
        """One line for `select`, `why` and `status`."""
        reuse = (
            f"prompt-cache reuse from {self.cache_reuse} tokens"
            if self.cache_reuse
            else ("no prompt-cache reuse")
        )
        cache = (
            f"{self.prompt_cache >> 20} MiB prompt cache"
            if self.prompt_cache
            else "no prompt cache"
        )
        return (
            f"{self.slots} parallel slots x {self.context_per_slot} tokens, {self.kv_cache_type} "
            f"KV cache, flash attention {'on' if self.flash_attention else 'off'}, {reuse}, "
            f"{cache} ({self.why})"
        )


# --- concurrent serving (issue 13): OpenVINO continuous batching, ONNX Runtime micro-batching --


class Batching(KebabModel):
    """How the engine serves concurrent requests, planned from the memory fit
    (:mod:`snapbuild.serving.batching`, table ``snapbuild/data/batching.yaml``)."""

    mode: Literal["continuous", "one-at-a-time", "micro-batch"]
    sequences: int  # continuous: generations decoding together; micro-batch: texts per batch
    kv_cache_tokens: int | None = None  # continuous: paged KV cache, tokens over all sequences
    kv_cache: int | None = None  # continuous: its estimated bytes (None: model shape unknown)
    window_ms: float | None = None  # micro-batch: how long requests are gathered
    why: str


# --- end of concurrent serving ---------------------------------------------------------------


class Candidate(KebabModel):
    """One engine judged against one host."""

    engine: str
    runtime: str
    device: DeviceClass
    vendor: str | None = None  # GPU/NPU vendor, or the CPU vendor for CPU engines
    quantization: str
    artifact: str
    experimental: bool = False
    compatible: bool
    reasons: tuple[str, ...]  # every requirement's verdict, passed and failed, in order
    blockers: tuple[str, ...] = ()  # the failed verdicts alone (why-not)
    memory: MemoryEstimate | None = None
    context_size: int | None = None  # chosen context (stepped down to fit), None if none fits
    estimated_tokens_per_second: float | None = None
    rank: int | None = None  # 1 = best; None for incompatible engines
    slot: str | None = None  # PCI slot of the GPU/NPU the engine would use
    serving: Serving | None = None  # llama.cpp engines: the serving configuration
    # what it would serve here: a vision engine whose image encoder does not fit is text only
    inputs: tuple[Input, ...] = ("text",)
    batching: Batching | None = None  # concurrent serving plan (None: not planned here)
    option: str | None = ladder_field()  # a ladder: the model option (size) this engine runs


class Selected(KebabModel):
    """The winning engine, in the shape consumers need to start it."""

    engine: str
    runtime: str
    device: DeviceClass
    vendor: str | None = None
    context_size: int
    artifact: str
    quantization: str
    slot: str | None = None
    why: str  # why it beat the runner-up, or why it is the only one
    serving: Serving | None = None
    inputs: tuple[Input, ...] = ("text",)  # what it serves
    batching: Batching | None = None  # concurrent serving plan (None: not planned here)
    option: str | None = ladder_field()  # a ladder: the model option (size) that serves


class OptionVerdict(KebabModel):
    """One model option of a ladder on one host: what it is, and whether it runs here, was
    chosen, or why not (``<snap> models``, ``snapbuild select``)."""

    option: str
    title: str | None = None
    inputs: tuple[Input, ...]  # what the option reads (its capabilities)
    parameters: int | None = None
    size: int  # bytes of the weights it would load (its best engine's, else its smallest)
    fits: bool  # some engine runs it here
    engine: str | None = None  # its best engine here (None: none runs it)
    estimated_tokens_per_second: float | None = None
    selected: bool = False
    reason: str  # why it was chosen, why it lost, or why it cannot run


class Decision(KebabModel):
    """Everything the selector concluded for one manifest on one host."""

    model: str
    selected: Selected | None
    candidates: tuple[Candidate, ...]
    warnings: tuple[ProbeWarning, ...] = ()
    precedence: tuple[str, ...] = ()  # the ranking keys, most important first, for the record
    options: tuple[OptionVerdict, ...] = ladder_field(())  # a ladder: every option, best first

    def candidate(self, engine: str, option: str | None = None) -> Candidate | None:
        """The candidate for ``engine`` (running ``option``, in a ladder), or None."""
        return next((c for c in self.candidates if c.engine == engine and c.option == option), None)

    def winner(self) -> Candidate | None:
        """The selected engine's candidate (None when nothing was selected)."""
        sel = self.selected
        return self.candidate(sel.engine, sel.option) if sel else None

    def no_fit_candidates(self) -> tuple[Candidate, ...]:
        """The candidates whose blockers say why nothing runs: a single model's every engine; a
        ladder's smallest option's (what stops the smallest stops every larger one too)."""
        if not self.options:
            return self.candidates
        smallest = self.options[-1].option
        return tuple(c for c in self.candidates if c.option == smallest)

    def option_verdict(self, option: str) -> OptionVerdict | None:
        """What the selector concluded about ladder option ``option``, or None."""
        return next((o for o in self.options if o.option == option), None)

    def to_json(self, *, indent: int | None = 2) -> str:
        """The JSON contract of ``snapbuild select --json``."""
        return json.dumps(self.to_data(), indent=indent)
