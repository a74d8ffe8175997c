"""The responses this server process keeps for ``previous_response_id``: in memory, bounded.

A snap's server has no database and should not grow without end, so it keeps the last
:data:`MAX_RESPONSES` stored responses, at most :data:`MAX_BYTES` of them (their conversations
counted as JSON, images included), dropping the oldest first; a restart forgets them all. An id
it does not hold (never stored, ``store: false``, dropped, or from before a restart) is a 400
``previous_response_not_found`` that says so, as OpenAI answers an unknown id.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from runtimes.gateway.errors import ApiError

MAX_RESPONSES = 256
MAX_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class Stored:
    """A stored response: the conversation up to and including its answer (without its
    instructions, which a later request does not inherit), and the response object."""

    messages: list[dict[str, Any]]
    response: dict[str, Any]
    size: int


class ResponseStore:
    """The kept responses, oldest first."""

    def __init__(self, max_responses: int = MAX_RESPONSES, max_bytes: int = MAX_BYTES) -> None:
        self.max_responses = max_responses
        self.max_bytes = max_bytes
        self.kept: OrderedDict[str, Stored] = OrderedDict()
        self.bytes = 0

    def put(self, messages: list[dict[str, Any]], response: dict[str, Any]) -> None:
        """Keep a response; the oldest go when the bounds are passed (one larger than the
        whole budget is not kept)."""
        size = len(json.dumps(messages)) + len(json.dumps(response))
        if size > self.max_bytes:
            return
        self.kept[response["id"]] = Stored(messages, response, size)
        self.bytes += size
        while len(self.kept) > self.max_responses or self.bytes > self.max_bytes:
            _, dropped = self.kept.popitem(last=False)
            self.bytes -= dropped.size

    def find(self, ident: str) -> Stored | None:
        """A kept response (now the most recently used), or None."""
        stored = self.kept.get(ident)
        if stored is not None:
            self.kept.move_to_end(ident)
        return stored

    def previous(self, ident: str) -> Stored:
        """The response a request continues, or the 400 OpenAI answers for an id it does not
        know."""
        stored = self.find(ident)
        if stored is None:
            raise ApiError(
                400,
                f"Previous response with id {ident!r} not found: this server keeps the last "
                f"{self.max_responses} stored responses in memory, until it restarts",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        return stored
