"""Which chat template a GGUF model gets, decided once for every serving path.

A chat request is only as good as its prompt format. The order is: a template the packager put in
the manifest (``model.chat-template``), else the GGUF's own ``tokenizer.chat_template``, else the
template of the model's family from ``runtimes/chat_templates.yaml`` when the model's vocabulary
has that family's markers, else none: chat is refused (a 400) and completions keep working. A
generic fallback is never used, because a template whose markers the tokenizer does not know
teaches the model to echo them (the ``<|im_end|>`` at the end of a base Gemma's answer).

Both llama.cpp paths (the in-process adapter and a llama-server launcher) call
:func:`choose_template`; ``snapbuild validate`` and ``snapbuild new`` call it on the file's
metadata so the packager hears about it before the snap is built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, model_validator

from runtimes.gguf_file import GgufFile
from snapcommon.errors import UsageError
from snapcommon.model import KebabModel, repeated

DATA = Path(__file__).with_name("chat_templates.yaml")
TEMPLATE_KEY = "tokenizer.chat_template"

TemplateSource = Literal["manifest", "gguf", "family", "none"]


class Family(KebabModel):
    """One family's template and the markers its tokenizer must know."""

    name: str
    architectures: tuple[str, ...] = ()  # empty: any architecture
    tokens: tuple[str, ...] = Field(min_length=1)
    stop: tuple[str, ...] = ()
    template: str

    @model_validator(mode="after")
    def _markers(self) -> Family:
        """The template writes every marker it is chosen for, and the stop strings are markers
        (so a stop never cuts an answer at a plain word)."""
        unused = [t for t in self.tokens if t not in self.template]
        if unused:
            raise ValueError(f"{self.name}: the template never writes {', '.join(unused)}")
        strays = [t for t in self.stop if t not in self.tokens]
        if strays:
            raise ValueError(f"{self.name}: stop strings {', '.join(strays)} are not its tokens")
        return self


class TemplateTable(KebabModel):
    """The whole of ``runtimes/chat_templates.yaml``."""

    schema_version: Literal[1]
    families: tuple[Family, ...] = Field(min_length=1)  # first match wins

    @model_validator(mode="after")
    def _unique(self) -> TemplateTable:
        twice = repeated(f.name for f in self.families)
        if twice:
            raise ValueError(f"family names listed twice: {', '.join(twice)}")
        return self


@dataclass(frozen=True)
class TemplateChoice:
    """The template to chat with (None: chat is refused), where it came from, and why."""

    template: str | None
    source: TemplateSource
    reason: str
    family: str | None = None
    stop: tuple[str, ...] = ()  # strings that end an answer (a family's markers)

    @property
    def label(self) -> str:
        """Short form for /health and logs: ``gguf``, ``family:gemma``, ``none``..."""
        return f"family:{self.family}" if self.family else self.source


def read_table() -> Any:
    """``chat_templates.yaml`` as plain data (validate it before use)."""
    return yaml.safe_load(DATA.read_text(encoding="utf-8"))


@cache
def families() -> tuple[Family, ...]:
    """The families of ``chat_templates.yaml``, in match order (validated once)."""
    return TemplateTable.model_validate(read_table()).families


def family_for(architecture: str, has_token: Callable[[str], bool]) -> Family | None:
    """The first family that fits ``architecture`` and whose markers are all single tokens."""
    for family in families():
        if family.architectures and architecture not in family.architectures:
            continue
        if all(has_token(t) for t in family.tokens):
            return family
    return None


def choose_template(
    metadata: Mapping[str, Any],
    has_token: Callable[[str], bool],
    supplied: str | None = None,
) -> TemplateChoice:
    """The chat template for a GGUF with ``metadata`` (its key/value pairs) whose vocabulary
    answers ``has_token``; ``supplied`` is the manifest's ``model.chat-template``."""
    if supplied:
        return TemplateChoice(supplied, "manifest", "the manifest's model.chat-template")
    own = metadata.get(TEMPLATE_KEY)
    if isinstance(own, str) and own.strip():
        return TemplateChoice(own, "gguf", f"the GGUF's {TEMPLATE_KEY}")
    arch = str(metadata.get("general.architecture") or "")
    family = family_for(arch, has_token)
    if family is not None:
        return TemplateChoice(
            family.template,
            "family",
            f"the GGUF has no {TEMPLATE_KEY}; using the {family.name} template "
            f"(runtimes/chat_templates.yaml), whose markers {', '.join(family.tokens)} are in "
            "the model's vocabulary",
            family=family.name,
            stop=family.stop,
        )
    names = ", ".join(f.name for f in families())
    return TemplateChoice(
        None,
        "none",
        f"the GGUF has no {TEMPLATE_KEY} and no known family's markers ({names}) are in its "
        f"vocabulary (architecture {arch or 'unknown'}): chat is refused, completions work",
    )


def template_for_file(path: Path, supplied: str | None = None) -> TemplateChoice | None:
    """:func:`choose_template` on a GGUF file's own metadata and vocabulary: what a runtime that
    reads the file itself (llama-server) must be given, or whether chat must be refused. None
    when the file cannot be read here (no ``gguf`` package, not a GGUF): the runtime decides."""
    try:
        gguf = GgufFile.open(path)
    except UsageError:  # absent package, unreadable file: the runtime will say what is wrong
        return None
    return template_for(gguf, supplied)


def template_for(gguf: GgufFile, supplied: str | None = None) -> TemplateChoice:
    """:func:`choose_template` on an open GGUF's metadata and vocabulary."""
    metadata = {key: gguf.value(key) for key in ("general.architecture", TEMPLATE_KEY)}
    return choose_template(metadata, gguf.vocabulary().__contains__, supplied)
