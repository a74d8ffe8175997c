"""Benchmark clients in processes of their own, as users' clients are.

A client in the benchmark's own process shares its interpreter (and GIL) with every other
client it runs, so one client's parsing delays the next one's request: the figure then measures
the client too. :class:`ClientPool` keeps one process per client, started once (the imports are
paid before any clock runs). A round hands each process one call and a start time on the
system-wide monotonic clock, a little ahead; every process waits for that moment, so requests
leave together, then sends back what it timed on the same clock.

Streams (:func:`stream`) use the official ``openai`` client, one per process and server, and
ask for a connection per request (``Connection: close``): no stream meets a connection that
the server closed while it sat idle between rounds. Embeddings (:func:`embed`) use the standard
library's ``http.client`` and keep one connection per process and server open, as a client's
connection pool does: an embedding request is about a millisecond of server work, about what
opening a connection and a full-featured client cost on the same two cores, so a leaner
client and a kept connection leave the server's share of the cores to the server.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

LEAD_S = 0.1  # how far ahead of now a round starts: time for every process to get its call
MODEL = "bench"  # the model id of every benchmark server (its manifest's name)
ONE_REQUEST = {"Connection": "close"}  # a connection per stream (see above)
_clients: dict[tuple[str, str], Any] = {}  # (kind, base URL) -> client, per process

Call = tuple[Callable[..., Any], tuple[Any, ...]]


class ClientPool:
    """``size`` client processes; :meth:`run` starts one call in each of the first ones."""

    def __init__(self, size: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._ends: list[Connection] = []
        self._processes = []
        for _ in range(size):
            mine, theirs = context.Pipe()
            process = context.Process(target=_serve, args=(theirs,), daemon=True)
            process.start()
            self._ends.append(mine)
            self._processes.append(process)

    def run(self, calls: Sequence[Call]) -> list[Any]:
        """Each call's result; ``call(start, *args)`` runs in a process of its own, all waiting
        for the same ``start`` (``time.monotonic()`` in every process)."""
        assert len(calls) <= len(self._ends), "more calls than client processes"
        start = time.monotonic() + LEAD_S
        for end, (function, args) in zip(self._ends, calls, strict=False):
            end.send((function, args, start))
        results = [end.recv() for end in self._ends[: len(calls)]]
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results

    def cpu_seconds(self) -> float:
        """CPU time (user and system) the client processes have used so far, all together: a
        round's share of the shared cores, read between rounds."""
        for end in self._ends:
            end.send("cpu")
        return sum(end.recv() for end in self._ends)

    def close(self) -> None:
        for end in self._ends:
            end.send(None)
        for process in self._processes:
            process.join(timeout=10)


def _serve(connection: Connection) -> None:
    """A client process: run each call it is sent ("cpu": say its CPU time); None ends it."""
    while (message := connection.recv()) is not None:
        if message == "cpu":
            connection.send(time.process_time())
            continue
        function, args, start = message
        try:
            connection.send(function(start, *args))
        except Exception as exc:  # handed to the benchmark, which stops with it
            connection.send(exc)


def wait_until(moment: float) -> float:
    """Sleep until ``moment`` on the monotonic clock; the time it really is then."""
    left = moment - time.monotonic()
    if left > 0:
        time.sleep(left)
    return time.monotonic()


def openai_client(base: str) -> Any:
    """This process's official ``openai`` client for ``base``."""
    import openai

    key = ("openai", base)
    if key not in _clients:
        _clients[key] = openai.OpenAI(
            base_url=f"{base}/v1", api_key="-", max_retries=0, default_headers=ONE_REQUEST
        )
    return _clients[key]


def stream(start: float, base: str, prompt: str, tokens: int) -> tuple[float, float, float, int]:
    """One streamed completion of exactly ``tokens`` tokens: (start, first token, end, tokens)."""
    client = openai_client(base)
    began = wait_until(start)
    chunks = client.completions.create(
        model=MODEL,
        prompt=prompt,
        max_tokens=tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},  # usage comes only when asked, as with OpenAI
        extra_body={"ignore_eos": True},
    )
    first, produced = 0.0, 0
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].text and not first:
            first = time.monotonic()
        if chunk.usage is not None:
            produced = chunk.usage.completion_tokens
    return began, first, time.monotonic(), produced


def embed(start: float, base: str, text: str) -> tuple[float, float]:
    """One single-text embedding request, vectors as base64 (the openai client's default):
    (start, end). The client is the standard library's ``http.client``, the leanest HTTP/1.1
    client at hand: every client shares the server's two cores, and an embedding request costs
    the server about as much CPU as a full-featured client spends making it. Like the openai
    client's pool, it keeps its connection to each server open between requests (connected
    before the clock starts); one the server closed while idle is opened again once."""
    import json

    body = json.dumps({"model": MODEL, "input": text, "encoding_format": "base64"}).encode()
    headers = {"Content-Type": "application/json"}
    connection = kept_connection(base)
    began = wait_until(start)
    try:
        connection.request("POST", "/v1/embeddings", body, headers)
        reply = connection.getresponse()
    except (ConnectionError, OSError):  # closed by the server while idle (keep-alive timeout)
        connection = kept_connection(base, fresh=True)
        connection.request("POST", "/v1/embeddings", body, headers)
        reply = connection.getresponse()
    answer = reply.read()
    ended = time.monotonic()
    if reply.status != 200:
        raise RuntimeError(f"embedding failed: {reply.status} {answer[:500]!r}")
    return began, ended


def kept_connection(base: str, *, fresh: bool = False) -> Any:
    """This process's open ``http.client`` connection to ``base`` (a new one when ``fresh``)."""
    import http.client
    from urllib.parse import urlsplit

    key = ("http.client", base)
    if fresh or key not in _clients:
        if key in _clients:
            _clients[key].close()
        where = urlsplit(base)
        connection = http.client.HTTPConnection(
            where.hostname or "127.0.0.1", where.port, timeout=300
        )
        connection.connect()
        _clients[key] = connection
    return _clients[key]
