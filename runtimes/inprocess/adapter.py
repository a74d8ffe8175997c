"""The one interface every runtime adapter implements, so the server is the same for all engines.

An adapter owns one loaded model on one device. The server calls it from a single worker thread
(one generation at a time per engine) unless the adapter's ``concurrency`` says it batches
requests itself, so most adapters need not be thread-safe; they must, however,
check the ``cancel`` event between tokens, because that is how a client that hung up stops its
generation. Generation is a stream of :class:`Delta` objects whose last one carries the finish
reason and exact token usage; a non-streaming answer is the same stream, collected.
"""

from __future__ import annotations

import importlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Literal

from runtimes.engine import Capability, LoadOptions, Modality
from snapcommon.errors import SnapbuildError

FinishReason = Literal["stop", "length", "cancelled"]


class UnsupportedError(SnapbuildError):
    """The engine cannot do what was asked (embeddings from a chat-only runtime, say)."""


@dataclass(frozen=True)
class Message:
    """One chat message, reduced to plain text and the bytes of its checked images (only
    engines that take images receive any: runtimes.gateway.images refuses them for the others)."""

    role: str
    content: str
    images: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class SamplingParams:
    """OpenAI sampling parameters, normalised. ``None`` means the runtime's default."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    ignore_eos: bool = False  # keep generating past end-of-sequence (benchmarks: equal lengths)


@dataclass(frozen=True)
class Usage:
    """Token counts of one request."""

    prompt_tokens: int
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Delta:
    """A piece of generated text; the last delta of a stream has ``finish_reason`` and usage."""

    text: str
    finish_reason: FinishReason | None = None
    usage: Usage | None = None


@dataclass(frozen=True)
class Embeddings:
    """Vectors for a batch of texts, in input order, and the tokens they used."""

    vectors: list[list[float]]
    prompt_tokens: int


class RuntimeAdapter(ABC):
    """A loaded model behind the uniform API. Subclasses set ``capabilities``."""

    capabilities: frozenset[Capability] = frozenset()

    def __init__(self, options: LoadOptions) -> None:
        self.options = options
        self.notes: list[str] = []  # what the runtime chose differently from what was asked

    # lifecycle ---------------------------------------------------------------------------
    @abstractmethod
    def load(self) -> None:
        """Load the artifact; raise :class:`RuntimeFailure` with a clear message on failure."""

    def warm_up(self) -> None:
        """Run one tiny request end to end, so /health only says ok once inference works."""
        if "chat" in self.capabilities or "completion" in self.capabilities:
            cancel = threading.Event()
            for _ in self.complete("Hello", SamplingParams(max_tokens=1, seed=0), cancel):
                pass
        elif "embeddings" in self.capabilities:
            self.embed(["Hello"])

    def close(self) -> None:  # noqa: B027 - optional hook, most runtimes free on collection
        """Free the model (default: nothing; the runtime frees it when collected)."""

    @property
    def inputs(self) -> tuple[Modality, ...]:
        """What it takes in (default: text only; a vision pipeline adds ``"vision"``)."""
        return ("text",)

    @property
    def concurrency(self) -> int:
        """How many requests the server may hand this adapter at once (default 1: the adapter
        is not thread-safe). Batching adapters answer more and take concurrent calls."""
        return 1

    def metrics(self) -> dict[str, float]:
        """Figures for ``GET /metrics`` (default: none); names are documented in
        docs/serving.md."""
        return {}

    # inference ---------------------------------------------------------------------------
    def chat(
        self, messages: Sequence[Message], params: SamplingParams, cancel: threading.Event
    ) -> Iterator[Delta]:
        """Stream a reply to ``messages`` using the model's own chat template."""
        raise UnsupportedError(f"the {self.options.runtime} engine does not chat")

    def complete(
        self, prompt: str, params: SamplingParams, cancel: threading.Event
    ) -> Iterator[Delta]:
        """Stream a continuation of ``prompt``."""
        raise UnsupportedError(f"the {self.options.runtime} engine does not complete text")

    def embed(self, texts: Sequence[str]) -> Embeddings:
        """Embed ``texts``."""
        raise UnsupportedError(
            f"the {self.options.runtime} engine does not compute embeddings",
            resolution="use an engine whose runtime lists the 'embeddings' capability",
        )

    @property
    def gathers(self) -> bool:
        """Whether embedding calls join batches that a worker thread of the adapter runs (then
        the server awaits :meth:`embed_later` on its event loop instead of parking a thread per
        request, which on a loaded CPU costs more than the request). Default: no."""
        return False

    def embed_later(self, texts: Sequence[str]) -> Future[Embeddings]:
        """Queue ``texts`` for the next batch without blocking; the future holds their
        embeddings (only where :attr:`gathers`)."""
        raise UnsupportedError(f"the {self.options.runtime} engine does not gather batches")

    # accounting --------------------------------------------------------------------------
    @abstractmethod
    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes as a raw prompt (for context-overflow checks)."""

    def count_chat_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens the templated conversation takes (default: the sum plus a per-message margin)."""
        return sum(self.count_tokens(m.content) + 4 for m in messages) + 2

    def describe(self) -> dict[str, Any]:
        """What is loaded, where, and any fallback the runtime made (shown in /health)."""
        return {
            "runtime": self.options.runtime,
            "artifact": str(self.options.artifact),
            "device": self.options.device,
            "context-size": self.options.context_size,
            "threads": self.options.threads,
            "capabilities": sorted(self.capabilities),
            "notes": list(self.notes),
        }


def adapter_class(runtime_id: str) -> type[RuntimeAdapter]:
    """The adapter class the runtime catalog names for ``runtime_id``."""
    from runtimes.catalog import load_catalog

    entry = load_catalog().get(runtime_id)
    if entry is None:
        known = ", ".join(load_catalog().ids)
        raise SnapbuildError(
            f"unknown runtime {runtime_id!r}",
            details=f"known runtimes: {known}",
            resolution="fix the engine's 'runtime' in the manifest",
            exit_code=2,
        )
    module_name, _, class_name = entry.adapter.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SnapbuildError(
            f"the {runtime_id} runtime is not installed ({exc})",
            resolution="install snapbuild with the runtime's extra, e.g. "
            "pip install 'snapbuild[llamacpp]', 'snapbuild[openvino]' or 'snapbuild[onnxruntime]'",
        ) from exc
    cls: type[RuntimeAdapter] = getattr(module, class_name)
    return cls


def finish_usage(prompt_tokens: int, completion_tokens: int) -> Usage:
    """Shorthand for the last delta's usage."""
    return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)


class StopMatcher:
    """Hold back text that may be the start of a stop string; report when one is complete.

    Runtimes emit text piece by piece, and a stop string can span pieces; the API must never
    show any part of a stop string, so text that could still become one is held until it
    cannot.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.pending = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """Return (text safe to emit, whether a stop string was hit)."""
        self.pending += text
        if not self.stops:
            out, self.pending = self.pending, ""
            return out, False
        hits = [(self.pending.find(s), s) for s in self.stops if s in self.pending]
        if hits:
            index = min(i for i, _ in hits)
            out, self.pending = self.pending[:index], ""
            return out, True
        keep = 0
        for stop in self.stops:
            for size in range(min(len(stop) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(stop[:size]):
                    keep = max(keep, size)
                    break
        cut = len(self.pending) - keep
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out, False

    def flush(self) -> str:
        """Text still held when generation ended without a stop string."""
        out, self.pending = self.pending, ""
        return out
