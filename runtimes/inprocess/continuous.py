"""Continuous batching for OpenVINO GenAI: one engine thread steps every live request together.

OpenVINO GenAI's ``ContinuousBatchingPipeline`` (paged attention, the engine OpenVINO Model
Server runs) decodes all admitted sequences in one model call per step and admits new ones
between steps, so a request arriving mid-generation starts at the next step instead of waiting
for the others to end. Its handle API (``add_request`` / ``step`` / ``GenerationHandle.read``)
leaves the driving loop to us: this module owns that loop.

Why one thread owns the pipeline: ``step`` is not meant to run concurrently with itself, and
keeping ``add_request``, ``stop`` and ``read`` on the same thread means no pipeline call ever
races another. Clients talk to the loop through queues only: a request is submitted with its own
cancellation check and receives :class:`Piece` items (text, then one final piece with the finish
reason and token count) on its own queue. ``step`` releases the GIL, so the HTTP event loop keeps
serving while the model runs.

Text is detokenized per request by :class:`IncrementalDecoder`, which holds back incomplete
UTF-8 so that a stream's text is ``tokenizer.decode`` of its tokens. (GenAI's ``TextStreamer``
with a Python callback cannot be used: a token that ends inside a multi-byte character reaches
the callback as invalid UTF-8, and the conversion to ``str`` raises.)
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

_IDLE_WAIT_S = 0.5  # how long the idle loop sleeps between checks for shutdown
SWITCH_INTERVAL_S = 0.001  # the GIL switch interval while an engine runs (see __init__)


@dataclass(frozen=True)
class Piece:
    """What a request's queue receives: text, then a last piece with ``done`` set."""

    text: str = ""
    done: bool = False
    finish: str | None = None  # "length", "stop" (end of sequence), "cancelled", "ignored"
    generated: int = 0  # tokens generated in all, on the last piece
    error: BaseException | None = None


@dataclass
class _Request:
    prompt: str
    config: Any
    cancelled: Callable[[], bool]
    abandoned: threading.Event = field(default_factory=threading.Event)
    out: queue.Queue[Piece] = field(default_factory=queue.Queue)
    submitted: float = field(default_factory=time.perf_counter)
    handle: Any = None
    decoder: IncrementalDecoder | None = None
    generated: int = 0
    finish: str | None = None
    first_token_at: float | None = None

    def stopping(self) -> bool:
        """Whether the caller wants this request to end now."""
        return self.abandoned.is_set() or self.cancelled()


