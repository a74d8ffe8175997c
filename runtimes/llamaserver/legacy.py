"""OpenAI's legacy completions endpoint over llama-server's native ``/completion``.

llama-server's own ``/v1/completions`` refuses ``echo``, answers ``logprobs`` in the chat shape,
counts usage for one choice of many and names its ids ``chatcmpl-``. Its native endpoint reports
each choice's own counts, stop reason and token probabilities, so the gateway builds OpenAI's
answer from that: ``n`` choices per prompt indexed as OpenAI indexes them (choice ``i * n + j``
is the ``j``-th of prompt ``i``: llama-server numbers its tasks that way), the prompt before the
text with ``echo``, the legacy ``logprobs`` object (``tokens``, ``token_logprobs``,
``top_logprobs``, ``text_offset``, offsets counted from the prompt's start) with the prompt's own
tokens scored when echoed (:mod:`runtimes.llamaserver.scoring`), and ``cmpl-`` ids.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from runtimes.engine import Json
from runtimes.gateway.errors import ApiError
from runtimes.gateway.inputs import Item
from runtimes.llamaserver.scoring import Scored, count_tokens, prompt_text, score
from runtimes.requests import CompletionRequest

MAX_SCORED = 16384  # prompt tokens one request may have scored (one short generation each)
FINISH = {"limit": "length"}  # llama-server's stop types; eos and word are OpenAI's "stop"
DROPPED = ("model", "echo", "stream_options", "logprobs", "n")


@dataclass
class Echo:
    """What each prompt contributes to its choices: its text, where the generated text starts
    (for text offsets) and, when echoed with logprobs, its scored tokens."""

    texts: list[str]
    echo: bool
    scored: list[Scored] | None = None


@dataclass
class Shape:
    """One legacy answer being built: its id, time, model, ``n`` and what was asked for."""

    model_id: str
    n: int
    logprobs: int | None
    prompts: Echo
    ident: str = field(default_factory=lambda: "cmpl-" + uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))
    offsets: dict[int, int] = field(default_factory=dict)  # text offset reached by each choice

    def prompt_of(self, index: int) -> int:
        return index // self.n

    def head(self) -> dict[str, Any]:
        return {
            "id": self.ident,
            "object": "text_completion",
            "created": self.created,
            "model": self.model_id,
        }

    def opening(self, index: int) -> tuple[str, dict[str, Any] | None]:
        """A choice's echoed prompt and its logprobs (empty when not echoed)."""
        prompt = self.prompt_of(index)
        self.offsets[index] = len(self.prompts.texts[prompt])
        if not self.prompts.echo:
            return "", _empty() if self.logprobs is not None else None
        scored = self.prompts.scored
        return self.prompts.texts[prompt], scored[prompt].legacy() if scored else None

    def generated(self, index: int, probabilities: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The legacy logprobs of generated tokens, offsets continuing the choice's text."""
        out = _empty()
        for token in probabilities:
            text = str(token.get("token", ""))
            out["tokens"].append(text)
            out["token_logprobs"].append(float(token.get("logprob", 0.0)))
            alternatives = list(token.get("top_logprobs") or [])[: self.logprobs or 0]
            out["top_logprobs"].append({str(t["token"]): float(t["logprob"]) for t in alternatives})
            out["text_offset"].append(self.offsets.get(index, 0))
            self.offsets[index] = self.offsets.get(index, 0) + len(text)
        return out


def request(payload: Mapping[str, Json], logprobs: int | None) -> dict[str, Any]:
    """The native request for the client's JSON: OpenAI's names llama-server also reads
    (``max_tokens``, ``n``, ``stop``...), with ``echo`` done here and ``logprobs`` as
    ``n_probs``."""
    out: dict[str, Any] = {k: v for k, v in payload.items() if k not in DROPPED}
    out["n_cmpl"] = payload.get("n", 1)
    if isinstance(out.get("stop"), str):
        out["stop"] = [out["stop"]]
    if logprobs is not None:
        out["n_probs"] = max(logprobs, 1)  # 1 at least: the chosen token's own is needed
    out["cache_prompt"] = True
    return out


def whole(shape: Shape, results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The answer from llama-server's results (one per choice)."""
    choices = []
    for result in sorted(results, key=lambda r: int(r.get("index", 0))):
        index = int(result.get("index", 0))
        text, logprobs = shape.opening(index)
        if logprobs is not None:
            _extend(logprobs, shape.generated(index, result.get("completion_probabilities") or []))
        choices.append(_choice(index, text + str(result.get("content", "")), logprobs, result))
    return {**shape.head(), "choices": choices, "usage": usage(shape, results)}


def answer(shape: Shape, data: Any) -> dict[str, Any]:
    """A native answer (one result, or a list for several choices) as a legacy completion."""
    return whole(shape, data if isinstance(data, list) else [data])


def without_generation(shape: Shape, prompt_tokens: Sequence[int]) -> dict[str, Any]:
    """``max_tokens: 0``: each choice is its echoed prompt (or nothing), ended by length."""
    choices = []
    for index in range(len(shape.prompts.texts) * shape.n):
        text, logprobs = shape.opening(index)
        choices.append(
            {"index": index, "text": text, "logprobs": logprobs, "finish_reason": "length"}
        )
    total = sum(prompt_tokens)
    counts = {"prompt_tokens": total, "completion_tokens": 0, "total_tokens": total}
    return {**shape.head(), "choices": choices, "usage": counts}


def usage(shape: Shape, results: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Each prompt counted once (its choices share it), every choice's tokens."""
    firsts = [r for r in results if int(r.get("index", 0)) % shape.n == 0]
    prompt = sum(int(r.get("tokens_evaluated", 0)) for r in firsts)
    completion = sum(int(r.get("tokens_predicted", 0)) for r in results)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}  # fmt: skip


class LegacyShaper:
    """llama-server's native stream events as OpenAI's legacy chunks: a choice's echoed prompt
    first, then its text as it comes, its finish reason, and one usage-only chunk at the end
    when the client asked for it."""

    chat = False

    def __init__(self, answer: Shape, *, want_usage: bool) -> None:
        self.answer = answer
        self.want_usage = want_usage
        self.finals: list[dict[str, Any]] = []
        self.completion_tokens = 0

    def shape(self, upstream: dict[str, Any]) -> list[dict[str, Any]]:
        """Our chunks for one native event: the echo before a choice's first text."""
        index = int(upstream.get("index", 0))
        out = []
        if index not in self.answer.offsets:
            text, logprobs = self.answer.opening(index)
            if text or logprobs is not None and logprobs["tokens"]:
                out.append(self._chunk(index, text, logprobs, None))
        logprobs = None
        if self.answer.logprobs is not None:
            probabilities = upstream.get("completion_probabilities") or []
            logprobs = self.answer.generated(index, probabilities)
        reason = None
        if upstream.get("stop"):
            self.finals.append(upstream)
            self.completion_tokens += int(upstream.get("tokens_predicted", 0))
            reason = _finish(upstream)
        text = str(upstream.get("content", ""))
        if text or reason or logprobs and logprobs["tokens"]:
            out.append(self._chunk(index, text, logprobs, reason))
        return out

    def end(self) -> list[dict[str, Any]]:
        """The usage-only chunk, when asked for."""
        if not self.want_usage:
            return []
        return [{**self.answer.head(), "choices": [], "usage": usage(self.answer, self.finals)}]

    def _chunk(
        self, index: int, text: str, logprobs: dict[str, Any] | None, reason: str | None
    ) -> dict[str, Any]:
        choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": reason}
        return {**self.answer.head(), "choices": [choice]}


def _choice(
    index: int, text: str, logprobs: dict[str, Any] | None, result: Mapping[str, Any]
) -> dict[str, Any]:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": _finish(result)}


def _finish(result: Mapping[str, Any]) -> str:
    return FINISH.get(str(result.get("stop_type")), "stop")


def _empty() -> dict[str, Any]:
    return {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}


def _extend(into: dict[str, Any], more: Mapping[str, list[Any]]) -> None:
    for key, values in more.items():
        into[key].extend(values)


async def prepare(
    client: httpx.AsyncClient,
    body: CompletionRequest,
    prompts: Sequence[Item],
    gone: Callable[[], Awaitable[bool]],
) -> Shape:
    """What the answer needs besides the generation: the prompts' texts (token ids
    detokenized) when echoed or offsets are counted, and their scored tokens when echoed with
    logprobs."""
    needed = body.echo or body.logprobs is not None
    texts = [await prompt_text(client, p) for p in prompts] if needed else [""] * len(prompts)
    scored = None
    if body.echo and body.logprobs is not None:
        counted = sum([await count_tokens(client, p) for p in prompts])
        if counted > MAX_SCORED:
            raise ApiError(
                400,
                f"echo with logprobs scores the prompts' tokens one by one: {counted} tokens are "
                f"more than the {MAX_SCORED} one request may score; send fewer or shorter prompts",
                param="prompt",
                code="too_many_tokens",
            )
        scored = [await score(client, p, body.logprobs, gone) for p in prompts]
    return Shape(body.model, body.n, body.logprobs, Echo(texts, body.echo, scored))


def chunks(answer: Mapping[str, Any], want_usage: bool) -> list[dict[str, Any]]:
    """A whole legacy answer as stream chunks (one per choice; the usage-only chunk when asked
    for): what a stream of ``max_tokens: 0`` sends."""
    head = {k: v for k, v in answer.items() if k not in ("choices", "usage")}
    out = [{**head, "choices": [choice]} for choice in answer["choices"]]
    if want_usage:
        out.append({**head, "choices": [], "usage": answer["usage"]})
    return out
