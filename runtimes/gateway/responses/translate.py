"""A Responses request as the chat request every engine answers.

The Responses API is OpenAI's newer shape of the same generation: ``instructions`` and input
items become chat messages (images as ``image_url`` parts, function calls as an assistant's
``tool_calls``, their outputs as ``tool`` messages), flat function tools become chat tools,
``text.format`` becomes ``response_format`` and ``max_output_tokens`` ``max_tokens``. Translating
into the chat request, rather than teaching each engine a second API, keeps one behaviour: the
same tool emulation, grammar, image checks and errors. What cannot be translated is a 400 that
names the Responses field.
"""

from __future__ import annotations

from typing import Any

from runtimes.gateway.errors import ApiError
from runtimes.gateway.responses.request import (
    Content,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    ImageContent,
    MessageItem,
    ReasoningItem,
    RefusalContent,
    ResponseRequest,
    TextContent,
)

Message = dict[str, Any]


def chat_request(body: ResponseRequest, history: list[Message]) -> tuple[dict[str, Any], list[str]]:
    """The chat request's JSON: the instructions, ``history`` (a previous response's
    conversation), then the input; and where each of its messages came from (``input[2]``), so
    that an error about a message names the Responses field."""
    _refuse_unsupported(body)
    messages = [{"role": "system", "content": body.instructions}] if body.instructions else []
    origins = ["instructions"] * len(messages) + ["previous_response_id"] * len(history)
    given, sources = input_messages(body)
    messages += history + given
    origins += sources
    out: dict[str, Any] = {"model": body.model, "messages": messages, "stream": True}
    out["stream_options"] = {"include_usage": True}
    tools = [_chat_tool(t) for t in body.tools if isinstance(t, FunctionTool)]
    if tools:
        out["tools"] = tools
        out["parallel_tool_calls"] = body.parallel_tool_calls
        choice = body.tool_choice
        out["tool_choice"] = (
            choice
            if isinstance(choice, str)
            else {"type": "function", "function": {"name": choice.name}}
        )
    fmt = body.text.format
    if fmt.type != "text":
        schema = fmt.json_schema()
        out["response_format"] = {"type": fmt.type}
        if schema is not None:
            out["response_format"]["json_schema"] = schema.model_dump(by_alias=True)
    sampling = {
        "max_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "seed": body.seed,
        "user": body.user,
    }
    out.update({k: v for k, v in sampling.items() if v is not None})
    return out, origins


def input_messages(body: ResponseRequest) -> tuple[list[Message], list[str]]:
    """The input items as chat messages (consecutive function calls in one assistant
    message, as the chat API carries them), and the item each came from."""
    if isinstance(body.input, str):
        return [{"role": "user", "content": body.input}], ["input"]
    messages: list[Message] = []
    origins: list[str] = []
    for index, item in enumerate(body.input):
        where = f"input[{index}]"
        if isinstance(item, MessageItem):
            messages.append({"role": item.role, "content": _content(item.content, where)})
        elif isinstance(item, FunctionCallItem):
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments}}  # fmt: skip
            last = messages[-1] if messages else {}
            if last.get("role") == "assistant" and last.get("tool_calls"):
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif isinstance(item, FunctionCallOutputItem):
            output = item.output if isinstance(item.output, str) else _text(item.output, where)
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
        else:
            assert isinstance(item, ReasoningItem)  # nothing a local model could continue
        origins += [where] * (len(messages) - len(origins))
    return messages, origins


def responses_param(param: str | None, origins: list[str]) -> str | None:
    """A chat request's field as the Responses field it came from: ``messages[3].content[1]``
    of a request whose fourth message was ``input[2]`` is ``input[2].content[1]``."""
    if param is None or not param.startswith("messages["):
        return param
    index, _, rest = param[len("messages[") :].partition("]")
    if not index.isdigit() or int(index) >= len(origins):
        return "input"
    return origins[int(index)] + rest


def _content(content: str | list[Content], where: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        if isinstance(part, TextContent):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, RefusalContent):
            parts.append({"type": "text", "text": part.refusal})
        elif isinstance(part, ImageContent) and part.image_url:
            image = {"url": part.image_url, **({"detail": part.detail} if part.detail else {})}
            parts.append({"type": "image_url", "image_url": image})
        else:
            field = "file_id" if isinstance(part, ImageContent) else "type"
            raise _unsupported(
                f"{where}.content[{index}].{field}",
                f"{part.type} content by {field}" if field == "file_id" else f"{part.type} input",
            )
    return parts


def _text(content: list[Content], where: str) -> str:
    parts = _content(content, where)
    return "".join(p.get("text", "") for p in parts if isinstance(p, dict))


def _chat_tool(tool: FunctionTool) -> dict[str, Any]:
    function = {"name": tool.name, "description": tool.description,
                "parameters": tool.parameters, "strict": tool.strict}  # fmt: skip
    return {"type": "function", "function": {k: v for k, v in function.items() if v is not None}}


def _refuse_unsupported(body: ResponseRequest) -> None:
    for index, tool in enumerate(body.tools):
        if not isinstance(tool, FunctionTool):
            if tool.type == "function":
                raise ApiError(400, f"tools[{index}] needs a name", param=f"tools[{index}].name")
            raise _unsupported(f"tools[{index}].type", f"{tool.type!r} tools (functions only)")
    if body.background:
        raise _unsupported("background", "background responses")
    if body.conversation is not None:
        raise _unsupported(
            "conversation", "stored conversations; continue with previous_response_id"
        )


def _unsupported(param: str, what: str) -> ApiError:
    return ApiError(
        400,
        f"this server does not support {what}",
        param=param,
        code="unsupported_parameter",
    )
