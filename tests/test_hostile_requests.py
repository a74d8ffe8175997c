"""Hostile requests against the gateway: bounded work, no 5xx from client input.

Served in-process (under a 1 GiB address-space margin, requests with timeouts) from a tiny
generated GGUF (the llama-server engine's cases are in
tests/test_hostile_llama_server.py): lone surrogates, integers past 32 bits, a prompt of 230,000
messages, half-sent heads and trickled bodies, remote images that trickle or cannot be named,
and large images decoded while the event loop must keep answering.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import resource
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import numpy as np
import pytest
from support.serving import app_in_thread, http_files_server
from support.tiny_models import write_tiny_llama_gguf

from runtimes.engine import LoadOptions
from runtimes.gateway.budget import gguf_budget
from runtimes.gateway.errors import ApiError
from runtimes.gateway.images import ImagePolicy, check_request
from runtimes.gateway.protocol import ConnectionLimits, http_protocol
from runtimes.gateway.server import create_app
from runtimes.inprocess.llamacpp import LlamaCppAdapter

pytestmark = pytest.mark.slow
CONTEXT = 256
QUICK = ConnectionLimits(head_s=1.0, body_s=1.0)


@pytest.fixture(scope="module", autouse=True)
def memory_cap() -> Iterator[None]:
    """The server runs in this process: its address space may grow 1 GiB past what it is now
    (the soft limit only, put back after this module), so a request that makes it allocate
    without end fails with MemoryError here instead of taking the machine."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (_address_space() + (1 << 30), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _address_space() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize in /proc/self/status")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")
    adapter = LlamaCppAdapter(
        LoadOptions(artifact=path, runtime="llama.cpp-cpu", context_size=CONTEXT, threads=1)
    )
    app = create_app(
        adapter,
        model_id="tiny",
        context_size=CONTEXT,
        budget=gguf_budget(path, CONTEXT),
        connection=QUICK,
    )
    with app_in_thread(app, http=http_protocol(QUICK)) as base:
        yield base


def _chat(base: str, body: bytes | dict[str, object]) -> httpx.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    return httpx.post(f"{base}/v1/chat/completions", content=data, headers=headers, timeout=60)


def _error(response: httpx.Response) -> tuple[int, str | None, str | None]:
    error = response.json()["error"]
    return response.status_code, error["code"], error["param"]


def test_lone_surrogates_are_a_400_naming_the_field(tiny: str) -> None:
    body = b'{"model":"tiny","messages":[{"role":"user","content":"hi \\ud800 there"}]}'
    assert _error(_chat(tiny, body)) == (400, "invalid_json", "messages[0].content")
    tool = (
        b'{"model":"tiny","messages":[{"role":"user","content":"hi"}],"tools":[{"type":'
        b'"function","function":{"name":"f","parameters":{"x\\udfff":{}}}}]}'
    )
    assert _error(_chat(tiny, tool))[:2] == (400, "invalid_json")
    pair = (
        b'{"model":"tiny","messages":[{"role":"user","content":"\\ud83d\\ude00"}],"max_tokens":1}'
    )
    assert _chat(tiny, pair).status_code == 200  # a whole pair is a character


@pytest.mark.parametrize(
    ("field", "value", "status", "code"),
    [
        ("max_tokens", 4294967301, 400, "invalid_value"),  # wrapped to 5 tokens before
        ("max_tokens", 10**9, 400, "context_length_exceeded"),
        ("max_tokens", 1e9, 400, "context_length_exceeded"),
        ("max_completion_tokens", 2**31, 400, "invalid_value"),
        ("top_k", 2**40, 400, "invalid_value"),
        ("n", 2**40, 400, "invalid_value"),
        ("seed", 2**64, 400, "invalid_value"),
    ],
)
def test_integers_are_bounded(tiny: str, field: str, value: float, status: int, code: str) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], field: value}
    got = _error(_chat(tiny, body))
    assert got[:2] == (status, code)
    assert got[2] == (field if code == "invalid_value" else "messages")


def test_a_prompt_that_cannot_fit_is_refused_before_any_work(tiny: str) -> None:
    """Issue 26's 8 MB body of 230,000 one-letter messages: refused by the lower bound on its
    tokens (a role marker per message), within a second, and the server stays responsive."""
    messages = [{"role": "user", "content": "a"}] * 230_000
    body = json.dumps({"model": "tiny", "messages": messages}).encode()
    assert len(body) < 8 << 20
    started = time.monotonic()
    response = _chat(tiny, body)
    assert _error(response) == (400, "context_length_exceeded", "messages")
    least = re.search(r"at least (\d+) tokens", response.json()["error"]["message"])
    assert least is not None and int(least.group(1)) >= 230_000
    assert time.monotonic() - started < 10
    long_text = {"model": "tiny", "prompt": "word " * 100_000}
    refused = httpx.post(f"{tiny}/v1/completions", json=long_text, timeout=60)
    assert _error(refused) == (400, "context_length_exceeded", "prompt")
    assert httpx.get(f"{tiny}/health", timeout=5).status_code == 200


