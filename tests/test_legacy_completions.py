"""OpenAI's legacy completions endpoint and token-id inputs, with the official openai client and
the real SmolLM2 through llama-server: prompt lists (n x prompts choices, indexed i*n+j),
``echo``, the legacy ``logprobs`` object, ``max_tokens: 0`` scoring a prompt (how evaluation
harnesses score a text), ``cmpl-`` ids, token-id prompts and embeddings inputs checked against
the vocabulary. Greedy decoding with ``ignore_eos``, so lengths and texts are the model's own."""

from __future__ import annotations

import json
import math
from functools import cache
from typing import Any

import httpx
import openai
import pytest
from support.openai_schema import validate
from support.tiny_models import smollm2_gguf_path

pytestmark = pytest.mark.slow
GREEDY = {"model": "smollm2", "temperature": 0, "ignore_eos": True}


@cache
def _ids(*tokens: str) -> list[int]:
    """Token ids from SmolLM2's own vocabulary (GPT-2 style: Ġ is a space)."""
    import gguf  # test-only dependency

    path = smollm2_gguf_path()
    assert path is not None
    field = gguf.GGUFReader(str(path)).fields["tokenizer.ggml.tokens"]
    vocabulary = [bytes(field.parts[i]).decode() for i in field.data]
    return [vocabulary.index(t) for t in tokens]


def _client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300)


def _complete(base: str, **body: Any) -> dict[str, Any]:
    response = httpx.post(f"{base}/v1/completions", json={**GREEDY, **body}, timeout=300)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    validate("CreateCompletionResponse", _published(data))
    return data


def _published(data: dict[str, Any]) -> dict[str, Any]:
    """The answer as OpenAI's published schema can hold it: an echoed prompt's first token has
    no log probability, which OpenAI's API sends as null and its schema has no room for (its
    lists are of numbers and objects), so that place is left out of the check."""
    choices = []
    for choice in data["choices"]:
        legacy = choice.get("logprobs")
        if legacy and legacy["token_logprobs"] and legacy["token_logprobs"][0] is None:
            legacy = {key: values[1:] for key, values in legacy.items()}
        choices.append({**choice, "logprobs": legacy})
    return {**data, "choices": choices}


