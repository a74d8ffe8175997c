"""The client libraries people point at an OpenAI-compatible server, run for real against
``snapbuild serve smollm2`` (llama-server, the real SmolLM2): litellm, LangChain
(``langchain-openai``), instructor and openai-agents, each doing what the issue saw fail (tools,
streamed tools, token-id embeddings, legacy completions with prompt lists, a 400 its users catch,
the Responses API). They are installed from PyPI by the test extra; nothing leaves loopback:
litellm reads its bundled model-cost map, LangChain's tracing is off, tiktoken reads the
cl100k_base file litellm ships, openai-agents' tracing is disabled. (The official openai client:
test_tool_calls, test_legacy_completions, test_responses_api; Node's: test_clients_node.)"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field
from support.weather import WEATHER

pytestmark = pytest.mark.slow


def _offline() -> None:
    """Environment that keeps every library on loopback, set before any of them is imported."""
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    os.environ["LITELLM_TELEMETRY"] = "False"
    os.environ["LANGCHAIN_TRACING_V2"] = "false"
    os.environ["LANGSMITH_TRACING"] = "false"
    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    spec = importlib.util.find_spec("litellm")
    if spec is not None and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations)))
        os.environ["TIKTOKEN_CACHE_DIR"] = str(root / "litellm_core_utils" / "tokenizers")


_offline()
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every name a library looks up, refused unless it is loopback; the test fails if any
    library tried to reach another host (telemetry, a model-cost map, a tokenizer download)."""
    tried: list[str] = []
    lookup = socket.getaddrinfo

    def guarded(host: Any, *args: Any, **kwargs: Any) -> Any:
        if str(host) not in LOOPBACK:
            tried.append(str(host))
            raise OSError(f"test_clients: {host} is not loopback")
        return lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", guarded)
    yield tried
    assert tried == []


ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


class Person(BaseModel):
    name: str = Field(max_length=20)
    age: int = Field(ge=0, le=120)


def test_litellm(smollm2_server: str) -> None:
    litellm = pytest.importorskip("litellm")
    kw: dict[str, Any] = {
        "model": "openai/smollm2",
        "api_base": f"{smollm2_server}/v1",
        "api_key": "unused",
        "temperature": 0,
    }
    chat = litellm.completion(messages=[{"role": "user", "content": "Hi"}], max_tokens=8, **kw)
    assert chat.choices[0].message.content and chat.usage.completion_tokens <= 8
    called = litellm.completion(
        messages=ASK,
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=80,
        **kw,
    )
    [call] = called.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "get_weather",
        {"city": "Paris"},
    )
    assert called.choices[0].message.content is None
    chunks = list(
        litellm.completion(
            messages=ASK,
            tools=[WEATHER],
            tool_choice="required",
            parallel_tool_calls=False,
            max_tokens=80,
            stream=True,
            **kw,
        )
    )
    built = litellm.stream_chunk_builder(chunks).choices[0].message
    assert [c.function.name for c in built.tool_calls] == ["get_weather"] and not built.content
    texts = litellm.text_completion(prompt=["The cat sat", "Hello"], max_tokens=3, **kw)
    assert len(texts.choices) == 2 and all(c.text for c in texts.choices)
    embedded = litellm.embedding(
        model="openai/smollm2",
        api_base=f"{smollm2_server}/v1",
        api_key="unused",
        input=["hello world"],
    )
    assert len(embedded.data[0]["embedding"]) == 576  # SmolLM2's width
    with pytest.raises(litellm.BadRequestError):  # OpenAI's 400, not a 422 nobody catches
        litellm.completion(messages=[{"role": "user", "content": "Hi"}], **{**kw, "temperature": 7})


def test_langchain(smollm2_server: str) -> None:
    lc = pytest.importorskip("langchain_openai")
    from langchain_core.tools import tool

    base = {"base_url": f"{smollm2_server}/v1", "api_key": "unused", "max_retries": 0}

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    chat = lc.ChatOpenAI(model="smollm2", temperature=0, max_tokens=80, **base)
    assert chat.invoke("Hi").content
    named = chat.bind_tools([get_weather], tool_choice="get_weather").invoke("Weather in Paris?")
    assert [(c["name"], c["args"]) for c in named.tool_calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    pieces = list(
        chat.bind_tools([get_weather], tool_choice="any", parallel_tool_calls=False).stream(
            "What is the weather in Paris?"
        )
    )
    merged = pieces[0]
    for piece in pieces[1:]:
        merged += piece
    assert [c["name"] for c in merged.tool_calls] == ["get_weather"]  # type: ignore[attr-defined]
    assert sum(1 for p in pieces if p.tool_call_chunks) > 2  # the arguments came in pieces
    person = chat.with_structured_output(Person).invoke("Invent a person.")
    assert isinstance(person, Person)
    legacy = lc.OpenAI(model="smollm2", temperature=0, max_tokens=4, **base)
    generated = legacy.generate(["The cat sat", "Hello"])  # a prompt list in one request
    assert [len(g) for g in generated.generations] == [1, 1]
    assert all(g[0].text for g in generated.generations)
    embeddings = lc.OpenAIEmbeddings(model="smollm2", **base)  # sends cl100k token ids
    assert len(embeddings.embed_query("the cat sat")) == 576
    assert [len(v) for v in embeddings.embed_documents(["the cat", "a dog"])] == [576, 576]


def test_instructor(smollm2_server: str) -> None:
    instructor = pytest.importorskip("instructor")
    import openai

    def client(mode: Any) -> Any:
        raw = openai.OpenAI(base_url=f"{smollm2_server}/v1", api_key="unused", max_retries=0)
        return instructor.from_openai(raw, mode=mode)

    ask = [{"role": "user", "content": "Invent a person."}]
    for mode in (instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA):  # a named tool; a schema
        person = client(mode).chat.completions.create(
            model="smollm2",
            response_model=Person,
            messages=ask,
            max_tokens=100,
            temperature=0,
            max_retries=0,
        )
        assert isinstance(person, Person)
    partials = list(
        client(instructor.Mode.TOOLS).chat.completions.create_partial(
            model="smollm2",
            response_model=Person,
            messages=ask,
            max_tokens=100,
            temperature=0,
            max_retries=0,
        )
    )
    assert len(partials) > 1 and isinstance(partials[-1].age, int)  # streamed tool arguments


def test_openai_agents_default_model(smollm2_server: str) -> None:
    """openai-agents' default model is OpenAIResponsesModel: the Responses API, streamed."""
    agents = pytest.importorskip("agents")
    import openai

    agents.set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=f"{smollm2_server}/v1", api_key="unused", max_retries=0)
    agents.set_default_openai_client(client, use_for_tracing=False)
    settings = agents.ModelSettings(max_tokens=300, temperature=0)
    seen: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        seen.append(city)
        return f"Sunny, 21 C in {city}"

    class Report(BaseModel):
        city: str
        weather: str

    async def run() -> tuple[Any, Any, Any, Any]:
        plain = agents.Agent(
            name="plain", instructions="Be brief.", model="smollm2", model_settings=settings
        )
        tools = agents.Agent(
            name="tools",
            instructions="Use the tool.",
            model="smollm2",
            tools=[get_weather],
            tool_use_behavior="stop_on_first_tool",
            model_settings=settings.resolve(agents.ModelSettings(tool_choice="required")),
        )
        typed = agents.Agent(
            name="typed",
            instructions="Answer.",
            model="smollm2",
            tools=[get_weather],
            output_type=Report,
            model_settings=settings,
        )
        streamed = agents.Runner.run_streamed(plain, "Say hello")
        async for _ in streamed.stream_events():
            pass
        return (
            await agents.Runner.run(plain, "Say hello"),
            await agents.Runner.run(tools, "What is the weather in Paris?"),
            await agents.Runner.run(typed, "What is the weather in Paris?", max_turns=4),
            streamed,
        )

    plain, tools, typed, streamed = asyncio.run(run())
    assert plain.final_output and streamed.final_output == plain.final_output
    assert tools.final_output == "Sunny, 21 C in Paris" and seen[0] == "Paris"
    assert isinstance(typed.final_output, Report)  # output_type with tools: one or the other
