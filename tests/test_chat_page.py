"""The chat page at ``/`` in a real browser (Debian's headless Chromium): it loads, sends a
message through ``/v1/chat/completions`` with streaming, shows the streamed reply, and looks
right in a screenshot. Skipped, saying why, where Chromium is not installed."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.serving import app_in_thread
from support.tiny_models import write_tiny_llama_gguf

from runtimes.base import LoadOptions
from runtimes.llamacpp import LlamaCppAdapter
from runtimes.server import create_app

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"
)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = write_tiny_llama_gguf(tmp_path_factory.mktemp("page") / "tiny.gguf")
    adapter = LlamaCppAdapter(
        LoadOptions(artifact=path, runtime="llama.cpp-cpu", context_size=256, threads=1)
    )
    app = create_app(adapter, model_id="tiny", engine_name="cpu", context_size=256)
    with app_in_thread(app) as url:
        yield url


def chromium(url: str, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with a fresh profile and nothing reaching outside."""
    assert CHROMIUM is not None
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=20000",  # let the streamed reply finish before the dump
            *extra,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_page_is_served(base: str) -> None:
    page = httpx.get(f"{base}/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<title>tiny · chat</title>" in page.text
    assert '"/v1/chat/completions"' in page.text and "stream: true" in page.text


@needs_chromium
def test_round_trip_in_chromium(base: str, tmp_path: Path) -> None:
    def streamed_chats() -> float:
        metrics = httpx.get(f"{base}/metrics").text
        found = re.search(
            r'snapbuild_requests_total\{endpoint="/v1/chat/completions",status="200"\} (\S+)',
            metrics,
        )
        return float(found.group(1)) if found else 0.0

    before = streamed_chats()
    done = chromium(f"{base}/?q=Hello%20there", tmp_path / "profile", "--dump-dom")
    dom = done.stdout
    assert '<div class="msg user">Hello there</div>' in dom, done.stderr[-2000:]
    reply = re.search(r'<div class="msg assistant" data-state="done">(.*?)</div>', dom, re.S)
    assert reply is not None, dom[-3000:]
    assert html.unescape(reply.group(1)).strip()  # the streamed text arrived
    assert "done in" in dom
    assert streamed_chats() == before + 1  # one real request went through /v1


@needs_chromium
def test_screenshot(base: str, tmp_path: Path) -> None:
    shot = tmp_path / "chat.png"
    done = chromium(
        f"{base}/?q=Hi",
        tmp_path / "profile",
        f"--screenshot={shot}",
        "--window-size=900,600",
        "--hide-scrollbars",
    )
    assert shot.is_file(), done.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (900, 600)
    assert len(data) > 5000  # a rendered page, not a blank image
