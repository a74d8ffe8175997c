"""runtimes.gateway.images on its own: the remote-URL path (allowed by the operator), bounded,
against a
real loopback HTTP server, and the canonical data: URLs handed to engines."""

from __future__ import annotations

import asyncio
import base64
import http.server
from pathlib import Path
from typing import Any

import pytest
from support.serving import http_files_server
from support.tiny_vision import write_png

from runtimes.gateway.errors import ApiError
from runtimes.gateway.images import ImagePolicy, check_request

INPUTS = ("text", "vision")


def _payload(url: str) -> dict[str, Any]:
    part = {"type": "image_url", "image_url": {"url": url, "detail": "low"}}
    return {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, part]}]}


def _check(payload: dict[str, Any], policy: ImagePolicy) -> dict[str, Any]:
    return asyncio.run(check_request(payload, policy, INPUTS, "tiny"))


@pytest.fixture(scope="module")
def png(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return write_png(tmp_path_factory.mktemp("png") / "a.png").read_bytes()


@pytest.fixture(scope="module")
def site(png: bytes) -> Any:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = {"/a.png": png, "/big.png": png + b"\0" * 4096}.get(self.path)
            if self.path == "/moved.png":
                self.send_response(302)
                self.send_header("Location", "/a.png")
                self.end_headers()
                return
            self.send_response(200 if body else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: Any) -> None:
            pass

    with http_files_server(Handler) as base:
        yield base


def test_allowed_remote_image_is_fetched_and_inlined(site: str, png: bytes) -> None:
    out = _check(_payload(f"{site}/a.png"), ImagePolicy(remote_urls=True))
    image = out["messages"][0]["content"][1]["image_url"]
    assert image == {
        "url": "data:image/png;base64," + base64.b64encode(png).decode(),
        "detail": "low",
    }


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/big.png", 413, "image_too_large"),
        ("/missing.png", 400, "image_fetch_failed"),
        ("/moved.png", 400, "image_fetch_failed"),  # redirects are not followed
    ],
)
def test_remote_fetch_is_bounded(site: str, png: bytes, path: str, status: int, code: str) -> None:
    policy = ImagePolicy(remote_urls=True, max_bytes=len(png) + 100)
    with pytest.raises(ApiError) as caught:
        _check(_payload(f"{site}{path}"), policy)
    assert (caught.value.status, caught.value.code) == (status, code)
    assert caught.value.param == "messages[0].content[1].image_url"


def test_unreachable_remote_image_is_a_400() -> None:
    with pytest.raises(ApiError) as caught:
        _check(_payload("http://127.0.0.1:9/a.png"), ImagePolicy(remote_urls=True, fetch_timeout=2))
    assert (caught.value.status, caught.value.code) == (400, "image_fetch_failed")


def test_webp_is_handed_on_as_png(tmp_path: Path) -> None:
    from PIL import Image

    write_png(tmp_path / "a.png")
    with Image.open(tmp_path / "a.png") as img:
        img.save(tmp_path / "a.webp", format="WEBP", lossless=True)
        pixels = img.convert("RGB").tobytes()
    data = base64.b64encode((tmp_path / "a.webp").read_bytes()).decode()
    out = _check(_payload("data:image/webp;base64," + data), ImagePolicy())
    url = out["messages"][0]["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    (tmp_path / "out.png").write_bytes(base64.b64decode(url.split(",", 1)[1]))
    with Image.open(tmp_path / "out.png") as again:
        assert again.convert("RGB").tobytes() == pixels  # lossless WebP: same pixels


def test_text_only_requests_pass_untouched() -> None:
    payload = {"messages": [{"role": "user", "content": "hi"}]}
    assert asyncio.run(check_request(payload, ImagePolicy(), ("text",), "tiny")) == payload
