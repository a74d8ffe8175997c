"""The chat page at ``/`` in a real browser (Debian's headless Chromium): it loads, sends a
message through ``/v1/chat/completions`` with streaming, shows the streamed reply, and looks
right in a screenshot. Skipped, saying why, where Chromium is not installed."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from support.browser import CHROMIUM, Browser
from support.serving import app_in_thread
from support.tiny_models import write_tiny_llama_gguf

from runtimes.engine import LoadOptions
from runtimes.gateway.server import create_app
from runtimes.inprocess.adapter import Delta, Message, SamplingParams
from runtimes.inprocess.llamacpp import LlamaCppAdapter

pytestmark = pytest.mark.slow
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"
)


class TalkativeAdapter(LlamaCppAdapter):
    """The real adapter, except that it answers 16 tokens even past end-of-turn: the page sends
    no sampling settings, and random weights may otherwise end the turn before any text."""

    def chat(
        self, messages: Sequence[Message], params: SamplingParams, cancel: threading.Event
    ) -> Iterator[Delta]:
        return super().chat(messages, replace(params, ignore_eos=True, max_tokens=16), cancel)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = write_tiny_llama_gguf(tmp_path_factory.mktemp("page") / "tiny.gguf")
    adapter = TalkativeAdapter(
        LoadOptions(artifact=path, runtime="llama.cpp-cpu", context_size=256, threads=1)
    )
    app = create_app(adapter, model_id="tiny", engine_name="cpu", context_size=256)
    with app_in_thread(app) as url:
        yield url


def test_page_is_served(base: str) -> None:
    page = httpx.get(f"{base}/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<title>tiny · chat</title>" in page.text
    assert '"/v1/chat/completions"' in page.text and "stream: true" in page.text


@needs_chromium
def test_round_trip_and_screenshot_in_chromium(base: str, tmp_path: Path) -> None:
    def streamed_chats() -> float:
        metrics = httpx.get(f"{base}/metrics").text
        found = re.search(
            r'snapbuild_requests_total\{endpoint="/v1/chat/completions",status="200"\} (\S+)',
            metrics,
        )
        return float(found.group(1)) if found else 0.0

    before = streamed_chats()
    browser = Browser(tmp_path / "profile", width=900, height=600)
    try:
        browser.open(f"{base}/?q=Hello%20there")
        state = browser.wait_for(
            "(document.querySelector('.msg.assistant, .msg.error') || {dataset: {}})"
            ".dataset.state === 'done' ? 'done' : "
            "(document.querySelector('.msg.error') ? 'error' : '')"
        )
        assert state == "done", browser.evaluate("document.getElementById('log').innerText")
        user = browser.evaluate("document.querySelector('.msg.user').textContent")
        reply = browser.evaluate("document.querySelector('.msg.assistant').textContent")
        status = browser.evaluate("document.getElementById('status').textContent")
        shot = browser.screenshot()
    finally:
        browser.close()
    assert user == "Hello there"
    assert reply.strip()  # the streamed text arrived
    assert status.startswith("done in ")
    assert streamed_chats() == before + 1  # one real request went through /v1
    assert shot[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(shot[16:20], "big"), int.from_bytes(shot[20:24], "big")
    assert (width, height) == (900, 600)
    assert len(shot) > 5000  # a rendered page, not a blank image
    (tmp_path / "chat.png").write_bytes(shot)
