"""OpenAI's Responses API (``POST /v1/responses``) through the official openai client and the real
SmolLM2 behind llama-server: plain, streamed (typed events, in OpenAI's order), with a function
tool and its round trip, with a JSON schema, ``previous_response_id`` from the bounded store; every
response and event checked against OpenAI's published schemas. The store's bounds are checked
alone. (Image input: tests/test_vision_api.py, with a model that reads images.)"""

from __future__ import annotations

import json
import warnings
from typing import Any

import httpx
import openai
import pydantic
import pytest
from support.openai_schema import validate, validate_event

from runtimes.gateway.errors import ApiError
from runtimes.gateway.responses.store import ResponseStore

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
SETTINGS: dict[str, Any] = {"model": "smollm2", "temperature": 0, "max_output_tokens": 200}


def test_the_store_is_bounded_by_count_and_bytes() -> None:
    store = ResponseStore(max_responses=2, max_bytes=400)
    for ident in ("resp_a", "resp_b", "resp_c"):
        store.put([{"role": "user", "content": ident}], {"id": ident})
    assert list(store.kept) == ["resp_b", "resp_c"]  # the oldest went first
    store.put([{"role": "user", "content": "x" * 300}], {"id": "resp_big"})
    assert list(store.kept) == ["resp_big"] and store.bytes <= 400
    store.put([{"role": "user", "content": "x" * 500}], {"id": "resp_huge"})  # over the budget
    assert store.find("resp_huge") is None
    with pytest.raises(ApiError) as caught:
        store.previous("resp_a")
    assert (caught.value.status, caught.value.code) == (400, "previous_response_not_found")


def _client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300)


def _dumped(model: pydantic.BaseModel) -> dict[str, Any]:
    """What the client received, as JSON (field names as sent: ``schema``, not ``schema_``)."""
    with warnings.catch_warnings():  # the client's parsed generics warn when dumped
        warnings.simplefilter("ignore")
        data: dict[str, Any] = model.model_dump(mode="json", exclude_unset=True, by_alias=True)
    return data


@pytest.mark.slow
def test_plain_response_and_previous_response_id(smollm2_server: str) -> None:
    client = _client(smollm2_server)
    first = client.responses.create(input="Say hello", instructions="Be kind.", **SETTINGS)
    validate("Response", _dumped(first))
    assert (first.status, first.object, first.model) == ("completed", "response", "smollm2")
    assert first.id.startswith("resp_") and [o.type for o in first.output] == ["message"]
    assert first.output_text and first.usage and first.usage.output_tokens > 0
    assert httpx.get(f"{smollm2_server}/v1/responses/{first.id}").json()["id"] == first.id
    again = client.responses.create(input="Again", previous_response_id=first.id, **SETTINGS)
    assert again.previous_response_id == first.id and again.usage and first.usage
    # the conversation (less the first's instructions) is in the prompt
    assert again.usage.input_tokens > first.usage.output_tokens + 2
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(input="x", previous_response_id="resp_nope", **SETTINGS)
    body: Any = caught.value.body
    assert (body["param"], body["code"]) == ("previous_response_id", "previous_response_not_found")
    unstored = client.responses.create(
        input="Hi", store=False, **{**SETTINGS, "max_output_tokens": 2}
    )
    assert unstored.status == "incomplete"
    assert unstored.incomplete_details and unstored.incomplete_details.reason == "max_output_tokens"
    assert httpx.get(f"{smollm2_server}/v1/responses/{unstored.id}").status_code == 404


@pytest.mark.slow
def test_streamed_response_sends_openais_typed_events(smollm2_server: str) -> None:
    client = _client(smollm2_server)
    events = list(client.responses.create(input="Say hello", stream=True, **SETTINGS))
    for event in events:
        validate_event(_dumped(event))
    kinds = [e.type for e in events]
    deltas = kinds.count("response.output_text.delta")
    assert deltas > 1 and kinds == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", *["response.output_text.delta"] * deltas,
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed",
    ]  # fmt: skip
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")  # type: ignore[union-attr]
    final = events[-1].response  # type: ignore[union-attr]
    assert final.output_text == text
    with client.responses.stream(input="Say hello", **SETTINGS) as stream:
        assert stream.get_final_response().output_text == text  # greedy: the same words


@pytest.mark.slow
def test_function_tool_and_its_round_trip(smollm2_server: str) -> None:
    client = _client(smollm2_server)
    ask = "What is the weather in Paris?"
    called = client.responses.create(
        input=ask, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False, **SETTINGS
    )  # type: ignore[arg-type]
    validate("Response", _dumped(called))
    [call] = called.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"} and call.call_id
    events = list(client.responses.create(input=ask, tools=[WEATHER], tool_choice="required",
                  parallel_tool_calls=False, stream=True, **SETTINGS))  # type: ignore[arg-type]  # fmt: skip
    for event in events:
        validate_event(_dumped(event))
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and json.loads(done[0].arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    answer = client.responses.create(
        previous_response_id=called.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "21 C, sunny"}],
        tools=[WEATHER],
        **SETTINGS,
    )  # type: ignore[arg-type]
    assert answer.status == "completed" and answer.output_text


@pytest.mark.slow
def test_json_schema_format(smollm2_server: str) -> None:
    class Person(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=20)
        age: int = pydantic.Field(ge=0, le=120)

    parsed = _client(smollm2_server).responses.parse(
        input="Invent a person.", text_format=Person, **SETTINGS
    )
    assert isinstance(parsed.output_parsed, Person)
    validate("Response", _dumped(parsed))


@pytest.mark.slow
def test_what_a_local_model_cannot_do_is_a_400_naming_it(smollm2_server: str) -> None:
    url = f"{smollm2_server}/v1/responses"
    for extra, param in (
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"background": True}, "background"),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
         "input[0].content[0].type"),
        ({"input": [{"type": "computer_call"}]}, "input[0]"),
        ({"temperature": 9}, "temperature"),
    ):  # fmt: skip
        refused = httpx.post(url, json={"model": "smollm2", "input": "Hi", **extra})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == param
