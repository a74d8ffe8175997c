"""What a request may ask of the engine, checked before it is forwarded: its prompt and its
``max_tokens`` against the context.

llama-server renders the chat template and tokenizes a prompt in its HTTP thread before it
queues any work, and nothing there notices a client that has left: an 8 MB body of 230,000
one-letter messages kept it busy for 14 CPU-minutes after the client was gone, and three such
requests slowed every other chat 3-10x. The gateway knows enough to refuse such a request at
once with OpenAI's 400 ``context_length_exceeded``, without tokenizing it: no token of the
model's vocabulary is longer than its longest token (``max_token_bytes``, read from the GGUF), so
a text of N UTF-8 bytes is at least N / max_token_bytes tokens, and every chat template writes at
least one token (a role marker) per message. That lower bound plus ``max_tokens`` above the
context per slot cannot fit; anything else is left to the engine, which counts exactly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from runtimes import requests as s
from runtimes.gateway.errors import ApiError
from runtimes.gateway.inputs import items


@dataclass(frozen=True)
class PromptBudget:
    """The context one request may fill, and the vocabulary's longest token in bytes."""

    context: int  # tokens per request (per slot)
    max_token_bytes: int

    def check_chat(self, body: s.ChatCompletionRequest) -> None:
        """Refuse a chat whose messages (and tools) cannot fit with its ``max_tokens``."""
        size = sum(_utf8(m.text()) + _utf8(m.name or "") for m in body.messages)
        if body.tools:
            size += _utf8(json.dumps([t.model_dump(exclude_none=True) for t in body.tools]))
        least = len(body.messages) + -(-size // self.max_token_bytes)
        self._check(least, body.max_completion_tokens or body.max_tokens, "messages")

    def check_completion(self, body: s.CompletionRequest) -> None:
        """Refuse a completion one of whose prompts cannot fit with its ``max_tokens`` (each
        prompt is generated in a slot of its own). Token ids count exactly; a text by its
        lower bound."""
        for prompt in items(body.prompt):
            least = (
                len(prompt)
                if isinstance(prompt, list)
                else -(-_utf8(prompt) // self.max_token_bytes)
            )
            self._check(least, body.max_tokens, "prompt")

    def _check(self, least: int, max_tokens: int | None, param: str) -> None:
        if least + (max_tokens or 0) > self.context:
            raise context_exceeded(self.context, least, max_tokens, param, at_least=True)


def context_exceeded(
    limit: int, prompt_tokens: int, max_tokens: int | None, param: str, *, at_least: bool = False
) -> ApiError:
    """OpenAI's 400 for a request larger than the context, naming the limit and the parts."""
    some = "at least " if at_least else ""
    asked = (
        f"{some}{prompt_tokens + max_tokens} tokens ({some}{prompt_tokens} in the {param}, "
        f"{max_tokens} for the completion)"
        if max_tokens
        else f"{some}{prompt_tokens} tokens in the {param}"
    )
    return ApiError(
        400,
        f"This model's maximum context length is {limit} tokens. However, you requested "
        f"{asked}. Please reduce the length of the {param} or max_tokens.",
        param=param,
        code="context_length_exceeded",
    )


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def gguf_budget(artifact: Path, context: int) -> PromptBudget | None:
    """The budget of a GGUF model served at ``context`` tokens per slot; None when its
    vocabulary cannot be read here (the engine still checks exactly)."""
    from runtimes.gguf_file import GgufFile
    from snapcommon.errors import UsageError

    try:
        lengths = GgufFile.open(artifact).token_lengths()
    except UsageError:
        return None
    return PromptBudget(context, max(lengths)) if lengths else None
