"""What a completions prompt or an embeddings input holds, checked the same way for every engine:
text or token ids, one or a batch, never empty, ids inside the model's vocabulary.

OpenAI takes a prompt (and an embeddings input) as a string, a list of strings, a list of token
ids or a list of such lists; LangChain's ``OpenAIEmbeddings`` sends token ids by default. An id
outside the vocabulary would index past the model's embedding table, so it is a 400 that names
the id and where it is, before any engine sees it; an engine that takes no ids (its
``vocabulary`` is None) refuses them with a 400 naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence

from runtimes.gateway.errors import ApiError
from runtimes.requests import MAX_PROMPTS, Prompt

Item = str | list[int]


def items(value: Prompt) -> list[Item]:
    """A prompt or input as a list of texts and token-id lists (one per prompt or input)."""
    if isinstance(value, str):
        return [value]
    if _single(value):
        return [[v for v in value if isinstance(v, int)]]
    return [v for v in value if isinstance(v, str | list)]


def _single(value: Prompt) -> bool:
    """One text, or one flat list of token ids (an empty list counts as a batch of none)."""
    return isinstance(value, str) or bool(value) and all(isinstance(v, int) for v in value)


def check_prompts(value: Prompt, vocabulary: int | None, engine: str) -> list[Item]:
    """The prompts of a completions request: between 1 and :data:`MAX_PROMPTS`, none empty."""
    prompts = items(value)
    if not prompts or len(prompts) > MAX_PROMPTS:
        raise ApiError(400, f"give between 1 and {MAX_PROMPTS} prompts", param="prompt")
    _check_items(prompts, "prompt", vocabulary, engine, batch=not _single(value))
    return prompts


def check_inputs(value: Prompt, limit: int, vocabulary: int | None, engine: str) -> list[Item]:
    """The inputs of an embeddings request: between 1 and ``limit``, none empty."""
    inputs = items(value)
    if not inputs or len(inputs) > limit:
        raise ApiError(400, f"give between 1 and {limit} inputs", param="input")
    _check_items(inputs, "input", vocabulary, engine, batch=not _single(value))
    return inputs


def _check_items(
    found: Sequence[Item], field: str, vocabulary: int | None, engine: str, *, batch: bool
) -> None:
    for index, item in enumerate(found):
        where = f"{field}[{index}]" if batch else field
        if isinstance(item, str):
            # an embedding of blanks means nothing; a prompt of blanks is still a prompt
            if not (item.strip() if field == "input" else item):
                what = "embed" if field == "input" else "continue; give some text"
                raise ApiError(
                    400, f"{where} is empty: there is nothing to {what}", param=field,
                    code="empty_input",
                )  # fmt: skip
        elif not item:
            raise ApiError(400, f"{where} is an empty list of token ids", param=field,
                           code="empty_input")  # fmt: skip
        else:
            _check_ids(item, where, field, vocabulary, engine)


def _check_ids(ids: list[int], where: str, field: str, vocabulary: int | None, engine: str) -> None:
    if vocabulary is None:
        raise ApiError(
            400,
            f"the {engine} engine takes text, not token ids; send {field} as a string or a list "
            "of strings",
            param=field,
            code="unsupported_parameter",
        )
    for position, token in enumerate(ids):
        if not 0 <= token < vocabulary:
            raise ApiError(
                400,
                f"token id {token} at {where}[{position}] is not in the model's vocabulary "
                f"(ids 0 to {vocabulary - 1})",
                param=field,
                code="invalid_token_id",
            )
