"""Request and response bodies of the OpenAI-compatible API, as pydantic models.

They are the OpenAPI document (FastAPI derives it from them), so keeping them precise keeps the
served document accurate. Requests ignore fields they do not know, like OpenAI-compatible
servers commonly do, so clients that send extra options still work; wrong types or values are
422 errors that name the field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextPart(BaseModel):
    """A text part of a message's content list (the only part type a text model accepts)."""

    type: Literal["text"] = "text"
    text: str


class ChatMessage(_Request):
    """One message of the conversation."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        """The content as plain text."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class StreamOptions(_Request):
    """OpenAI's stream options: ask for a final usage-only chunk."""

    include_usage: bool = False


class _Sampling(_Request):
    model: str = Field(description="The model id: the snap's name (see GET /v1/models).")
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=0, description="Extension: top-k sampling.")
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1)
    stop: str | list[str] | None = Field(default=None, max_length=16)
    presence_penalty: float = Field(default=0.0, ge=-2, le=2)
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2)
    logit_bias: dict[str, float] | None = Field(
        default=None, description="Not supported: a non-empty map is refused with 400."
    )
    ignore_eos: bool = Field(
        default=False, description="Extension: generate max_tokens even past end-of-sequence."
    )
    n: Literal[1] = Field(default=1, description="Only one choice per request is supported.")
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None

    def stops(self) -> tuple[str, ...]:
        """``stop`` as a tuple."""
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class ChatCompletionRequest(_Sampling):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


class CompletionRequest(_Sampling):
    """POST /v1/completions (one prompt per request)."""

    prompt: str | list[str] = Field(description="One prompt (a list must hold exactly one).")
    max_tokens: int | None = Field(default=16, ge=1)


class EmbeddingRequest(_Request):
    """POST /v1/embeddings."""

    model: str
    input: str | list[str] = Field(description="A text or a list of texts (at most 2048).")
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None


class UsageInfo(BaseModel):
    """Token counts."""

    prompt_tokens: int
    completion_tokens: int = 0
    total_tokens: int


class AssistantMessage(BaseModel):
    """The generated message."""

    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    """One (the only) choice."""

    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop", "length"] | None


class ChatCompletion(BaseModel):
    """A whole chat completion (``stream: false``)."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: UsageInfo


class ChunkDelta(BaseModel):
    """The new text of a stream chunk."""

    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    """One choice of a stream chunk."""

    index: int = 0
    delta: ChunkDelta
    finish_reason: Literal["stop", "length"] | None = None


class ChatCompletionChunk(BaseModel):
    """One server-sent event of a streamed chat completion (the stream ends with [DONE])."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: UsageInfo | None = None


class CompletionChoice(BaseModel):
    """One (the only) text completion choice."""

    index: int = 0
    text: str
    logprobs: None = None
    finish_reason: Literal["stop", "length"] | None


class Completion(BaseModel):
    """A text completion, whole or as one stream chunk."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
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


class ModelCard(BaseModel):
    """The one model this server serves."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "snapbuild"


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

    status: Literal["ok", "loading", "error"]
    model: str
    engine: str
    runtime: str
    device: str
    context_size: int
    detail: str | None = None
    runtime_info: dict[str, object] = Field(default_factory=dict)
    generations: QueueStats
