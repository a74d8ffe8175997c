"""A prompt's own tokens and their log probabilities, from llama-server: what ``echo`` with
``logprobs`` (and ``max_tokens: 0``) answers on OpenAI's legacy completions endpoint, which is
how evaluation harnesses score a text.

The pinned llama-server reports probabilities only for tokens it generates, never for the
prompt's, and refuses ``echo``. So each prompt token ``t[i]`` is scored by one generation of a
single token after ``t[:i]``, forced to be ``t[i]`` by a logit bias: llama-server reports the
probabilities of the raw logits (before the bias), so the forced token's log probability and the
most likely alternatives are the model's own. The requests go one after another, so each finds
the previous prefix in its slot's cache and decodes one token: a prompt of L tokens costs L - 1
short requests. The first token has no context, so it has no log probability (OpenAI's null).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from runtimes.gateway.errors import ApiError
from runtimes.gateway.inputs import Item
from runtimes.llamaserver.relay import upstream_error
from runtimes.llamaserver.upstream import post

FORCE = 100.0  # the logit bias that makes the scored token the one generated


@dataclass(frozen=True)
class Scored:
    """A prompt's tokens: their text, log probabilities (None for the first) and the most
    likely alternatives at each place."""

    tokens: list[str]
    logprobs: list[float | None]
    top: list[dict[str, float] | None]

    def legacy(self, start: int = 0) -> dict[str, Any]:
        """OpenAI's legacy ``logprobs`` object, the text offsets counted from ``start``."""
        offsets, at = [], start
        for token in self.tokens:
            offsets.append(at)
            at += len(token)
        return {
            "tokens": list(self.tokens),
            "token_logprobs": list(self.logprobs),
            "top_logprobs": list(self.top),
            "text_offset": offsets,
        }


async def prompt_text(client: httpx.AsyncClient, prompt: Item) -> str:
    """The prompt as text (token ids detokenized)."""
    if isinstance(prompt, str):
        return prompt
    data = await _call(client, "/detokenize", {"tokens": prompt})
    return str(data.get("content", ""))


async def count_tokens(client: httpx.AsyncClient, prompt: Item) -> int:
    """How many tokens llama-server evaluates for the prompt (its special tokens included)."""
    if not isinstance(prompt, str):
        return len(prompt)
    return len((await _tokenize(client, prompt, special=True))[0])


async def score(
    client: httpx.AsyncClient, prompt: Item, top: int, gone: Callable[[], Awaitable[bool]]
) -> Scored:
    """The prompt's tokens scored by the model; ``top`` alternatives at each (OpenAI's
    ``logprobs`` value). Stops early, with what it has, when the client hangs up."""
    if isinstance(prompt, str):
        ids, pieces = await _tokenize(client, prompt, special=False)
        full = (await _tokenize(client, prompt, special=True))[0]
        context = full[: len(full) - len(ids)]  # the tokens llama-server adds before the text
    else:
        ids, pieces, context = list(prompt), [], []
        pieces.append(await prompt_text(client, ids[:1]))
    logprobs: list[float | None] = [None]
    tops: list[dict[str, float] | None] = [None]
    for i in range(1, len(ids)):
        if await gone():
            break
        forced = await _forced(client, context + ids[:i], ids[i], max(top, 1))
        logprobs.append(float(forced["logprob"]))
        tops.append({t["token"]: float(t["logprob"]) for t in forced["top_logprobs"][:top]})
        if len(pieces) <= i:
            pieces.append(str(forced["token"]))
    return Scored(pieces[: len(logprobs)], logprobs, tops)


async def _forced(
    client: httpx.AsyncClient, context: list[int], token: int, top: int
) -> dict[str, Any]:
    body = {
        "prompt": context,
        "n_predict": 1,
        "n_probs": top,
        "temperature": 0,
        "logit_bias": [[token, FORCE]],
        "cache_prompt": True,
    }
    data = await _call(client, "/completion", body)
    probabilities = data.get("completion_probabilities") or []
    if not probabilities or probabilities[0].get("id") != token:
        raise ApiError(500, "llama-server did not score the prompt's token", type="server_error")
    found: dict[str, Any] = probabilities[0]
    return found


async def _tokenize(
    client: httpx.AsyncClient, text: str, *, special: bool
) -> tuple[list[int], list[str]]:
    body = {"content": text, "add_special": special, "with_pieces": True}
    tokens = (await _call(client, "/tokenize", body)).get("tokens") or []
    ids = [int(t["id"]) for t in tokens]
    return ids, [_piece(t["piece"]) for t in tokens]


def _piece(piece: str | list[int]) -> str:
    """A token's text; a piece that is not whole UTF-8 comes as its bytes."""
    return piece if isinstance(piece, str) else bytes(piece).decode("utf-8", "replace")


async def _call(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await post(client, path, body)
    if response.status_code >= 400:
        raise upstream_error(response.status_code, response.content, chat=False, param="prompt")
    data: dict[str, Any] = response.json()
    return data
