"""The gateway's count of the requests it relays to llama-server.

llama-server counts its own slots, but only the gateway sees a request from its start to the
client's last byte (tools emulated, a stream relayed, a client that hung up): these counters are
``generations`` in /health and ``requests_in_flight`` in /metrics. Every request path of
:class:`~runtimes.llamaserver.engine.LlamaServerEngine` goes through :meth:`RequestCounts.begin`.
"""

from __future__ import annotations

from collections.abc import Callable

from runtimes.gateway.metrics import Metrics


class RequestCounts:
    """Requests in flight and how the others ended; :meth:`begin` is the one way in."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.active = 0
        self.ended = {"completed": 0, "cancelled": 0, "failed": 0}

    def begin(self) -> Callable[[str], None]:
        """Count one request in; the function returned counts it out as ``completed``,
        ``cancelled`` or ``failed`` (only its first call counts, so a path that can end in two
        places never counts a request out twice)."""
        self.active += 1
        self.metrics.in_flight(1)
        ended = False

        def end(outcome: str) -> None:
            nonlocal ended
            if not ended:
                ended = True
                self.active -= 1
                self.ended[outcome] += 1
                self.metrics.in_flight(-1)

        return end