def _connect(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _closed_within(sock: socket.socket, seconds: float) -> tuple[float, bytes]:
    started = time.monotonic()
    data = b""
    while time.monotonic() - started < seconds:
        chunk = sock.recv(4096)
        if not chunk:
            return time.monotonic() - started, data
        data += chunk
    raise AssertionError(f"the connection stayed open {seconds} s")


def test_half_sent_heads_and_silent_connections_are_closed(tiny: str) -> None:
    with _connect(tiny) as half, _connect(tiny) as silent:
        half.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Ty")
        took, _ = _closed_within(half, 5)
        assert took < QUICK.head_s + 1
        took, _ = _closed_within(silent, 5)
        assert took < QUICK.head_s + 1
    assert httpx.get(f"{tiny}/health", timeout=5).status_code == 200


def test_a_trickled_body_gets_a_408(tiny: str) -> None:
    with _connect(tiny) as slow:
        slow.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"model":'
        )
        took, answer = _closed_within(slow, 5)
    assert answer.startswith(b"HTTP/1.1 408") and b"request_timeout" in answer
    assert took < QUICK.body_s + 1


class Trickle(BaseHTTPRequestHandler):
    """An image server that sends one byte every 0.3 s (a per-read timeout never fires)."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        try:
            for _ in range(1000):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.3)
        except OSError:
            pass  # the gateway gave up on it: the point of the test

    def log_message(self, *args: object) -> None:
        pass


def _image_request(url: str) -> dict[str, object]:
    part = {"type": "image_url", "image_url": {"url": url}}
    return {"model": "m", "messages": [{"role": "user", "content": [part]}]}


def test_remote_images_have_a_total_deadline_and_bad_urls_are_400() -> None:
    policy = ImagePolicy(remote_urls=True, fetch_timeout=1.0)
    inputs = ("text", "vision")

    def refused(url: str) -> ApiError:
        with pytest.raises(ApiError) as caught:
            asyncio.run(check_request(_image_request(url), policy, inputs, "m"))
        return caught.value

    with http_files_server(Trickle) as base:
        started = time.monotonic()
        error = refused(f"{base}/slow.png")
        assert time.monotonic() - started < 3
    assert (error.status, error.code) == (400, "image_fetch_failed")
    assert "did not arrive within 1 s" in error.message
    for url in ("http://" + "a" * 100_000 + ".example/x.png", "http://" + "b" * 70 + ".test/x"):
        error = refused(url)
        assert (error.status, error.code) == (400, "image_fetch_failed"), error.message


def _slow_png() -> str:
    """A 59 KB PNG of 4096 x 4096 pixels: about half a second of decoding each."""
    from PIL import Image

    x = np.arange(4096, dtype=np.uint16)
    pixels = np.stack([(x[None, :] + x[:, None]) % 256] * 3, axis=-1).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG", compress_level=9)
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def test_images_are_decoded_beside_the_event_loop() -> None:
    """Two requests of four large PNGs decode in the decoder threads: the loop keeps ticking
    (it stalled for seconds when decoding ran on it)."""
    url = _slow_png()
    policy = ImagePolicy()

    async def run() -> tuple[float, float]:
        stalls: list[float] = []
        done = asyncio.Event()

        async def tick() -> None:
            last = time.monotonic()
            while not done.is_set():
                await asyncio.sleep(0.01)
                now = time.monotonic()
                stalls.append(now - last)
                last = now

        ticker = asyncio.create_task(tick())
        started = time.monotonic()
        parts = [{"type": "image_url", "image_url": {"url": url}}] * 4
        payloads = [{"messages": [{"role": "user", "content": list(parts)}]} for _ in range(2)]
        await asyncio.gather(*(check_request(p, policy, ("text", "vision"), "m") for p in payloads))
        done.set()
        await ticker
        return time.monotonic() - started, max(stalls)

    took, stall = asyncio.run(run())
    print(f"8 large PNG decodes took {took:.1f} s; the longest event-loop stall {stall:.3f} s")
    assert took > 1.0  # the work was real
    assert stall < 0.25


def test_decoders_are_limited() -> None:
    """At most ``decoders`` images decode at once (memory: each holds its pixels)."""
    active = []
    peak = [0]
    lock = threading.Lock()
    from runtimes.gateway import images

    original = images.inspect

    def counting(*args: object) -> object:
        with lock:
            active.append(1)
            peak[0] = max(peak[0], len(active))
        try:
            time.sleep(0.05)
            return original(*args)  # type: ignore[arg-type]
        finally:
            with lock:
                active.pop()

    images.inspect = counting  # type: ignore[assignment]
    try:
        tiny_png = _tiny_png()
        payload = {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": tiny_png}}] * 8,
                }
            ]
        }
        asyncio.run(check_request(payload, ImagePolicy(decoders=2), ("text", "vision"), "m"))
        asyncio.run(_concurrently(payload))
    finally:
        images.inspect = original  # type: ignore[assignment]
    assert peak[0] == 2


async def _concurrently(payload: dict[str, object]) -> None:
    copies = [json.loads(json.dumps(payload)) for _ in range(4)]
    await asyncio.gather(
        *(check_request(p, ImagePolicy(decoders=2), ("text", "vision"), "m") for p in copies)
    )


def _tiny_png() -> str:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def test_body_limit_and_deadline_defaults_are_data(tmp_path: Path) -> None:
    from runtimes.gateway.protocol import LIMITS

    assert (LIMITS.head_s, LIMITS.body_s) == (10.0, 60.0)
