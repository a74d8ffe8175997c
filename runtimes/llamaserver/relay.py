"""llama-server's answers as OpenAI's: whole responses, stream events and errors.

Each event is adjusted to OpenAI's published shapes by a :class:`Shaper` (:class:`ChatShaper`
here; emulated tools and legacy completions have their own): our model id, ``logprobs: null`` and
``message.refusal: null`` present, no ``"role": null``, usage only where OpenAI puts it (one
usage-only chunk at the end, summed over the choices, and only when
``stream_options.include_usage`` asked for it), llama.cpp's debugging fields dropped. The
:class:`Relay` carries the events: the stream itself comes from
:mod:`runtimes.llamaserver.upstream`, and everything that arrived together leaves as one write: on
a 2-core machine each wake-up of the gateway is taken from llama-server's own threads.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol

from runtimes.gateway.errors import ApiError
from runtimes.gateway.sse import DONE, KEEPALIVE_S, SseEvents, TokenClock, event, loads
from runtimes.llamaserver.upstream import Stream

if TYPE_CHECKING:
    from runtimes.gateway.metrics import Metrics

DROPPED = ("timings", "__verbose", "prompt_progress")
ERROR_CODES = {
    "exceed_context_size_error": "context_length_exceeded",
    "not_supported_error": "unsupported_parameter",
    "unavailable_error": "model_not_ready",
    "invalid_request_error": "invalid_value",
}


class Shaper(Protocol):
    """Turns llama-server's stream events into ours."""

    chat: bool  # chat chunks (else completions): which shape an error takes
    completion_tokens: int  # generated so far, for /metrics

    def shape(self, upstream: dict[str, Any]) -> list[dict[str, Any]]:
        """Our events for one of llama-server's."""
        ...

    def end(self) -> list[dict[str, Any]]:
        """Our events once llama-server's stream has ended (the usage-only chunk)."""
        ...


