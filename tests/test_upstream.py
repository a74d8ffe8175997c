"""The gateway's streaming client for llama-server (runtimes.llamaserver.upstream), against a peer
on a Unix
socket that sends exactly the bytes each case needs: chunked bodies split anywhere, a close in
the middle, garbage, a flood that a slow reader must pause. The happy path against the real
llama-server is covered by every streaming test of test_llama_server.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from runtimes.llamaserver.upstream import HIGH_WATER, UpstreamError, open_stream

Peer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


async def _request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head + await reader.readexactly(length)


def _serve(tmp_path: Path, peer: Peer, client: Callable[[str], Awaitable[object]]) -> object:
    socket = str(tmp_path / "peer.sock")

    async def main() -> object:
        server = await asyncio.start_unix_server(peer, socket)
        async with server:
            return await asyncio.wait_for(client(socket), 30)

    return asyncio.run(main())


def test_a_chunked_stream_arrives_whole_and_in_order(tmp_path: Path) -> None:
    seen: list[bytes] = []

    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await _request(reader))
        body = _chunk(b"data: one\n\n") + _chunk(b"data: two\n\n") + b"0\r\n\r\n"
        wire = HEAD + body
        for cut in range(0, len(wire), 7):  # split mid-head, mid-size line, mid-data
            writer.write(wire[cut : cut + 7])
            await writer.drain()
            await asyncio.sleep(0)
        await asyncio.sleep(0.2)  # the stream must end at the last chunk, not at the close
        writer.close()

    async def client(socket: str) -> object:
        stream = await open_stream(socket, "/v1/completions", b'{"prompt":"Hi"}')
        return stream.status_code, await stream.aread()

    assert _serve(tmp_path, peer, client) == (200, b"data: one\n\ndata: two\n\n")
    request = seen[0]
    assert request.startswith(b"POST /v1/completions HTTP/1.1\r\n")
    assert b"Content-Length: 15\r\n" in request and request.endswith(b'\r\n\r\n{"prompt":"Hi"}')


def test_an_error_status_comes_with_its_body(tmp_path: Path) -> None:
    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        body = b'{"error":{"message":"bad","code":400}}'
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        writer.close()

    async def client(socket: str) -> object:
        stream = await open_stream(socket, "/v1/chat/completions", b"{}")
        return stream.status_code, await stream.aread()

    assert _serve(tmp_path, peer, client) == (400, b'{"error":{"message":"bad","code":400}}')


def test_a_close_in_the_middle_is_an_upstream_error(tmp_path: Path) -> None:
    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(HEAD + _chunk(b"data: one\n\n"))
        await writer.drain()
        writer.close()

    async def client(socket: str) -> object:
        stream = await open_stream(socket, "/v1/completions", b"{}")
        got = []
        with pytest.raises(UpstreamError, match="closed the stream early"):
            async for piece in stream.pieces():
                got.append(piece)
        return got

    assert _serve(tmp_path, peer, client) == [b"data: one\n\n"]


def test_garbage_is_an_upstream_error_not_a_hang(tmp_path: Path) -> None:
    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(5)

    async def client(socket: str) -> object:
        with pytest.raises(UpstreamError, match="malformed"):
            await open_stream(socket, "/v1/completions", b"{}")
        return "refused"

    assert _serve(tmp_path, peer, client) == "refused"


def test_a_missing_socket_is_an_os_error(tmp_path: Path) -> None:
    async def client() -> None:
        await open_stream(str(tmp_path / "nobody.sock"), "/v1/completions", b"{}")

    with pytest.raises(OSError):
        asyncio.run(client())


def test_a_slow_reader_pauses_llama_server_and_loses_nothing(tmp_path: Path) -> None:
    piece = bytes(range(256)) * 64  # 16 KiB
    pieces = 4 * HIGH_WATER // len(piece)

    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(HEAD)
        for _ in range(pieces):
            writer.write(_chunk(piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def client(socket: str) -> object:
        stream = await open_stream(socket, "/v1/completions", b"{}")
        await asyncio.sleep(0.5)  # the peer floods while nobody reads
        paused = stream._protocol.paused
        queued = stream._protocol.queued
        body = await stream.aread()
        return paused, queued <= HIGH_WATER + 256 * 1024 + len(piece), body  # + one read

    paused, bounded, body = _serve(tmp_path, peer, client)  # type: ignore[misc]
    assert paused and bounded
    assert body == piece * pieces
