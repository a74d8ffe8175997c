"""How an engine serves concurrent requests: planned by the selector, recorded in the Decision.

Continuous batching (OpenVINO GenAI) keeps one paged KV cache for every sequence it decodes, so
the number of sequences is a memory question, answered the way the context size is: the
selector first fits one sequence at the largest context it can
(:func:`snapbuild.selection.memory_fit.fit_memory`), then the memory still free holds more
full-context KV caches, one per extra sequence, up to the runtime's useful maximum. Planning the
cache for full-context sequences means a request the server admitted never runs out of KV blocks
mid-answer. The per-runtime rules (mode, limits, why a device cannot batch) are data:
``snapbuild/data/batching.yaml``.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import Field, model_validator

from snapbuild.estimate.common import with_headroom
from snapbuild.selection.decision import Batching, MemoryEstimate
from snapcommon.model import KebabModel
from snapcommon.sizes import memory as gib


class BatchingRule(KebabModel):
    """One runtime's row of the table."""

    mode: Literal["continuous", "one-at-a-time", "micro-batch"]
    max_sequences: int = Field(default=1, ge=1)
    kv_block_tokens: int | None = Field(default=None, gt=0)
    window_ms: float | None = Field(default=None, gt=0)
    why: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> BatchingRule:
        needs = {
            "continuous": ("kv_block_tokens",),
            "micro-batch": ("window_ms",),
            "one-at-a-time": ("why",),
        }[self.mode]
        missing = [name for name in needs if getattr(self, name) is None]
        if missing:
            raise ValueError(f"mode {self.mode} needs {', '.join(missing)}")
        return self


class BatchingTable(KebabModel):
    """``snapbuild/data/batching.yaml``."""

    schema_version: Literal[1]
    unverified_sequences: int = Field(ge=1)
    runtimes: dict[str, BatchingRule]


@cache
def batching_table() -> BatchingTable:
    """The packaged table, validated."""
    text = resources.files("snapbuild").joinpath("data", "batching.yaml").read_text("utf-8")
    return BatchingTable.model_validate(yaml.safe_load(text))


def kv_block_tokens(runtime: str) -> int:
    """Tokens per paged-KV block of a continuous-batching runtime (1 when it has none)."""
    rule = batching_table().runtimes.get(runtime)
    return rule.kv_block_tokens if rule and rule.kv_block_tokens else 1


def plan_batching(
    runtime: str,
    memory: MemoryEstimate | None,
    context: int | None,
    table: BatchingTable | None = None,
) -> Batching | None:
    """The plan for ``runtime`` at the chosen ``context`` (None: the runtime is not in the
    table, or no context fits), by ``table`` (None: the packaged one; the selector passes the
    one it was given)."""
    table = table or batching_table()
    rule = table.runtimes.get(runtime)
    if rule is None or context is None:
        return None
    if rule.mode == "one-at-a-time":
        assert rule.why is not None
        return Batching(mode="one-at-a-time", sequences=1, why=f"one request at a time: {rule.why}")
    if rule.mode == "micro-batch":
        return Batching(
            mode="micro-batch",
            sequences=rule.max_sequences,
            window_ms=rule.window_ms,
            why=f"concurrent requests gathered for up to {rule.window_ms:g} ms and run as one "
            f"batch of at most {rule.max_sequences} texts",
        )
    sequences, why = _sequences(rule, memory, context, table.unverified_sequences)
    kv = memory.kv_cache if memory is not None and memory.kv_cache else None
    return Batching(
        mode="continuous",
        sequences=sequences,
        kv_cache_tokens=sequences * context,
        kv_cache=sequences * kv if kv else None,
        why=why,
    )


def _sequences(
    rule: BatchingRule, memory: MemoryEstimate | None, context: int, unverified: int
) -> tuple[int, str]:
    """How many full-context sequences fit beside the one-sequence fit (``unverified`` when the
    memory to check against is unknown), and why."""
    top = rule.max_sequences
    fallback = min(unverified, top)
    if memory is None or not memory.kv_cache:
        return fallback, (
            f"{fallback} sequences of {context} tokens: the KV cache per sequence is unknown "
            "(model facts lack layers/heads), so memory for more is not verified"
        )
    if memory.available is None:
        return fallback, (
            f"{fallback} sequences of {context} tokens ({gib(fallback * memory.kv_cache)} of KV "
            "cache): device memory unknown, fit not verified"
        )
    spare = max(memory.available - memory.required, 0)
    each = with_headroom(memory.kv_cache)
    extra = spare // each
    sequences = min(top, 1 + extra)
    capped = f", capped at the runtime's {top}" if 1 + extra > top else ""
    return sequences, (
        f"{sequences} sequences of {context} tokens ({gib(sequences * memory.kv_cache)} of KV "
        f"cache): {gib(spare)} free after the one-sequence fit holds {extra} more "
        f"{gib(each)} KV caches{capped}"
    )


def load_options(
    runtime: str, batching: Batching | None, sequences: int | None = None
) -> dict[str, Any]:
    """The :class:`runtimes.inprocess.adapter.LoadOptions` fields that carry ``batching`` to
    ``runtime``'s adapter (none without a plan: the adapter serves one request at a time).

    ``sequences`` is the operator's count (``serve --slots``), which replaces the plan's as
    llama-server's slots do, so one engine can be compared batched and one at a time (1); a
    runtime that cannot batch stays one at a time whatever it says. The KV cache is not passed,
    its block size is: the adapter sizes the cache for ``sequences`` at the context it actually
    serves, which is the plan's ``kv-cache-tokens`` unless ``--context-size`` overrides the
    selector."""
    if batching is None or batching.mode == "one-at-a-time":
        return {}
    count = sequences or batching.sequences
    if count == 1:
        return {}
    options: dict[str, Any] = {"sequences": count}
    if batching.window_ms is not None:
        options["batch_window_ms"] = batching.window_ms
    if batching.mode == "continuous":
        options["kv_block_tokens"] = kv_block_tokens(runtime)
    return options