class ChatShaper:
    """llama-server's OpenAI-compatible chunks in OpenAI's published shapes. With ``n`` > 1
    llama-server sends a usage-only chunk per choice; OpenAI sends one, so usage is summed
    (the prompt counted once) and sent at the end, when the client asked for it."""

    def __init__(self, model_id: str, *, want_usage: bool, chat: bool = True) -> None:
        self.model_id = model_id
        self.want_usage = want_usage
        self.chat = chat
        self.completion_tokens = 0
        self.prompt_tokens = 0
        self.last: dict[str, Any] | None = None  # the latest usage-only chunk

    def shape(self, upstream: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for item in fix_chunk(upstream, self.model_id, chat=self.chat):
            if "usage" in item and not item.get("choices"):
                usage = item["usage"] or {}
                self.completion_tokens += int(usage.get("completion_tokens", 0))
                self.prompt_tokens = max(self.prompt_tokens, int(usage.get("prompt_tokens", 0)))
                self.last = item
            else:
                out.extend(self.reshape(item))
        return out

    def reshape(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """One chunk with choices as ours (a subclass rewrites its deltas)."""
        return [chunk]

    def end(self) -> list[dict[str, Any]]:
        if not self.want_usage or self.last is None:
            return []
        usage = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }
        return [{**self.last, "usage": usage}]


class Relay:
    """One stream's events, relayed from llama-server as they arrive."""

    def __init__(
        self,
        metrics: Metrics,
        shaper: Shaper,
        sending: asyncio.Future[Stream],
        started: float,
        *,
        done: Callable[[str], None],
    ) -> None:
        self.metrics = metrics
        self.shaper = shaper
        self.sending = sending
        self.clock = TokenClock(metrics, started)
        self.chat = shaper.chat
        self.done = done

    async def events(self) -> AsyncIterator[bytes]:
        outcome = "cancelled"
        response: Stream | None = None
        try:
            if not self.sending.done():
                yield b": connected\n\n"  # headers now, while the request waits for a slot
            while not self.sending.done():
                await asyncio.wait({self.sending}, timeout=KEEPALIVE_S)
                if not self.sending.done():
                    yield b": waiting for a free slot\n\n"
            response = self.sending.result()
            if response.status_code >= 400:
                error = upstream_error(response.status_code, await response.aread(), chat=self.chat)
                yield event(error.body())
                outcome = "failed"
            else:
                async for relayed in self._upstream(response):
                    yield relayed
                outcome = "completed"
        except ApiError as exc:
            yield event(exc.body())
            outcome = "failed"
        except OSError as exc:
            yield event(
                ApiError(503, f"llama-server stopped answering: {exc}", type="server_error").body()
            )
            outcome = "failed"
        finally:
            if not self.sending.done():
                self.sending.cancel()
            if response is not None:
                await response.aclose()
            self.done(outcome)
        yield DONE

    async def _upstream(self, response: Stream) -> AsyncIterator[bytes]:
        """Our events for llama-server's, one write for all that arrived together; the
        shaper's closing events when its stream ends (with [DONE], or without: the native
        endpoint sends none)."""
        events = SseEvents()
        ended = False
        try:
            async for piece in response.pieces():
                out: list[bytes] = []
                for data in events.feed(piece):
                    ended = data == b"[DONE]"
                    if ended:
                        break
                    upstream = loads(data)
                    if not isinstance(upstream, dict):
                        continue  # llama-server sends `data: null` between prompts
                    if "error" in upstream:
                        out.append(event(error_from(upstream["error"], chat=self.chat).body()))
                        yield b"".join(out)
                        return
                    out.extend(self._relayed(self.shaper.shape(upstream)))
                if ended:
                    out.extend(self._relayed(self.shaper.end()))
                if out:
                    yield b"".join(out)
                if ended:
                    return
            closing = self._relayed(self.shaper.end())
            if closing:
                yield b"".join(closing)
        finally:
            self.metrics.add_tokens(self.shaper.completion_tokens)

    def _relayed(self, items: list[dict[str, Any]]) -> list[bytes]:
        """Our SSE events, timing the ones that carry text."""
        out = []
        for item in items:
            if has_text(item):
                self.clock.tick()
            out.append(event(item))
        return out


def has_text(chunk: dict[str, Any]) -> bool:
    """Whether a chunk carries generated text (what the token clock times)."""
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") or {}
        if choice.get("text") or delta.get("content") or delta.get("tool_calls"):
            return True
    return False


def fix_whole(data: dict[str, Any], model_id: str, *, chat: bool) -> None:
    """A whole response in OpenAI's published shape."""
    data["model"] = model_id
    for key in DROPPED:
        data.pop(key, None)
    for choice in data.get("choices", []):
        fix_logprobs(choice, chat=chat)
        if chat:
            message = choice.setdefault("message", {})
            message.setdefault("refusal", None)
            if message.get("content") is None and not message.get("tool_calls"):
                message["content"] = ""


def fix_logprobs(choice: dict[str, Any], *, chat: bool) -> None:
    """``logprobs`` present (null when not asked for); a chat choice's object also has
    ``refusal`` (OpenAI's schema requires both lists)."""
    logprobs = choice.setdefault("logprobs", None)
    if chat and isinstance(logprobs, dict):
        logprobs.setdefault("content", None)
        logprobs.setdefault("refusal", None)


def fix_chunk(event: dict[str, Any], model_id: str, *, chat: bool) -> list[dict[str, Any]]:
    """One upstream stream event as OpenAI chunks: a completion's final event carries usage,
    which OpenAI sends in a separate usage-only chunk."""
    event["model"] = model_id
    for key in DROPPED:
        event.pop(key, None)
    choices = event.get("choices") or []
    for choice in choices:
        fix_logprobs(choice, chat=chat)
        if chat:
            delta = choice.setdefault("delta", {})
            if "role" in delta and delta["role"] is None:
                del delta["role"]
            if "content" in delta and delta["content"] is None and not delta.get("tool_calls"):
                delta["content"] = ""
    usage = event.pop("usage", None) if choices else event.get("usage")
    if choices and usage is not None:
        return [
            event,
            {**{k: v for k, v in event.items() if k != "choices"}, "choices": [], "usage": usage},
        ]
    return [event]


def upstream_error(
    status: int, content: bytes, *, chat: bool = True, param: str | None = None
) -> ApiError:
    try:
        error = json.loads(content).get("error") or {}
    except (ValueError, AttributeError):
        error = {"message": content.decode("utf-8", "replace")[:500]}
    if not isinstance(error, dict):
        error = {"message": str(error)}
    error.setdefault("code", status)
    return error_from(error, chat=chat, param=param)


def error_from(error: dict[str, Any], *, chat: bool, param: str | None = None) -> ApiError:
    """llama-server's error object as ours: its status, our codes, the field named."""
    status = int(error.get("code") or 500) if str(error.get("code", "")).isdigit() else 500
    kind = str(error.get("type") or "")
    message = str(error.get("message") or "llama-server failed")
    code = ERROR_CODES.get(kind)
    if kind == "exceed_context_size_error":
        param = param or ("messages" if chat else "prompt")
        n_ctx = error.get("n_ctx")
        asked = error.get("n_prompt_tokens")
        if n_ctx is not None:
            message = (
                f"This model's maximum context length is {n_ctx} tokens. However, you "
                f"requested {asked} tokens in the {param}. Please reduce the length of the "
                f"{param} or max_tokens."
            )
    elif "too large to process" in message or "exceeds the available context" in message:
        code, status = "context_length_exceeded", 400
    if status == 501:
        status = 400  # what an engine cannot do is the client's 400, naming what was asked
    typ = "invalid_request_error" if status < 500 else "server_error"
    if status == 503:
        typ = "service_unavailable"
    return ApiError(status, message, type=typ, param=param, code=code)
