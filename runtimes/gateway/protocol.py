"""Deadlines on what a client sends: a request's head, then its body.

uvicorn arms no timer between a connection's first byte and the end of a request's headers (its
keep-alive timer stops at the first byte), so a client that sends half a header, or nothing,
holds a connection and its memory for ever; a thousand such clients hold a thousand. The
gateway's HTTP protocol is uvicorn's own (httptools) with one timer more: the head must be
complete within :attr:`ConnectionLimits.head_s` of the connection or of the request's first
byte, else the connection is closed. The body then has :attr:`ConnectionLimits.body_s` in all
(:class:`runtimes.gateway.middleware.BodyLimit` counts it, with the bytes).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a client may take to send a request (a real one takes milliseconds)."""

    head_s: float = 10.0
    body_s: float = 60.0  # 8 MiB at ~140 kB/s


LIMITS = ConnectionLimits()


def http_protocol(limits: ConnectionLimits = LIMITS) -> Any:
    """uvicorn's httptools protocol with the head deadline; "auto" where httptools is absent
    (uvicorn's h11 protocol then applies its own, weaker, rules)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is a dependency of the serve extra
        return "auto"

    class HeadDeadline(HttpToolsProtocol):  # type: ignore[misc]
        """Closes a connection whose request head is not complete in time."""

        head_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self.head_timer = self.loop.call_later(limits.head_s, self._expired)

        def _disarm(self) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
                self.head_timer = None

        def _expired(self) -> None:
            self.head_timer = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeadDeadline
