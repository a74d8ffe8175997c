"""Response bodies of the OpenAI-compatible API, as pydantic models (requests are in
:mod:`runtimes.requests`).

The routes declare them as their response models, so FastAPI's OpenAPI document describes what
is really sent; the tests check what is sent against OpenAI's own published schemas.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer


class UsageInfo(BaseModel):
    """Token counts."""

    prompt_tokens: int
    completion_tokens: int = 0
    total_tokens: int


class GeneratedCall(BaseModel):
    """A generated function call."""

    name: str
    arguments: str


class GeneratedToolCall(BaseModel):
    """A generated tool call."""

    id: str
    type: Literal["function"] = "function"
    function: GeneratedCall


class AssistantMessage(BaseModel):
    """The generated message (``content`` is null when it is only tool calls)."""

    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: str | None = None
    tool_calls: list[GeneratedToolCall] | None = None


class TokenLogprob(BaseModel):
    """One token's log probability, with its most likely alternatives."""

    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[dict[str, Any]] = Field(default_factory=list)


class ChoiceLogprobs(BaseModel):
    """Log probabilities of a chat choice's tokens."""

    content: list[TokenLogprob] | None = None
    refusal: list[TokenLogprob] | None = None


FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]


class ChatChoice(BaseModel):
    """One choice."""

    index: int = 0
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason | None


class ChatCompletion(BaseModel):
    """A whole chat completion (``stream: false``)."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChatChoice]
    usage: UsageInfo


class ChunkFunction(BaseModel):
    """A piece of a streamed function call."""

    name: str | None = None
    arguments: str | None = None


class ChunkToolCall(BaseModel):
    """A piece of a streamed tool call."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: ChunkFunction | None = None


class ChunkDelta(BaseModel):
    """The new text of a stream chunk (``role`` only on the first chunk, never null)."""

    role: Literal["assistant"] = "assistant"
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[ChunkToolCall] | None = None


class ChunkChoice(BaseModel):
    """One choice of a stream chunk."""

    index: int = 0
    delta: ChunkDelta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(BaseModel):
    """One server-sent event of a streamed chat completion (the stream ends with [DONE])."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChunkChoice]
    usage: UsageInfo | None = None


class CompletionChoice(BaseModel):
    """One (the only) text completion choice."""

    index: int = 0
    text: str
    logprobs: dict[str, Any] | None = None
    finish_reason: Literal["stop", "length", "content_filter"] | None


class Completion(BaseModel):
    """A text completion, whole or as one stream chunk."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[CompletionChoice]
    usage: UsageInfo | None = None


class EmbeddingItem(BaseModel):
    """One vector."""

    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(
        description="The vector, or base64 of little-endian float32 with encoding_format=base64"
    )


class EmbeddingList(BaseModel):
    """The vectors of an embeddings request, in input order."""

    object: Literal["list"] = "list"
    data: list[EmbeddingItem]
    model: str
    usage: UsageInfo


class Proof(BaseModel):
    """One declared capability's check at start (runtimes.gateway.proofs): whether it passed,
    why not, how long it took."""

    passed: bool
    detail: str | None = None
    seconds: float


class ModelCard(BaseModel):
    """The one model this server serves."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "snapbuild"
    inputs: list[Literal["text", "vision", "audio"]] = ["text"]  # what the model takes in
    # the declared capabilities (text, vision, tools) as checked at start; empty: none declared
    capabilities: dict[str, Proof] = Field(default_factory=dict)
    # a snap with model options (sizes): which one serves; the id stays the snap's name, so a
    # client's requests do not change when the snap switches size
    option: str | None = None

    # (no return annotation: pydantic then documents the fields, not a bare object)
    @model_serializer(mode="wrap")
    def _without_option(self, handler: SerializerFunctionWrapHandler):
        """A snap with one model has no ``option`` key (a capability's null ``detail`` stays)."""
        data: dict[str, Any] = handler(self)
        if data.get("option") is None:
            data.pop("option", None)
        return data


class ModelList(BaseModel):
    """GET /v1/models."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorBody(BaseModel):
    """OpenAI's error object."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """Every error this server returns has this shape."""

    error: ErrorBody


class QueueStats(BaseModel):
    """Generation counters (how the tests see that a disconnect cancelled its generation)."""

    active: int
    queued: int
    completed: int
    cancelled: int
    failed: int


class Health(BaseModel):
    """GET /health: 200 with status ok only once the model is loaded and warmed up."""

    status: Literal["ok", "loading", "restarting", "error"]
    model: str
    engine: str
    runtime: str
    device: str
    context_size: int
    inputs: list[Literal["text", "vision", "audio"]] = ["text"]  # what the model takes in
    detail: str | None = None
    # while the engine cannot serve: why (runtimes.gateway.outage.Reason) and what to do
    reason: str | None = None
    resolution: str | None = None
    capabilities: dict[str, Proof] = Field(default_factory=dict)  # checked at start
    runtime_info: dict[str, object] = Field(default_factory=dict)
    generations: QueueStats
