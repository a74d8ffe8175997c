"""The one reader of GGUF headers: metadata values, vocabulary and tensors, by the ``gguf``
package's memory-mapped reader (nothing but the header is read).

Three places need a GGUF's metadata: the chat template choice (here in ``runtimes``), the
memory estimate and ``snapbuild new``/``validate`` (in ``snapbuild``). They read it through this
class, so a file is opened, checked and reported on the same way everywhere: a per-layer value
means the same thing, and a malformed field is an absent one for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapcommon.errors import UsageError, optional_module

GGUF_MAGIC = b"GGUF"
TOKENS_KEY = "tokenizer.ggml.tokens"
MERGES_KEY = "tokenizer.ggml.merges"


def is_gguf(path: Path) -> bool:
    """Whether ``path`` starts with the GGUF magic."""
    with path.open("rb") as fh:
        return fh.read(4) == GGUF_MAGIC


def _first_bytes(path: Path) -> bytes:
    with path.open("rb") as fh:
        return fh.read(4)


@dataclass(frozen=True)
class GgufFile:
    """A GGUF file's header, open for reading values (``gguf.GGUFReader`` underneath)."""

    path: Path
    reader: Any

    @classmethod
    def open(cls, path: Path) -> GgufFile:
        """Open ``path``; :class:`UsageError` says what is wrong when it is no GGUF."""
        gguf = optional_module("gguf", "reading GGUF files")
        try:
            head = _first_bytes(path)
        except FileNotFoundError:
            raise UsageError(
                f"no such file: {path}", resolution="give the path of a .gguf file"
            ) from None
        except OSError as exc:
            raise UsageError(
                f"cannot read {path}", details=str(exc), resolution="give the path of a .gguf file"
            ) from None
        if head != GGUF_MAGIC:
            raise UsageError(
                f"{path} is not a GGUF file",
                details=f"it starts with {head!r}, not {GGUF_MAGIC!r}",
                resolution="give a model file in GGUF format (llama.cpp's convert_hf_to_gguf.py "
                "writes one)",
            )
        try:
            return cls(path, gguf.GGUFReader(str(path), "r"))
        except Exception as exc:
            raise UsageError(
                f"{path} is not a readable GGUF file",
                details=str(exc),
                resolution="the file may be truncated: download it again",
            ) from None

    def value(self, key: str) -> Any:
        """The value of metadata ``key`` (a list for arrays); None when absent or malformed."""
        item = self.reader.fields.get(key)
        if item is None:
            return None
        try:
            return item.contents()
        except Exception:  # a malformed field is an absent one
            return None

    def integer(self, key: str) -> int | None:
        """An integer value; a per-layer list gives its largest (what memory is sized for)."""
        value = self.value(key)
        if value is None:
            return None
        if isinstance(value, list):
            return max(int(v) for v in value) if value else None
        return int(value)

    def text(self, key: str) -> str | None:
        """A non-blank string value, else None."""
        value = self.value(key)
        return value if isinstance(value, str) and value.strip() else None

    def architecture(self) -> str:
        """``general.architecture``, which every other model key is prefixed with."""
        arch = self.value("general.architecture")
        if not isinstance(arch, str):
            raise UsageError(
                f"{self.path} has no general.architecture metadata",
                resolution="convert the model with a current llama.cpp convert_hf_to_gguf.py",
            )
        return arch

    def has(self, key: str) -> bool:
        return key in self.reader.fields

    def token_count(self) -> int | None:
        """How many tokens the vocabulary holds; None without a tokenizer."""
        tokens = self.reader.fields.get(TOKENS_KEY)
        return len(tokens.data) if tokens is not None else None

    def merge_count(self) -> int:
        """How many BPE merges the tokenizer has (0 without any)."""
        merges = self.reader.fields.get(MERGES_KEY)
        return len(merges.data) if merges is not None else 0

    def token_lengths(self) -> list[int]:
        """Each token's length in bytes (llama.cpp stores long ones on the heap)."""
        tokens = self.reader.fields.get(TOKENS_KEY)
        return [len(tokens.parts[i]) for i in tokens.data] if tokens is not None else []

    def vocabulary(self) -> frozenset[str]:
        """The tokens as a set (for "is this marker one token?")."""
        tokens = self.value(TOKENS_KEY)
        return frozenset(str(t) for t in tokens) if isinstance(tokens, list) else frozenset()

    @property
    def tensors(self) -> list[Any]:
        return list(self.reader.tensors)
