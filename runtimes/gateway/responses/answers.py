"""What ``POST /v1/responses`` answers, as pydantic models: they make the served OpenAPI document
describe it (the events and objects themselves are built as data in
:mod:`runtimes.gateway.responses.events`, and the tests check them against OpenAI's published
schemas)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ItemStatus = Literal["in_progress", "completed", "incomplete"]


class OutputText(BaseModel):
    """Text the model wrote."""

    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[dict[str, Any]] = Field(default_factory=list)
    logprobs: list[dict[str, Any]] = Field(default_factory=list)


class OutputMessage(BaseModel):
    """The assistant's message."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    status: ItemStatus
    content: list[OutputText]


class FunctionCall(BaseModel):
    """A function call: run it, then send its output back as a ``function_call_output``."""

    id: str
    type: Literal["function_call"] = "function_call"
    status: ItemStatus
    call_id: str
    name: str
    arguments: str


class InputTokens(BaseModel):
    """Input token details (no cache is reported)."""

    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokens(BaseModel):
    """Output token details (no reasoning tokens)."""

    reasoning_tokens: int = 0


class ResponseUsage(BaseModel):
    """Token counts."""

    input_tokens: int
    input_tokens_details: InputTokens
    output_tokens: int
    output_tokens_details: OutputTokens
    total_tokens: int


class Incomplete(BaseModel):
    """Why the response stopped early."""

    reason: Literal["max_output_tokens"]


class ResponseError(BaseModel):
    """Why the response failed."""

    code: str
    message: str


class ResponseObject(BaseModel):
    """A response (``object: "response"``); ``status`` ``incomplete`` when it hit
    ``max_output_tokens``."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["completed", "failed", "in_progress", "incomplete"]
    completed_at: int | None = None
    error: ResponseError | None = None
    incomplete_details: Incomplete | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[OutputMessage | FunctionCall]
    parallel_tool_calls: bool
    previous_response_id: str | None = None
    reasoning: None = None
    store: bool
    temperature: float
    text: dict[str, Any]
    tool_choice: str | dict[str, Any]
    tools: list[dict[str, Any]]
    top_p: float
    truncation: Literal["disabled"] = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)


class ResponseEvent(BaseModel):
    """One event of a streamed response (``event: TYPE``, then its data), numbered by
    ``sequence_number``; the stream ends with ``response.completed``, ``response.incomplete``
    or ``response.failed``."""

    model_config = ConfigDict(extra="allow")
    type: str
    sequence_number: int
