"""Image inputs of chat requests: checked in the gateway before any engine sees them.

OpenAI clients send images as chat ``content`` parts ``{"type": "image_url", "image_url":
{"url": ...}}``. The gateway accepts ``data:`` URLs of PNG, JPEG and WebP images, several per
message, and refuses everything else with a 4xx that names the field, so no runtime ever parses
an untrusted image the gateway did not look at first:

- more images than ``max_images`` in one request: 400;
- an image over ``max_bytes`` (decoded) or over ``max_pixels`` (width x height, read from the
  header before anything is decoded, so a decompression bomb is refused unread): 413;
- a format other than PNG, JPEG or WebP, a declared type that does not match the bytes, or bytes
  that do not decode: 400;
- ``http(s)`` URLs: 400 unless the operator allowed them (``<snap> set remote-images=true``);
  then the gateway fetches them itself, bounded by ``fetch_timeout`` (for the whole fetch),
  ``max_bytes`` and ``max_url_chars``, and hands the engine a ``data:`` URL (engines never fetch
  anything);
- images are decoded in at most ``decoders`` threads beside the event loop, never on it;
- any image sent to a model or engine that does not take images: 400.

Checked images are rewritten as canonical ``data:`` URLs (the sniffed type), the shape both
llama-server and the OpenVINO VLM pipeline read; WebP is re-encoded as PNG on the way, because
llama.cpp's image reader (stb_image) does not read WebP (llama-server answers "Failed to load
image" for it).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import io
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from runtimes.gateway.errors import ApiError

FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}
DATA_URL_RE = re.compile(r"^data:([\w.+-]+/[\w.+-]+)?((?:;[\w-]+=[^;,]*)*)(;base64)?,", re.I)


@dataclass(frozen=True)
class ImagePolicy:
    """The limits on image inputs (the snap's settings set ``remote_urls``)."""

    max_images: int = 8
    max_bytes: int = 5 * 1024 * 1024
    max_pixels: int = 4096 * 4096
    remote_urls: bool = False
    fetch_timeout: float = 10.0  # for the whole fetch: a byte every few seconds ends here too
    max_url_chars: int = 8192  # of an http(s) URL (what browsers and servers accept)
    decoders: int = 2  # images decoded at once, in threads beside the event loop


@dataclass(frozen=True)
class Image:
    """A checked image: its sniffed MIME type, bytes and size in pixels."""

    mime: str
    data: bytes
    width: int
    height: int

    def data_url(self) -> str:
        """The canonical ``data:`` URL handed to engines."""
        return f"data:{self.mime};base64," + base64.b64encode(self.data).decode("ascii")


def image_parts(payload: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every ``image_url`` part of the request's messages, with the field path naming it."""
    found: list[tuple[str, dict[str, Any]]] = []
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return found
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "image_url":
                found.append((f"messages[{i}].content[{j}].image_url", part))
    return found


async def check_request(
    payload: dict[str, Any], policy: ImagePolicy, inputs: Sequence[str], model: str
) -> dict[str, Any]:
    """Check the images of a chat payload; return it with every image as a canonical data URL.

    ``inputs`` is what the running engine takes in (``("text", "vision")`` for a model with its
    projector); ``model`` names the model in messages.
    """
    parts = image_parts(payload)
    if not parts:
        return payload
    field = parts[0][0]
    if "vision" not in inputs:
        raise ApiError(
            400,
            f"{field}: model {model!r} takes text only ({', '.join(inputs)}) on this engine; "
            "send the message without images",
            param=field,
            code="images_not_supported",
        )
    if len(parts) > policy.max_images:
        raise ApiError(
            400,
            f"{len(parts)} images in one request; at most {policy.max_images} are accepted",
            param=field,
            code="too_many_images",
        )
    for where, part in parts:
        url = _url(where, part)
        image = await _load(where, url, policy)
        part["image_url"] = {**part["image_url"], "url": image.data_url()}
    return payload


def _url(where: str, part: dict[str, Any]) -> str:
    spec = part.get("image_url")
    url = spec.get("url") if isinstance(spec, dict) else spec
    if not isinstance(url, str) or not url:
        raise ApiError(
            400,
            f'{where}.url is missing: give {{"url": "data:image/png;base64,..."}}',
            param=where,
            code="invalid_image",
        )
    return url


async def _load(where: str, url: str, policy: ImagePolicy) -> Image:
    if DATA_URL_RE.match(url):
        return await _off_the_loop(policy, _decode_inline, where, url, policy)
    if url.lower().startswith(("http://", "https://")):
        if not policy.remote_urls:
            raise ApiError(
                400,
                f"{where}.url is a remote address; this server does not fetch images. Send the "
                "image inline as a data: URL (base64), or have the operator allow remote images "
                "(`<snap> set remote-images=true`)",
                param=where,
                code="remote_image_refused",
            )
        data = await _fetch(where, url, policy)
        return await _off_the_loop(policy, inspect, where, data, None, policy)
    raise ApiError(
        400,
        f"{where}.url must be a data: URL (data:image/png;base64,...) of a PNG, JPEG or WebP image",
        param=where,
        code="invalid_image",
    )


_DECODERS: dict[int, ThreadPoolExecutor] = {}


async def _off_the_loop(policy: ImagePolicy, work: Callable[..., Image], *args: Any) -> Image:
    """Decoding a large image takes the CPU for a while: in one of ``policy.decoders`` threads,
    so the event loop (``/health``, every stream) keeps answering and at most that many decode
    at once; the others wait their turn without holding the loop."""
    pool = _DECODERS.get(policy.decoders)
    if pool is None:
        pool = _DECODERS[policy.decoders] = ThreadPoolExecutor(
            policy.decoders, thread_name_prefix="image-decode"
        )
    return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(work, *args))


def _decode_inline(where: str, url: str, policy: ImagePolicy) -> Image:
    declared, data = _decode_data_url(where, url, policy)
    return inspect(where, data, declared, policy)


def _decode_data_url(where: str, url: str, policy: ImagePolicy) -> tuple[str | None, bytes]:
    match = DATA_URL_RE.match(url)
    assert match is not None
    declared = match.group(1).lower() if match.group(1) else None
    body = url[match.end() :]
    if not match.group(3):
        raise ApiError(
            400,
            f"{where}.url: only base64 data: URLs are accepted (data:image/png;base64,...)",
            param=where,
            code="invalid_image",
        )
    # base64 is 4 characters per 3 bytes: refuse what cannot fit before decoding it
    if len(body) * 3 // 4 > policy.max_bytes + 3:
        raise _too_big(where, len(body) * 3 // 4, policy)
    try:
        data = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(
            400,
            f"{where}.url: the data: URL is not valid base64",
            param=where,
            code="invalid_image",
        ) from None
    if len(data) > policy.max_bytes:
        raise _too_big(where, len(data), policy)
    return declared, data


def _too_big(where: str, size: int, policy: ImagePolicy) -> ApiError:
    return ApiError(
        413,
        f"{where}: the image is {size} bytes; at most {policy.max_bytes} bytes per image are "
        "accepted. Send a smaller or more compressed image",
        param=where,
        code="image_too_large",
    )


async def _fetch(where: str, url: str, policy: ImagePolicy) -> bytes:
    """GET a remote image (operator-enabled only), cut off at ``max_bytes`` and at
    ``fetch_timeout`` for the whole fetch; any failure is the client's 400, naming the part."""
    import httpx

    if len(url) > policy.max_url_chars:
        raise _fetch_failed(where, f"the URL is {len(url)} characters, over {policy.max_url_chars}")
    try:
        return await asyncio.wait_for(_get(where, url, policy), policy.fetch_timeout)
    except asyncio.TimeoutError:
        raise _fetch_failed(where, f"it did not arrive within {policy.fetch_timeout:g} s") from None
    except (httpx.HTTPError, httpx.InvalidURL, ValueError, UnicodeError) as exc:
        raise _fetch_failed(where, f"it could not be fetched ({type(exc).__name__})") from None


def _fetch_failed(where: str, why: str) -> ApiError:
    return ApiError(400, f"{where}.url: {why}", param=where, code="image_fetch_failed")


async def _get(where: str, url: str, policy: ImagePolicy) -> bytes:
    import httpx

    chunks: list[bytes] = []
    size = 0
    async with (
        httpx.AsyncClient(timeout=policy.fetch_timeout, follow_redirects=False) as client,
        client.stream("GET", url) as response,
    ):
        if response.status_code != 200:
            raise _fetch_failed(where, f"fetching the image answered HTTP {response.status_code}")
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > policy.max_bytes:
                raise _too_big(where, size, policy)
            chunks.append(chunk)
    return b"".join(chunks)


def inspect(where: str, data: bytes, declared: str | None, policy: ImagePolicy) -> Image:
    """Sniff the format, read the size from the header, then decode fully (bounded)."""
    from PIL import Image as PilImage
    from PIL import UnidentifiedImageError

    try:
        with PilImage.open(io.BytesIO(data)) as probe:
            kind, (width, height) = probe.format or "", probe.size
    except (UnidentifiedImageError, OSError, ValueError, PilImage.DecompressionBombError):
        raise _unreadable(where) from None
    mime = FORMATS.get(kind)
    if mime is None:
        raise ApiError(
            400,
            f"{where}: {kind or 'this'} images are not accepted; send PNG, JPEG or WebP",
            param=where,
            code="unsupported_image_format",
        )
    if declared is not None and declared not in (mime, "image/jpg" if kind == "JPEG" else mime):
        raise ApiError(
            400,
            f"{where}: the data: URL says {declared} but the bytes are {mime}",
            param=where,
            code="invalid_image",
        )
    if width * height > policy.max_pixels:
        raise ApiError(
            413,
            f"{where}: the image is {width}x{height} pixels; at most {policy.max_pixels} pixels "
            "are accepted. Scale it down (the model sees a few hundred pixels per side anyway)",
            param=where,
            code="image_too_large",
        )
    try:
        with PilImage.open(io.BytesIO(data)) as full:
            full.load()  # truncated or corrupt bytes fail here, not in the engine
            if kind == "WEBP":  # llama.cpp's image reader (stb_image) has no WebP: hand it PNG
                out = io.BytesIO()
                full.save(out, format="PNG")
                mime, data = FORMATS["PNG"], out.getvalue()
    except (OSError, ValueError, SyntaxError):
        raise _unreadable(where) from None
    return Image(mime, data, width, height)


def _unreadable(where: str) -> ApiError:
    return ApiError(
        400,
        f"{where}: the bytes are not a readable PNG, JPEG or WebP image",
        param=where,
        code="invalid_image",
    )
