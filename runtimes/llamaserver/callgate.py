"""llama-server's own tool calls (a template with tool support, ``tool_choice`` auto), kept
whole: a call is let through once it is complete, so a reply cut by ``max_tokens`` never carries
half a call, as on the emulated path (:mod:`runtimes.llamaserver.toolcalls`).

llama-server streams a call as OpenAI does (its id and name, then argument fragments as the
model writes them) and, when the length cuts a call, sends what it had. A call is whole when the
next one starts, or when the reply ends by itself; at a cut, a call is kept only if its
arguments already parse as JSON.
"""

from __future__ import annotations

import json
from typing import Any

from runtimes.llamaserver.relay import ChatShaper

Pieces = list[dict[str, Any]]  # the tool-call deltas of one call, in order


class CallGate(ChatShaper):
    """llama-server's chunks, with each choice's tool-call deltas held until the call is whole."""

    def __init__(self, model_id: str, *, want_usage: bool) -> None:
        super().__init__(model_id, want_usage=want_usage)
        self.held: dict[int, dict[int, Pieces]] = {}  # choice -> call index -> its deltas

    def reshape(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The chunk with the calls it completes (a choice left with nothing to say is dropped)."""
        choices = []
        for choice in chunk.get("choices") or []:
            delta = choice.setdefault("delta", {})
            held = self.held.setdefault(choice.get("index", 0), {})
            released = _hold(held, delta.pop("tool_calls", None) or [])
            reason = choice.get("finish_reason")
            if reason is not None:
                released += _release(held, cut=reason == "length")
            if released:
                delta["tool_calls"] = released
            if delta or reason is not None:
                choices.append(choice)
        return [{**chunk, "choices": choices}] if choices else []


def _hold(held: dict[int, Pieces], pieces: Pieces) -> Pieces:
    """Hold each piece with its call; a piece of a later call releases the earlier ones."""
    released: Pieces = []
    for piece in pieces:
        index = int(piece.get("index", 0))
        for earlier in sorted(i for i in held if i < index):
            released += held.pop(earlier)
        held.setdefault(index, []).append(piece)
    return released


def _release(held: dict[int, Pieces], *, cut: bool) -> Pieces:
    """Every held call at the end of the reply; at a cut, only those already whole."""
    released: Pieces = []
    for index in sorted(held):
        pieces = held.pop(index)
        if not cut or whole_arguments(
            "".join((p.get("function") or {}).get("arguments") or "" for p in pieces)
        ):
            released += pieces
    return released


def whole_arguments(arguments: str) -> bool:
    """Whether a call's arguments are a complete JSON value."""
    try:
        json.loads(arguments)
    except ValueError:
        return False
    return True


def keep_whole_calls(data: dict[str, Any]) -> None:
    """A whole answer cut by the length keeps only the calls whose arguments are whole."""
    for choice in data.get("choices", []):
        message = choice.get("message") or {}
        if choice.get("finish_reason") != "length" or not message.get("tool_calls"):
            continue
        calls = [
            c for c in message["tool_calls"] if whole_arguments(c["function"].get("arguments", ""))
        ]
        if calls:
            message["tool_calls"] = calls
        else:
            del message["tool_calls"]
            message["content"] = message.get("content") or ""
