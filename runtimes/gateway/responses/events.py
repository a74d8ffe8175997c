"""A Responses answer built from the chat chunks of any engine: its typed stream events, and the
response object they end with.

OpenAI's clients rebuild a response from its events (``responses.stream`` asserts that each
delta lands in an item added before), so the events follow OpenAI's order: ``response.created``
and ``response.in_progress``; for each output item, ``response.output_item.added``, then for a
message ``response.content_part.added`` and ``response.output_text.delta`` events, for a function
call ``response.function_call_arguments.delta`` events; each item closed by its ``.done`` events
before the next opens; ``response.completed`` (or ``response.incomplete`` when the output hit
``max_output_tokens``). A whole answer is the same build, its events left unsent.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from typing import Any

from runtimes.gateway.responses.request import FunctionTool, ResponseRequest

Event = dict[str, Any]


def new_id(prefix: str) -> str:
    """An id in OpenAI's style (``resp_``, ``msg_``, ``fc_``)."""
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponseBuilder:
    """One response, fed chat chunks in order; every method returns the events to send."""

    def __init__(self, body: ResponseRequest, model_id: str) -> None:
        self.body = body
        self.model_id = model_id
        self.id = new_id("resp")
        self.created = int(time.time())
        self.items: list[dict[str, Any]] = []
        self.calls: dict[int, dict[str, Any]] = {}  # the chat call index -> its item
        self.open: dict[str, Any] | None = None  # the item receiving deltas
        self.usage: dict[str, Any] | None = None
        self.finish: str | None = None
        self.error: dict[str, Any] | None = None  # the engine's, when generation failed
        self.sequence = 0

    def start(self) -> list[Event]:
        """The response exists and is being generated."""
        snapshot = self.response("in_progress")
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    def chunk(self, chunk: dict[str, Any]) -> list[Event]:
        """The events one chat chunk adds (the first choice: the Responses API has one)."""
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        events: list[Event] = []
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                events += self._text(delta["content"])
            for call in delta.get("tool_calls") or []:
                events += self._call(call)
            self.finish = choice.get("finish_reason") or self.finish
        return events

    def end(self) -> list[Event]:
        """Every open item closed, then ``response.completed`` (or ``.incomplete``)."""
        events = [] if self.items else self._text("")
        events += self._close()
        status = "incomplete" if self.finish == "length" else "completed"
        return [*events, self._event(f"response.{status}", response=self.response(status))]

    def failed(self, error: dict[str, Any]) -> list[Event]:
        """An error after the stream began: OpenAI's ``error`` event and ``response.failed``."""
        self.error = error
        message = str(error.get("message") or "generation failed")
        failed = self.response("failed")
        failed["error"] = {"code": "server_error", "message": message}
        return [
            self._event("error", code=error.get("code"), message=message, param=error.get("param")),
            self._event("response.failed", response=failed),
        ]

    def response(self, status: str) -> dict[str, Any]:
        """The response object as it stands."""
        body = self.body
        fmt = body.text.format.model_dump(by_alias=True, exclude_none=True)
        choice = body.tool_choice
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens,
            "model": self.model_id,
            "output": copy.deepcopy(self.items),
            "parallel_tool_calls": body.parallel_tool_calls,
            "previous_response_id": body.previous_response_id,
            "reasoning": None,
            "store": body.store,
            "temperature": 1.0 if body.temperature is None else body.temperature,
            "text": {"format": fmt},
            "tool_choice": choice if isinstance(choice, str) else choice.model_dump(),
            "tools": [_tool(t) for t in body.tools if isinstance(t, FunctionTool)],
            "top_p": 1.0 if body.top_p is None else body.top_p,
            "truncation": "disabled",
            "metadata": body.metadata or {},
            # the published schema has usage an object or absent (its example's null fails it)
            **({"usage": _usage(self.usage)} if status != "in_progress" else {}),
            **({"user": body.user} if body.user is not None else {}),  # a string or absent
        }

    def reply(self) -> dict[str, Any]:
        """The answer as a chat message, for the conversation a later request continues."""
        text = "".join(
            part["text"]
            for item in self.items
            if item["type"] == "message"
            for part in item["content"]
        )
        calls = [
            {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            for item in self.items
            if item["type"] == "function_call"
        ]
        return {
            "role": "assistant",
            "content": text or None,
            **({"tool_calls": calls} if calls else {}),
        }

    def _text(self, text: str) -> list[Event]:
        events: list[Event] = []
        item = self.open
        if item is None or item["type"] != "message":
            events += self._close()
            item = {
                "id": new_id("msg"),
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            events += self._add(item)
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item["content"].append(part)
            events.append(
                self._event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=self._index(item),
                    content_index=0,
                    part=dict(part),
                )
            )
        if text:
            item["content"][0]["text"] += text
            events.append(
                self._event(
                    "response.output_text.delta",
                    item_id=item["id"],
                    output_index=self._index(item),
                    content_index=0,
                    delta=text,
                    logprobs=[],
                )
            )
        return events

    def _call(self, delta: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        index = int(delta.get("index", 0))
        function = delta.get("function") or {}
        item = self.calls.get(index)
        if item is None:
            events += self._close()
            item = {
                "id": new_id("fc"),
                "type": "function_call",
                "status": "in_progress",
                "call_id": delta.get("id") or new_id("call"),
                "name": function.get("name") or "",
                "arguments": "",
            }
            self.calls[index] = item
            events += self._add(item)
        fragment = function.get("arguments") or ""
        if fragment:
            item["arguments"] += fragment
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=self._index(item),
                    delta=fragment,
                )
            )
        return events

    def _add(self, item: dict[str, Any]) -> list[Event]:
        self.items.append(item)
        self.open = item
        added = copy.deepcopy(item)
        return [
            self._event("response.output_item.added", output_index=self._index(item), item=added)
        ]

    def _close(self) -> list[Event]:
        """The open item's ``.done`` events (the item is complete, or cut by the length)."""
        item, self.open = self.open, None
        if item is None:
            return []
        item["status"] = "completed" if _complete(item, self.finish) else "incomplete"
        where = {"item_id": item["id"], "output_index": self._index(item)}
        if item["type"] == "message":
            part = item["content"][0]
            events = [
                self._event(
                    "response.output_text.done",
                    **where,
                    content_index=0,
                    text=part["text"],
                    logprobs=[],
                ),
                self._event(
                    "response.content_part.done", **where, content_index=0, part=dict(part)
                ),
            ]
        else:
            events = [
                self._event(
                    "response.function_call_arguments.done",
                    **where,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            ]
        done = copy.deepcopy(item)
        return [
            *events,
            self._event("response.output_item.done", output_index=where["output_index"], item=done),
        ]

    def _index(self, item: dict[str, Any]) -> int:
        return next(i for i, known in enumerate(self.items) if known is item)

    def _event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, **fields, "sequence_number": self.sequence}
        self.sequence += 1
        return event


def _complete(item: dict[str, Any], finish: str | None) -> bool:
    """Whether an item is whole: not cut by the length, or a call whose arguments are already
    a whole JSON value (emulated calls only ever arrive whole)."""
    if finish != "length":
        return True
    if item["type"] != "function_call":
        return False
    try:
        json.loads(item["arguments"])
    except ValueError:
        return False
    return True


def _tool(tool: FunctionTool) -> dict[str, Any]:
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "strict": tool.strict,
    }


def _usage(usage: dict[str, Any] | None) -> dict[str, Any]:
    prompt = int((usage or {}).get("prompt_tokens", 0))
    completion = int((usage or {}).get("completion_tokens", 0))
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }
