"""The one reader of GGUF headers: metadata values, vocabulary and tensors, by the ``gguf``
package's memory-mapped reader, bounded (:mod:`runtimes.gguf_bounds`: nothing but the header is
read, and no count in it is trusted beyond the bytes that remain).

Three places need a GGUF's metadata: the chat template choice (here in ``runtimes``), the
memory estimate and ``snapbuild new``/``validate`` (in ``snapbuild``). They read it through this
class, so a file is opened, checked and reported on the same way everywhere: a per-layer value
means the same thing, a malformed field is an absent one for all of them, and a number that
cannot be right (NaN, a string, zero layers, 2^62 layers) is a user error naming the key rather
than a crash or an endless loop further on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapcommon.errors import UsageError, optional_module

GGUF_MAGIC = b"GGUF"
TOKENS_KEY = "tokenizer.ggml.tokens"
MERGES_KEY = "tokenizer.ggml.merges"
INT32_MAX = (1 << 31) - 1
MAX_LISTED = 1 << 21  # values of one array turned into a Python list (a vocabulary fits)
REPAIR = (
    "the file's metadata is damaged or was written by a broken converter: download it again, "
    "or convert the model again with llama.cpp's convert_hf_to_gguf.py"
)


@dataclass(frozen=True)
class Whole:
    """The whole numbers a metadata key may hold, and why that range."""

    low: int
    high: int = INT32_MAX
    why: str = "llama.cpp keeps these in 32-bit integers"


# Keys by their name after ``<arch>.`` (or whole, for general.*); any other integer key: DEFAULT.
NUMBER_RULES: dict[str, Whole] = {
    "block_count": Whole(1, 512, "llama.cpp's LLAMA_MAX_LAYERS"),
    "attention.sliding_window": Whole(0),  # 0: no sliding window
    "general.file_type": Whole(0),
}
DEFAULT_RULE = Whole(1)
INTEGER_TYPES = frozenset(range(0, 6)) | {10, 11}  # GGUF UINT8..INT32, UINT64, INT64
STRING_TYPE, ARRAY_TYPE = 8, 9


def _element_count(field: Any) -> int:
    """How many values a field's contents would list (1 for a scalar or a string)."""
    if int(field.types[0]) != ARRAY_TYPE:
        return 1
    if int(field.types[-1]) == STRING_TYPE:
        return len(field.data)
    return sum(int(field.parts[i].size) for i in field.data)


def is_gguf(path: Path) -> bool:
    """Whether ``path`` starts with the GGUF magic."""
    with path.open("rb") as fh:
        return fh.read(4) == GGUF_MAGIC


def _first_bytes(path: Path) -> bytes:
    with path.open("rb") as fh:
        return fh.read(4)


def _check_head(path: Path) -> None:
    """A readable file that starts with the magic; else a :class:`UsageError` saying what."""
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


@dataclass(frozen=True)
class GgufFile:
    """A GGUF file's header, open for reading values (a bounded ``gguf.GGUFReader``)."""

    path: Path
    reader: Any

    @classmethod
    def open(cls, path: Path) -> GgufFile:
        """Open ``path``; :class:`UsageError` says what is wrong when it is no GGUF, a damaged
        one, or one past a limit (:data:`runtimes.gguf_bounds.LIMITS` names them)."""
        optional_module("gguf", "reading GGUF files")
        _check_head(path)
        from runtimes.gguf_bounds import BoundedReader

        try:
            return cls(path, BoundedReader(path))
        except Exception as exc:  # the package raises ValueError, KeyError, ...: all the file's
            raise UsageError(
                f"{path} is not a readable GGUF file",
                details=str(exc) or type(exc).__name__,
                resolution="the file may be truncated or damaged: download it again",
            ) from None

    def _bad(self, key: str, value: Any, rule: Whole) -> UsageError:
        shown = repr(value) if not isinstance(value, list) else f"a list of {len(value)} values"
        return UsageError(
            f"{self.path.name} has a bad number in {key}: {shown}",
            details=f"{self.path}: expected a whole number from {rule.low} to {rule.high} "
            f"({rule.why})",
            resolution=REPAIR,
        )

    def value(self, key: str) -> Any:
        """The value of metadata ``key`` (a list for arrays); None when absent or malformed."""
        item = self.reader.fields.get(key)
        if item is None:
            return None
        if _element_count(item) > MAX_LISTED:
            raise UsageError(
                f"{self.path.name}: {key} holds more than {MAX_LISTED} values",
                details="snapbuild reads at most that many values of one metadata key",
                resolution=REPAIR,
            )
        try:
            return item.contents()
        except Exception:  # a malformed field is an absent one
            return None

    def integer(self, key: str) -> int | None:
        """A whole number within the key's rule (:data:`NUMBER_RULES`); a per-layer list gives
        its largest (what memory is sized for). None when absent; a :class:`UsageError`
        naming the key for a float, a string, or a number out of range."""
        item = self.reader.fields.get(key)
        if item is None:
            return None
        rule = NUMBER_RULES.get(key.partition(".")[2]) or NUMBER_RULES.get(key) or DEFAULT_RULE
        value = self.value(key)
        if int(item.types[-1]) not in INTEGER_TYPES or value is None:
            raise self._bad(key, value, rule)
        if int(item.types[0]) == ARRAY_TYPE:
            return self._per_layer(key, value, rule)
        if not rule.low <= int(value) <= rule.high:
            raise self._bad(key, value, rule)
        return int(value)

    def _per_layer(self, key: str, values: list[int], rule: Whole) -> int:
        """A per-layer list: at most llama.cpp's layers, each 0 (layer without it) up to the
        rule's top, the largest at least the rule's bottom."""
        layers = NUMBER_RULES["block_count"]
        if not values or len(values) > layers.high:
            raise self._bad(key, values, rule)
        largest = max(int(v) for v in values)
        if min(int(v) for v in values) < 0 or not rule.low <= largest <= rule.high:
            raise self._bad(key, values, rule)
        return largest

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
