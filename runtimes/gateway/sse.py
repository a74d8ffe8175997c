"""What every streamed answer of the gateway shares, whatever the engine behind it.

Headers go out at once (within :data:`HEAD_GRACE_S`, which lets an error found at the start still
be a proper status), SSE comments keep a queued request alive every :data:`KEEPALIVE_S`, and the
time to the first token and between tokens is measured the same way for llama-server's relayed
streams and for in-process engines, so ``/metrics`` means one thing everywhere.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from fastapi.responses import StreamingResponse

from runtimes.gateway.metrics import Metrics

try:  # orjson: several times faster on the per-token path; the stdlib where it is missing
    import orjson

    loads: Callable[[bytes | str], Any] = orjson.loads
    dumps: Callable[[Any], bytes] = orjson.dumps
except ImportError:  # pragma: no cover - orjson is a dependency of the serve extra
    loads = json.loads

    def dumps(data: Any) -> bytes:
        return json.dumps(data, separators=(",", ":")).encode()


HEAD_GRACE_S = 0.25
KEEPALIVE_S = 2.0
DONE = b"data: [DONE]\n\n"


def event(data: dict[str, Any]) -> bytes:
    """One SSE ``data:`` event."""
    return b"data: " + dumps(data) + b"\n\n"


def streaming(events: AsyncIterator[bytes] | Iterable[bytes]) -> StreamingResponse:
    """A server-sent event stream that no proxy between us and the client buffers."""
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


class TokenClock:
    """Time to the first token and between tokens of one stream, into ``metrics``."""

    def __init__(self, metrics: Metrics, started: float) -> None:
        self.metrics = metrics
        self.started = started
        self.last: float | None = None

    def tick(self) -> None:
        """A piece of text has just been sent."""
        now = time.monotonic()
        if self.last is None:
            self.metrics.observe("time_to_first_token_seconds", now - self.started)
        else:
            self.metrics.observe("inter_token_latency_seconds", now - self.last)
        self.last = now


class SseEvents:
    """The ``data:`` payloads of an SSE body fed piece by piece, as raw bytes, in arrival order
    (split by hand: cheaper than decoding and splitting lines, which matters on a machine whose
    cores also run llama-server)."""

    def __init__(self) -> None:
        self.pending = b""

    def feed(self, piece: bytes) -> list[bytes]:
        """The payloads completed by ``piece`` (a partial event waits for the next one)."""
        pending = self.pending + piece
        found = []
        while (cut := pending.find(b"\n\n")) >= 0:
            event, pending = pending[:cut], pending[cut + 2 :]
            for line in event.split(b"\n"):
                if line.startswith(b"data: "):
                    found.append(line[6:].strip())
        self.pending = pending
        return found
