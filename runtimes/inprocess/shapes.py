"""The OpenAI shapes of an in-process generation: the whole answer, or its event stream.

They are the shapes llama-server's relay sends (:mod:`runtimes.llamaserver.relay`), so a client
cannot tell which engine answered; kept apart from :mod:`runtimes.inprocess.engine`, which
queues the work and checks what the adapter can do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

from runtimes.gateway.errors import ApiError
from runtimes.gateway.metrics import Metrics
from runtimes.gateway.sse import DONE, KEEPALIVE_S, TokenClock, event
from runtimes.inprocess.adapter import Delta, UnsupportedError, Usage

log = logging.getLogger("snapbuild.runtimes.local")


def finish(last: Delta) -> tuple[str, Usage]:
    """The finish reason and usage the last delta carries (a cancelled generation reports
    ``stop``: OpenAI has no other word for it)."""
    usage = last.usage or Usage(prompt_tokens=0)
    reason = last.finish_reason if last.finish_reason in ("stop", "length") else "stop"
    return reason, usage


def usage_data(usage: Usage) -> dict[str, int]:
    """OpenAI's ``usage`` object."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def whole(
    model: str, ident: str, created: int, pieces: Sequence[Delta], chat: bool
) -> dict[str, Any]:
    """The non-streamed answer: every delta's text, the last one's finish reason and usage."""
    text = "".join(p.text for p in pieces)
    reason, usage = finish(pieces[-1])
    if chat:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "refusal": None},
            "logprobs": None,
            "finish_reason": reason,
        }
        kind = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
        kind = "text_completion"
    return {
        "id": ident,
        "object": kind,
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage_data(usage),
    }


class Stream:
    """The SSE body of an in-process generation, in the shapes llama-server's relay sends."""

    def __init__(
        self,
        metrics: Metrics,
        model: str,
        ident: str,
        created: int,
        chat: bool,
        include_usage: bool,
        started: float,
    ) -> None:
        self.metrics = metrics
        self.model = model
        self.ident = ident
        self.created = created
        self.chat = chat
        self.include_usage = include_usage
        self.clock = TokenClock(metrics, started)

    def chunk(self, choices: list[dict[str, Any]], usage: Usage | None = None) -> bytes:
        data: dict[str, Any] = {
            "id": self.ident,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if usage is not None:
            data["usage"] = usage_data(usage)
        return event(data)

    def piece(self, text: str | None, reason: str | None = None, *, role: bool = False) -> bytes:
        if self.chat:
            delta: dict[str, Any] = {}
            if role:
                delta = {"role": "assistant", "content": ""}
            elif text is not None:
                delta = {"content": text}
            return self.chunk(
                [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]
            )
        return self.chunk(
            [{"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}]
        )

    def timed(self, text: str) -> bytes:
        self.clock.tick()
        return self.piece(text)

    async def events(
        self, first: asyncio.Future[Delta], deltas: AsyncGenerator[Delta, None]
    ) -> AsyncIterator[bytes]:
        """Role chunk (chat), one chunk per delta, a finish chunk, the usage-only chunk when
        asked for (``stream_options.include_usage``), [DONE]; comments while queued."""
        try:
            yield b": connected\n\n"
            while not first.done():
                await asyncio.wait({first}, timeout=KEEPALIVE_S)
                if not first.done():
                    yield b": waiting for the engine\n\n"
            try:
                last = first.result()
            except StopAsyncIteration:
                return
            if self.chat:
                yield self.piece(None, role=True)
            if last.text:
                yield self.timed(last.text)
            async for current in deltas:  # drained to the end: the worker counts it completed
                last = current
                if current.text:
                    yield self.timed(current.text)
            reason, usage = finish(last)
            self.metrics.add_tokens(usage.completion_tokens)
            yield self.piece(None if self.chat else "", reason)
            if self.include_usage:
                yield self.chunk([], usage)
        except ApiError as exc:
            yield event(exc.body())
        except UnsupportedError as exc:
            yield event(ApiError(400, exc.brief).body())
        except Exception as exc:  # the stream has started: report in-band, keep the server up
            log.exception("generation failed mid-stream")
            yield event(ApiError(500, f"generation failed: {exc}", type="server_error").body())
        finally:
            if not first.done():
                first.cancel()
            with contextlib.suppress(Exception):
                await deltas.aclose()
        yield DONE