class IncrementalDecoder:
    """Text of a growing token sequence, piece by piece, adding up to exactly
    ``tokenizer.decode(all tokens)`` however the tokens arrive.

    Each feed decodes the tokens since the last *ASCII boundary* (emitted text ending in an
    ASCII character: no later byte can change how UTF-8 before it decodes, so decoding can
    restart there) and emits what lies past the text already sent. Text ending in U+FFFD is
    held back: the token may stop inside a multi-byte character the next one completes. The
    window stays short in practice (spaces and punctuation are ASCII).
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._start = 0  # first token of the window (just after an ASCII boundary)
        self._sent = 0  # characters of the window's text already emitted

    def _window(self) -> str:
        text: str = self._tokenizer.decode(self._ids[self._start :])
        return text

    def feed(self, ids: list[int]) -> str:
        """New text once ``ids`` are appended ('' while a character may be incomplete)."""
        self._ids.extend(ids)
        text = self._window()
        if text.endswith("\ufffd"):
            return ""
        return self._emit(text)

    def flush(self) -> str:
        """Whatever is still held back (the stream ended inside a character)."""
        return self._emit(self._window())

    def _emit(self, text: str) -> str:
        new = text[self._sent :]
        self._sent = len(text)
        if text and text[-1] < "\x80":
            self._start, self._sent = len(self._ids), 0
        return new


@dataclass
class EngineStats:
    """Running figures for ``metrics()``; written by the engine thread only."""

    steps: int = 0
    batched_sequences: int = 0  # sum over steps of the sequences each step ran
    last_batch: int = 0
    max_batch: int = 0
    requests: int = 0
    ttft_sum: float = 0.0
    ttft_count: int = 0
    last_ttft: float = 0.0


class ContinuousEngine:
    """Drives a ``ContinuousBatchingPipeline`` for any number of concurrent callers."""

    def __init__(self, pipe: Any, tokenizer: Any) -> None:
        self._pipe = pipe
        self._tokenizer = tokenizer
        self._incoming: deque[_Request] = deque()
        self._wake = threading.Condition()
        self._live: dict[int, _Request] = {}
        self._ids = itertools.count()
        self._closed = False
        self.stats = EngineStats()
        # Between two model steps (each a fraction of a millisecond on small models) the loop
        # needs the GIL briefly; with Python's default 5 ms switch interval it would wait that
        # long behind the HTTP thread at every step. A shorter interval lets it in promptly.
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        self._thread = threading.Thread(target=self._loop, name="openvino-batch", daemon=True)
        self._thread.start()

    # callers ------------------------------------------------------------------------------
    def submit(
        self, prompt: str, config: Any, cancelled: Callable[[], bool]
    ) -> Generator[Piece, None, None]:
        """Start generating ``prompt``; yield its pieces until the last one (``done``).

        Once ``cancelled()`` answers True (or the iterator is closed) this request stops at the
        next step; every other request keeps running. Text that piled up while the caller was
        busy comes as one piece: a stream never falls behind the engine one token at a time.
        """
        request = _Request(prompt, config, cancelled)
        with self._wake:
            if self._closed:
                raise RuntimeError("the OpenVINO batching engine is shut down")
            self._incoming.append(request)
            self._wake.notify()
        try:
            while True:
                piece = _merged(request.out)
                yield piece
                if piece.done:
                    return
        finally:
            request.abandoned.set()  # a consumer that leaves early stops its sequence too
            self._poke()

    def waiting(self) -> int:
        """Requests submitted but not yet handed to the pipeline."""
        return len(self._incoming)

    def running(self) -> int:
        """Requests the pipeline holds (prefilling or decoding)."""
        return len(self._live)

    def close(self) -> None:
        """Stop the loop; requests still live end as cancelled."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout=10)

    def _poke(self) -> None:
        with self._wake:
            self._wake.notify()

    # the engine thread --------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._incoming and not self._live and not self._closed:
                    self._wake.wait(_IDLE_WAIT_S)
                if self._closed:
                    break
                arrived = list(self._incoming)
                self._incoming.clear()
            for request in arrived:
                self._admit(request)
            self._stop_cancelled()
            if not self._live:
                continue
            try:
                if self._pipe.has_non_finished_requests():
                    self._pipe.step()
                    self._count_step()
                self._collect()
            except Exception as exc:  # a failed step fails the requests in it, not the server
                for request in self._live.values():
                    request.out.put(Piece(done=True, error=exc))
                    _quietly_stop(request.handle)
                self._live.clear()
        with self._wake:
            leftover = [*self._live.values(), *self._incoming]
            self._live.clear()
            self._incoming.clear()
        for request in leftover:
            request.out.put(Piece(done=True, finish="cancelled", generated=request.generated))

    def _admit(self, request: _Request) -> None:
        if request.stopping():  # the client left before it started
            request.out.put(Piece(done=True, finish="cancelled"))
            return
        ident = next(self._ids)
        try:
            request.decoder = IncrementalDecoder(self._tokenizer)
            request.handle = self._pipe.add_request(ident, request.prompt, request.config)
        except Exception as exc:
            request.out.put(Piece(done=True, error=exc))
            return
        self._live[ident] = request
        self.stats.requests += 1

    def _stop_cancelled(self) -> None:
        for request in self._live.values():
            if request.finish is None and request.stopping():
                request.finish = "cancelled"
                request.handle.stop()  # frees its KV blocks at the next step; others go on

    def _count_step(self) -> None:
        stats = self.stats
        batch = int(self._pipe.get_metrics().scheduled_requests)
        stats.steps += 1
        stats.batched_sequences += batch
        stats.last_batch = batch
        stats.max_batch = max(stats.max_batch, batch)

    def _collect(self) -> None:
        import openvino_genai

        running = openvino_genai.GenerationStatus.RUNNING
        for ident, request in list(self._live.items()):
            handle = request.handle
            while handle.can_read():
                for output in handle.read().values():
                    self._tokens(request, list(output.generated_ids), output.finish_reason)
            status = handle.get_status()
            if status == running:
                continue
            assert request.decoder is not None
            if tail := request.decoder.flush():
                request.out.put(Piece(text=tail))
            finish = request.finish or _status_finish(status)
            request.out.put(Piece(done=True, finish=finish, generated=request.generated))
            del self._live[ident]

    def _tokens(self, request: _Request, ids: list[int], reason: Any) -> None:
        if ids:
            if request.first_token_at is None:
                request.first_token_at = time.perf_counter()
                ttft = request.first_token_at - request.submitted
                self.stats.ttft_sum += ttft
                self.stats.ttft_count += 1
                self.stats.last_ttft = ttft
            request.generated += len(ids)
            assert request.decoder is not None
            if text := request.decoder.feed(ids):
                request.out.put(Piece(text=text))
        name = getattr(reason, "name", "NONE")
        if request.finish is None and name in ("LENGTH", "STOP"):
            request.finish = "length" if name == "LENGTH" else "stop"


def _merged(out: queue.Queue[Piece]) -> Piece:
    """The next piece, with the text of any pieces already waiting behind it joined in (up to
    and including a last piece, which keeps its finish reason and count)."""
    piece = out.get()
    texts = [piece.text]
    while not piece.done:
        try:
            following = out.get_nowait()
        except queue.Empty:
            break
        texts.append(following.text)
        piece = following
    if len(texts) == 1:
        return piece
    return Piece(
        text="".join(texts),
        done=piece.done,
        finish=piece.finish,
        generated=piece.generated,
        error=piece.error,
    )


def _quietly_stop(handle: Any) -> None:
    with contextlib.suppress(Exception):  # the pipeline already failed: best effort
        handle.stop()


def _status_finish(status: Any) -> str:
    name = getattr(status, "name", str(status))
    return {"FINISHED": "stop", "IGNORED": "ignored"}.get(name, "cancelled")
