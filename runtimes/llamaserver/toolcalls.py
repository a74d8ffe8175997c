"""Tool calls for models whose chat template knows no tools.

llama-server renders ``tools`` through the model's chat template and parses the model's own
tool-call syntax; a template without tool support (SmolLM2's, many small models') makes it drop
``tools`` silently, and an agent would never see its tools. For those models the gateway does
what llama.cpp's "generic" format used to: it describes the tools in a system message, constrains
the reply with a JSON schema (llama-server turns it into a grammar) to either a text response or
``{"tool_calls": [{"name", "arguments"}]}`` (only tool calls when ``tool_choice`` requires one),
and turns that JSON back into OpenAI's ``tool_calls``. Earlier tool calls and ``tool`` results in
the history become text the template can render.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from runtimes.gateway.errors import ApiError
from runtimes.requests import ChatCompletionRequest

PREAMBLE = (
    "You can call these tools. Answer with a JSON object: either "
    '{"tool_calls": [{"name": TOOL, "arguments": {...}}]} to call tools, or '
    '{"response": TEXT} to answer directly.'
)
REQUIRED = 'Answer with a JSON object {"tool_calls": [{"name": TOOL, "arguments": {...}}]}.'


def needs_emulation(body: ChatCompletionRequest, native: bool) -> bool:
    """Whether this request's tools must be emulated (the template cannot render them)."""
    return bool(body.tools) and body.tool_choice != "none" and not native


def rewrite(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The request llama-server gets: tools described, reply constrained, history as text.

    It rewrites the client's JSON (not the validated body) so that every field llama-server
    knows and the schemas do not still reaches it."""
    if payload.get("response_format") not in (None, {"type": "text"}):
        raise ApiError(
            400,
            "this model's chat template has no tool support, so tools are emulated with a JSON "
            "schema; response_format cannot be combined with them",
            param="response_format",
            code="unsupported_parameter",
        )
    tools = [t["function"] for t in payload["tools"]]
    choice = payload.get("tool_choice") or "auto"
    if isinstance(choice, dict):
        wanted = choice["function"]["name"]
        tools = [t for t in tools if t["name"] == wanted]
        if not tools:
            raise ApiError(
                400, f"tool_choice names {wanted!r}, which is not in tools", param="tool_choice"
            )
    required = choice == "required" or isinstance(choice, dict)
    parallel = payload.get("parallel_tool_calls", True) is not False
    calls = {
        "type": "array",
        "minItems": 1,
        **({} if parallel else {"maxItems": 1}),
        "items": {"anyOf": [_call_schema(t) for t in tools]},
    }
    only_calls = {
        "type": "object",
        "properties": {"tool_calls": calls},
        "required": ["tool_calls"],
        "additionalProperties": False,
    }
    text = {
        "type": "object",
        "properties": {"response": {"type": "string"}},
        "required": ["response"],
        "additionalProperties": False,
    }
    schema = only_calls if required else {"anyOf": [only_calls, text]}
    described = "\n".join(
        f"- {t['name']}: {t.get('description') or ''} parameters: "
        f"{json.dumps(t.get('parameters') or {'type': 'object'})}"
        for t in tools
    )
    system = f"{PREAMBLE if not required else REQUIRED}\nTools:\n{described}"
    out = {
        k: v for k, v in payload.items() if k not in ("tools", "tool_choice", "parallel_tool_calls")
    }
    out["messages"] = [{"role": "system", "content": system}, *map(_as_text, payload["messages"])]
    out["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "tool_reply", "schema": schema},
    }
    out["stream"] = False  # the reply is one JSON document: it is parsed whole, then sent
    out.pop("stream_options", None)
    return out


def _call_schema(tool: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "name": {"const": tool["name"]},
            "arguments": tool.get("parameters") or {"type": "object"},
        },
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def _as_text(message: dict[str, Any]) -> dict[str, Any]:
    """A history message the template can render: tool calls and results as text."""
    role = message.get("role")
    if role == "assistant" and message.get("tool_calls"):
        calls = [
            {
                "name": c["function"]["name"],
                "arguments": _loads(c["function"].get("arguments") or "{}"),
            }
            for c in message["tool_calls"]
        ]
        return {"role": "assistant", "content": json.dumps({"tool_calls": calls})}
    if role == "tool":
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        ident = message.get("tool_call_id") or "?"
        return {"role": "user", "content": f"Result of tool call {ident}: {content}"}
    return {k: v for k, v in message.items() if k in ("role", "content", "name")}


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def restore(data: dict[str, Any]) -> None:
    """Turn the constrained JSON reply back into OpenAI's message (in place)."""
    for choice in data.get("choices", []):
        message = choice.get("message") or {}
        try:
            reply = json.loads(message.get("content") or "")
        except ValueError:
            continue  # cut off by max_tokens: left as text, finish_reason says "length"
        if isinstance(reply, dict) and isinstance(reply.get("tool_calls"), list):
            message["content"] = None
            message["tool_calls"] = [
                {
                    "id": "call_" + uuid.uuid4().hex[:24],
                    "type": "function",
                    "function": {
                        "name": call.get("name"),
                        "arguments": json.dumps(call.get("arguments", {})),
                    },
                }
                for call in reply["tool_calls"]
            ]
            choice["finish_reason"] = "tool_calls"
        elif isinstance(reply, dict) and isinstance(reply.get("response"), str):
            message["content"] = reply["response"]


def as_stream(data: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """A whole (restored) chat completion as OpenAI stream chunks."""
    base = {
        "id": data["id"],
        "object": "chat.completion.chunk",
        "created": data["created"],
        "model": data["model"],
    }
    chunks: list[dict[str, Any]] = []
    for choice in data.get("choices", []):
        index = choice.get("index", 0)
        message = choice.get("message") or {}

        def chunk(delta: dict[str, Any], reason: str | None = None, i: int = index) -> None:
            chunks.append(
                {
                    **base,
                    "choices": [
                        {"index": i, "delta": delta, "logprobs": None, "finish_reason": reason}
                    ],
                }
            )

        chunk({"role": "assistant", "content": ""})
        if message.get("tool_calls"):
            chunk(
                {
                    "tool_calls": [
                        {"index": n, **call} for n, call in enumerate(message["tool_calls"])
                    ]
                }
            )
        elif message.get("content"):
            chunk({"content": message["content"]})
        chunk({}, choice.get("finish_reason") or "stop")
    if include_usage and data.get("usage"):
        chunks.append({**base, "choices": [], "usage": data["usage"]})
    return chunks
