"""`<snap> chat`: a conversation with the local API, streamed as it is generated.

It speaks the same OpenAI-compatible API any client would (``/v1/chat/completions`` with
``stream: true``), so it doubles as a check that the server works. In a terminal it prompts;
piped, it reads one message per line from stdin and prints one answer per message.
``--image FILE`` attaches pictures to the first message, as OpenAI clients do (``image_url``
content parts with ``data:`` URLs), for models that take images.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import requests

from snapcommon.errors import SnapbuildError


class ChatError(SnapbuildError):
    """The server could not be reached or answered with an error."""


def base_url(host: str, port: int) -> str:
    """The endpoint's base URL; a wildcard bind is reached through loopback."""
    if host in {"0.0.0.0", "::"}:
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/v1"


# the formats the server accepts, by their first bytes (the server checks them again)
MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"))


def image_part(path: Path) -> dict[str, Any]:
    """A chat content part carrying the image file at ``path`` as a ``data:`` URL."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ChatError(f"cannot read the image {path}: {exc.strerror}") from None
    mime = next((m for magic, m in MAGIC if data.startswith(magic)), None)
    if mime is None and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        mime = "image/webp"
    if mime is None:
        raise ChatError(
            f"{path} is not a PNG, JPEG or WebP image",
            resolution="Convert it to PNG or JPEG first.",
        )
    url = f"data:{mime};base64," + base64.b64encode(data).decode("ascii")
    return {"type": "image_url", "image_url": {"url": url}}


def user_message(text: str, images: Sequence[Path] = ()) -> dict[str, Any]:
    """A user message: plain text, or text and image parts when images are attached."""
    if not images:
        return {"role": "user", "content": text}
    parts = [{"type": "text", "text": text}, *(image_part(p) for p in images)]
    return {"role": "user", "content": parts}


def sampling(*, max_tokens: int | None = None, temperature: float | None = None) -> dict[str, Any]:
    """The request fields the chat's options set; what is left out keeps the server's default."""
    fields = {"max_tokens": max_tokens, "temperature": temperature}
    return {key: value for key, value in fields.items() if value is not None}


def stream_reply(
    url: str,
    model: str,
    messages: list[dict[str, Any]],
    *,
    options: Mapping[str, Any] | None = None,
) -> Iterator[str]:
    """Yield the answer's text deltas as the server sends them."""
    body: dict[str, Any] = {**(options or {}), "model": model, "messages": messages, "stream": True}
    try:
        resp = requests.post(f"{url}/chat/completions", json=body, stream=True, timeout=300)
    except requests.ConnectionError:
        raise ChatError(
            f"the server does not answer at {url}",
            resolution="Check `status`: the service may be stopped or still loading.",
        ) from None
    with resp:
        if resp.status_code != 200:
            raise ChatError(
                f"the server refused the request ({resp.status_code})", details=resp.text
            )
        for line in resp.iter_lines(decode_unicode=True):
            if not line or not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return
            chunk = json.loads(data)
            if "error" in chunk:
                raise ChatError("the server failed mid-answer", details=json.dumps(chunk["error"]))
            for choice in chunk.get("choices", []):
                text = (choice.get("delta") or {}).get("content")
                if text:
                    yield text


def converse(
    url: str,
    model: str,
    *,
    stdin: IO[str],
    stdout: IO[str],
    interactive: bool,
    options: Mapping[str, Any] | None = None,
    images: Sequence[Path] = (),
) -> None:
    """Read messages until EOF (or /exit), keep the history, stream each answer; ``images``
    go with the first message."""
    history: list[dict[str, Any]] = []
    pending = list(images)
    if interactive:
        stdout.write(f"Chatting with {model} at {url} (Ctrl-D or /exit to leave)\n")
    while True:
        if interactive:
            stdout.write("> ")
            stdout.flush()
        line = stdin.readline()
        if not line:
            break
        message = line.strip()
        if not message:
            continue
        if message in {"/exit", "/quit"}:
            break
        history.append(user_message(message, pending))
        pending = []
        parts = []
        for text in stream_reply(url, model, history, options=options):
            parts.append(text)
            stdout.write(text)
            stdout.flush()
        stdout.write("\n")
        stdout.flush()
        history.append({"role": "assistant", "content": "".join(parts)})


def run_chat(
    url: str, model: str, *, options: Mapping[str, Any] | None = None, images: Sequence[Path] = ()
) -> None:
    """The CLI entry: interactive in a terminal, line by line when piped."""
    converse(
        url,
        model,
        stdin=sys.stdin,
        stdout=sys.stdout,
        interactive=sys.stdin.isatty(),
        options=options,
        images=images,
    )
