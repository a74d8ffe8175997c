"""Tool calls that are always well formed, whatever the model's chat template.

llama-server renders ``tools`` through the model's chat template and parses the model's own
tool-call syntax; a template without tool support (SmolLM2's, many small models') makes it drop
``tools`` silently. Even a template with tool support only guarantees a call for ``auto``: for
``required`` its grammar lets text come first (a reply cut by ``max_tokens`` then has no call),
a named ``tool_choice`` is read as ``auto``, and ``response_format`` replaces the tools. So the
gateway emulates tools for those requests (:func:`needs_emulation`) the way llama.cpp's
"generic" format did: it describes the tools in a system message and constrains the reply with
a JSON schema (llama-server turns it into a grammar) to ``{"tool_calls": [{"name",
"arguments"}, ...]}`` (exactly one call unless ``parallel_tool_calls`` allows more; only calls
when the choice requires one) or ``{"response": VALUE}`` (text, or JSON fitting the client's
``response_format``). :mod:`runtimes.llamaserver.toolreply` reads that reply back into OpenAI's
``tool_calls`` or content, whole (:func:`restore`) or streamed (:class:`ToolShaper`). Earlier tool
calls and ``tool`` results in the history become text the template can render.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from runtimes.gateway.errors import ApiError
from runtimes.llamaserver.callgate import keep_whole_calls
from runtimes.llamaserver.relay import ChatShaper, fix_whole
from runtimes.llamaserver.toolreply import Call, ReplyReader
from runtimes.requests import ChatCompletionRequest

PREAMBLE = (
    "You can call these tools. Answer with a JSON object: either "
    '{"tool_calls": [{"name": TOOL, "arguments": {...}}]} to call tools, or '
    '{"response": ANSWER} to answer directly.'
)
REQUIRED = 'Answer with a JSON object {"tool_calls": [{"name": TOOL, "arguments": {...}}]}.'
EMULATION_KEYS = ("tools", "tool_choice", "parallel_tool_calls", "response_format", "logprobs")


def needs_emulation(body: ChatCompletionRequest, native: bool) -> bool:
    """Whether this request's tools go through the gateway's JSON schema: always where the
    template has no tools; else for a required or named choice, or tools with response_format
    (llama-server's own path guarantees none of those)."""
    if not body.tools or body.tool_choice == "none":
        return False
    if not native:
        return True
    constrained = body.response_format is not None and body.response_format.type != "text"
    return body.tool_choice not in (None, "auto") or constrained


def path(native: bool) -> str:
    """Which way tools go, for /health."""
    if native:
        return "native for auto; emulated for required, a named function, or response_format"
    return "emulated (the chat template has no tool support)"


def without_tools(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A request whose tools are switched off (``tool_choice: none``) for a template that knows
    none: no tools, and the history's calls and results as text it can render."""
    out = {k: v for k, v in payload.items() if k not in ("tools", "tool_choice")}
    out["messages"] = [_as_text(m) for m in payload["messages"]]
    return out


def rewrite(payload: Mapping[str, Any], line_breaks: Sequence[int] = ()) -> dict[str, Any]:
    """The request llama-server gets: tools described, reply constrained, history as text, and
    the ``line_breaks`` tokens banned (the reply is JSON, where a line break is only ever
    whitespace: a model that pretty-prints would spend its tokens on indentation).

    It rewrites the client's JSON (not the validated body) so that every field llama-server
    knows and the schemas do not still reaches it."""
    tools = [t["function"] for t in payload["tools"]]
    choice: Any = payload.get("tool_choice") or "auto"
    named = isinstance(choice, dict)
    if named:
        wanted = choice["function"]["name"]
        tools = [t for t in tools if t["name"] == wanted]
        if not tools:
            raise ApiError(
                400, f"tool_choice names {wanted!r}, which is not in tools", param="tool_choice"
            )
    required = choice == "required" or named
    one = named or payload.get("parallel_tool_calls") is False
    schema = _reply_schema(tools, payload.get("response_format"), required=required, one=one)
    described = "\n".join(
        f"- {t['name']}: {t.get('description') or ''} parameters: "
        f"{json.dumps(t.get('parameters') or {'type': 'object'})}"
        for t in tools
    )
    system = f"{REQUIRED if required else PREAMBLE}\nTools:\n{described}"
    out = {k: v for k, v in payload.items() if k not in EMULATION_KEYS}
    out.pop("top_logprobs", None)  # they would be the wrapper's
    out["messages"] = [{"role": "system", "content": system}, *map(_as_text, payload["messages"])]
    out["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "tool_reply", "schema": schema},
    }
    if line_breaks:
        out["logit_bias"] = {
            **(payload.get("logit_bias") or {}),
            **{str(token): False for token in line_breaks},
        }
    return out


def _reply_schema(
    tools: list[dict[str, Any]], response_format: Any, *, required: bool, one: bool
) -> dict[str, Any]:
    """Calls only, or calls or a response (text, or the client's ``response_format``)."""
    calls = {
        "type": "array",
        "minItems": 1,
        **({"maxItems": 1} if one else {}),
        "items": {"anyOf": [_call_schema(t) for t in tools]},
    }
    only_calls = _object("tool_calls", calls)
    if required:
        return only_calls
    return {"anyOf": [only_calls, _object("response", _response_schema(response_format))]}


def _response_schema(response_format: Any) -> dict[str, Any]:
    kind = response_format.get("type") if isinstance(response_format, dict) else "text"
    if kind == "json_schema":
        schema: dict[str, Any] = response_format["json_schema"].get("schema") or {}
        return schema or {"type": "object"}
    return {"type": "object"} if kind == "json_object" else {"type": "string"}


def _object(key: str, value: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {key: value},
        "required": [key],
        "additionalProperties": False,
    }


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


def _openai_call(call: Call) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def _finish(reader: ReplyReader, reason: str | None) -> str | None:
    """``tool_calls`` when the reply ended after its calls; ``length`` stays ``length``."""
    if reason == "stop" and reader.calls:
        return "tool_calls"
    return reason


def whole(model_id: str, *, emulated: bool) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """How a whole chat answer becomes OpenAI's: its shapes fixed, and an emulated tool reply
    read back into calls."""

    def shaped(data: dict[str, Any]) -> dict[str, Any]:
        fix_whole(data, model_id, chat=True)
        if emulated:
            restore(data)
        else:
            keep_whole_calls(data)  # llama-server's own calls, cut by the length
        return data

    return shaped


def restore(data: dict[str, Any]) -> None:
    """Turn a whole constrained reply back into OpenAI's message (in place): the complete
    calls, or the response; never the wrapper."""
    for choice in data.get("choices", []):
        message = choice.get("message") or {}
        reader = ReplyReader()
        reader.feed(message.get("content") or "")
        reader.finish()
        choice["logprobs"] = None
        if reader.calls:
            message["content"] = None
            message["tool_calls"] = [_openai_call(c) for c in reader.calls]
        else:
            message["content"] = reader.text
        choice["finish_reason"] = _finish(reader, choice.get("finish_reason"))


class ToolShaper(ChatShaper):
    """A stream of constrained replies as OpenAI streams tools: the response text as it comes;
    each call, once its JSON is complete, as an id-and-name delta and then its arguments in the
    pieces they were generated in (so a stream cut by ``max_tokens`` never carries half a
    call)."""

    def __init__(self, model_id: str, *, want_usage: bool) -> None:
        super().__init__(model_id, want_usage=want_usage)
        self.readers: dict[int, ReplyReader] = {}

    def reshape(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The chunk's choices as the deltas their replies add."""
        out = []
        for choice in chunk.get("choices") or []:
            out.extend(self._choice(chunk, choice))
        return out

    def _choice(self, chunk: dict[str, Any], choice: dict[str, Any]) -> list[dict[str, Any]]:
        reader = self.readers.setdefault(choice.get("index", 0), ReplyReader())
        delta = choice.get("delta") or {}
        piece = reader.feed(delta.get("content") or "")
        if choice.get("finish_reason") is not None:  # what was held back, now the reply ended
            rest = reader.finish()
            piece.text += rest.text
            piece.calls += rest.calls
        deltas: list[dict[str, Any]] = []
        if "role" in delta:
            deltas.append({"role": "assistant", "content": ""})
        if piece.text:
            deltas.append({"content": piece.text})
        for call in piece.calls:
            deltas.extend(_call_deltas(call))
        reason = _finish(reader, choice.get("finish_reason"))
        if reason is not None:
            deltas.append({})
        base = {k: v for k, v in chunk.items() if k != "choices"}
        index = choice.get("index", 0)
        return [
            {
                **base,
                "choices": [
                    {
                        "index": index,
                        "delta": d,
                        "logprobs": None,
                        "finish_reason": reason if i == len(deltas) - 1 else None,
                    }
                ],
            }
            for i, d in enumerate(deltas)
        ]


def _call_deltas(call: Call) -> list[dict[str, Any]]:
    """OpenAI's pieces of one streamed call: index, id, type and name with empty arguments,
    then the argument fragments."""
    head = {"index": call.index, "id": call.id, "type": "function"}
    pieces = [{"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]}]
    for fragment in call.fragments():
        pieces.append({"tool_calls": [{"index": call.index, "function": {"arguments": fragment}}]})
    return pieces
