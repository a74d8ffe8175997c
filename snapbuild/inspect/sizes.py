"""Model files of several sizes of one family, sorted into the options of a ladder.

``snapbuild new`` given ``gemma-3-1b-it-Q4_K_M.gguf gemma-3-4b-it-Q4_K_M.gguf
gemma-3-4b-it-Q8_0.gguf`` should write one snap with two sizes, not refuse the files as
different models: files whose facts agree (but for the parameter count a quantization changes)
are one size, several quantizations of it; sizes are one family when they share architecture,
kind and vocabulary (one tokenizer, one chat template). What the sizes share becomes the
family's ``model:``; what differs, each option's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from snapbuild.inspect.gguf import FileFacts
from snapcommon.errors import UsageError

# what a quantization changes (the parameter count read from tensors may count differently)
_PER_FILE = ("parameters",)
# what every size of one family shares: one tokenizer, one template, one architecture
_FAMILY = ("architecture", "vocab_size")


def _shape(facts: FileFacts) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, v) for k, v in facts.facts.items() if k not in _PER_FILE))


def group_sizes(files: Sequence[FileFacts]) -> list[list[int]]:
    """Indices of ``files`` grouped by size (same facts), the largest size first; within a size,
    in the order given. Raises when two sizes are not one family."""
    groups: dict[tuple[tuple[str, Any], ...], list[int]] = {}
    for i, facts in enumerate(files):
        groups.setdefault(_shape(facts), []).append(i)
    ordered = sorted(groups.values(), key=lambda g: -_parameters(files[g[0]]))
    lead = files[0]  # what the others are compared with: the first file given
    for group in groups.values():
        other = files[group[0]]
        for key in _FAMILY:
            mine, theirs = lead.facts.get(key), other.facts.get(key)
            if mine != theirs:
                raise UsageError(
                    f"{other.path.name} is not the same model as {lead.path.name}",
                    details=f"{key}: {mine!r} in {lead.path.name}, {theirs!r} in "
                    f"{other.path.name}; sizes of one family share architecture and vocabulary",
                    resolution="give quantizations or sizes of one model family, or run `new` "
                    "once per model",
                )
        if other.kind != lead.kind:
            raise UsageError(
                f"{other.path.name} is a {other.kind} model, {lead.path.name} a {lead.kind} one",
                resolution="give sizes of one model family, or run `new` once per model",
            )
    return ordered


def _parameters(facts: FileFacts) -> int:
    return int(facts.facts.get("parameters") or 0)


def option_name(facts: FileFacts, taken: set[str]) -> str:
    """A short name for a size: its parameter count in the unit that reads best (``270m``,
    ``4b``, ``12b``), made unique against ``taken``."""
    count = _parameters(facts)
    unit, scale = next(
        ((u, s) for u, s in (("b", 1e9), ("m", 1e6), ("k", 1e3)) if count >= s), ("p", 1)
    )
    name = f"{round(count / scale)}{unit}"
    if name in taken:
        name = next(f"{name}-{n}" for n in range(2, len(taken) + 3) if f"{name}-{n}" not in taken)
    return name


def split_facts(sizes: Sequence[FileFacts]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(what every size shares, what each size has of its own): the family's ``model:`` and
    each option's. An option restates the architecture, so its facts stand on their own."""
    keys = [k for k in sizes[0].facts if k not in _PER_FILE]
    shared = {
        k: sizes[0].facts[k]
        for k in keys
        if all(s.facts.get(k) == sizes[0].facts[k] for s in sizes)
    }
    own = [
        {"architecture": s.facts["architecture"]}
        | {k: v for k, v in s.facts.items() if k not in shared or k in _PER_FILE}
        for s in sizes
    ]
    return shared, own