def test_prompt_lists_give_n_choices_per_prompt_indexed_as_openai(smollm2_server: str) -> None:
    batch = _client(smollm2_server).completions.create(
        model="smollm2", prompt=["The cat sat", "Hello"], n=2, max_tokens=3, temperature=0,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    assert batch.id.startswith("cmpl-") and batch.object == "text_completion"
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    alone = [_complete(smollm2_server, prompt=p, max_tokens=3) for p in ("The cat sat", "Hello")]
    texts = [a["choices"][0]["text"] for a in alone]
    assert [c.text for c in batch.choices] == [texts[0], texts[0], texts[1], texts[1]]
    prompt_tokens = sum(a["usage"]["prompt_tokens"] for a in alone)
    assert batch.usage is not None
    assert (batch.usage.prompt_tokens, batch.usage.completion_tokens) == (prompt_tokens, 12)


def test_echo_with_logprobs_scores_the_prompt_as_the_model_generates_it(
    smollm2_server: str,
) -> None:
    """The prompt's scored tokens are the model's own probabilities: scoring "The cat sat on a"
    gives " a" the log probability it had when generated after "The cat sat on"."""
    generated = _complete(smollm2_server, prompt="The cat sat on", max_tokens=1, logprobs=2)
    choice = generated["choices"][0]
    word, logprob = choice["logprobs"]["tokens"][0], choice["logprobs"]["token_logprobs"][0]
    assert choice["logprobs"]["text_offset"] == [len("The cat sat on")]
    scored = _complete(smollm2_server, prompt=f"The cat sat on{word}", max_tokens=0, echo=True,
                       logprobs=2)["choices"][0]  # fmt: skip
    assert scored["text"] == f"The cat sat on{word}" and scored["finish_reason"] == "length"
    legacy = scored["logprobs"]
    assert sorted(legacy) == ["text_offset", "token_logprobs", "tokens", "top_logprobs"]
    assert "".join(legacy["tokens"]) == scored["text"]
    assert legacy["token_logprobs"][0] is None and legacy["top_logprobs"][0] is None
    assert math.isclose(legacy["token_logprobs"][-1], logprob, abs_tol=1e-3)
    assert all(len(top) == 2 for top in legacy["top_logprobs"][1:])
    offsets = [sum(len(t) for t in legacy["tokens"][:i]) for i in range(len(legacy["tokens"]))]
    assert legacy["text_offset"] == offsets
    echoed = _complete(smollm2_server, prompt="The cat sat on", max_tokens=2, echo=True,
                       logprobs=1)["choices"][0]  # fmt: skip
    assert echoed["text"].startswith("The cat sat on") and len(echoed["logprobs"]["tokens"]) == 6
    assert "".join(echoed["logprobs"]["tokens"]) == echoed["text"]


def test_max_tokens_0_and_echo_without_logprobs(smollm2_server: str) -> None:
    nothing = _complete(smollm2_server, prompt="The cat", max_tokens=0)
    assert nothing["choices"][0]["text"] == "" and nothing["usage"]["completion_tokens"] == 0
    echoed = _complete(smollm2_server, prompt="The cat", max_tokens=3, echo=True)
    alone = _complete(smollm2_server, prompt="The cat", max_tokens=3)
    assert echoed["choices"][0]["text"] == "The cat" + alone["choices"][0]["text"]
    assert echoed["choices"][0]["logprobs"] is None


def test_streamed_echo_and_logprobs(smollm2_server: str) -> None:
    body = {**GREEDY, "prompt": "The cat", "max_tokens": 3, "echo": True, "logprobs": 1,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    with httpx.stream("POST", f"{smollm2_server}/v1/completions", json=body, timeout=300) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    whole = _complete(smollm2_server, prompt="The cat", max_tokens=3, echo=True, logprobs=1)
    pieces = [c for c in chunks if c["choices"]]
    assert "".join(c["choices"][0]["text"] for c in pieces) == whole["choices"][0]["text"]
    tokens = [t for c in pieces for t in (c["choices"][0]["logprobs"] or {}).get("tokens", [])]
    assert tokens == whole["choices"][0]["logprobs"]["tokens"]
    assert [c["choices"][0]["finish_reason"] for c in pieces][-1] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]
    for piece in pieces:  # OpenAI publishes no chunk schema: each fits the whole one's
        ended = {**piece, "choices": [{**piece["choices"][0], "finish_reason": "length"}]}
        validate("CreateCompletionResponse", _published(ended))  # fmt: skip


def test_token_id_prompts_and_inputs(smollm2_server: str) -> None:
    ids = _ids("The", "Ġcat", "Ġsat")
    text = _complete(smollm2_server, prompt="The cat sat", max_tokens=4)["choices"][0]["text"]
    single = _complete(smollm2_server, prompt=ids, max_tokens=4, echo=True)
    assert single["choices"][0]["text"] == "The cat sat" + text
    batch = _complete(smollm2_server, prompt=[ids, ids[:2]], max_tokens=4)
    assert batch["choices"][0]["text"] == text and len(batch["choices"]) == 2
    client = _client(smollm2_server)
    by_text = client.embeddings.create(model="smollm2", input="The cat sat")
    by_ids = client.embeddings.create(model="smollm2", input=[ids, ids])
    assert len(by_ids.data) == 2
    for a, b in zip(by_text.data[0].embedding, by_ids.data[1].embedding, strict=True):
        assert math.isclose(a, b, abs_tol=1e-4)
    for bad, where in (([ids[0], 49152], "prompt[1]"), ([ids, [-1]], "prompt[1][0]")):
        with pytest.raises(openai.BadRequestError) as caught:
            client.completions.create(model="smollm2", prompt=bad, max_tokens=1)
        assert caught.value.body["param"] == "prompt"  # type: ignore[index]
        assert caught.value.body["code"] == "invalid_token_id"  # type: ignore[index]
        assert f"at {where} is not in the model's vocabulary (ids 0 to 49151)" in str(
            caught.value.body["message"]  # type: ignore[index]
        )
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model="smollm2", input=[[50000]])
    assert "token id 50000 at input[0][0]" in caught.value.body["message"]  # type: ignore[index]
    empty = httpx.post(f"{smollm2_server}/v1/completions", json={**GREEDY, "prompt": [[]]})
    assert (empty.status_code, empty.json()["error"]["param"]) == (400, "prompt")
