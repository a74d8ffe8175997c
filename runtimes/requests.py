"""Request bodies of the OpenAI-compatible API, as pydantic models: what the gateway validates
and every engine receives (the responses are in :mod:`runtimes.gateway.answers`).

They sit below the gateway and the engines, beside :mod:`runtimes.engine` whose ``Engine``
protocol names them, so that both can import them and neither imports the other. They are also
the OpenAPI document (FastAPI derives it from them), so keeping them precise keeps the served
document accurate. Requests ignore fields they do not know, like OpenAI-compatible servers
commonly do, so clients that send extra options still work (and a llama-server engine still
forwards them: it relays the client's own JSON); wrong types or values are 400 errors that name
the field (:mod:`runtimes.gateway.validation`), as OpenAI answers them.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_EMBEDDING_INPUTS = 2048  # texts in one embeddings request (the gateway refuses more)
# Every count is a 32-bit integer in llama.cpp (and OpenAI refuses larger ones): a bigger value
# would wrap (4294967301 tokens became 5), so it is a 422 naming the field.
INT32_MAX = (1 << 31) - 1
Tokens = Annotated[int, Field(ge=1, le=INT32_MAX)]
MAX_PROMPTS = 128  # prompts in one completions request: each is n generations in the queue

# OpenAI's prompt (and embeddings input): a text, texts, token ids, or lists of token ids; the
# gateway checks the ids against the model's vocabulary (runtimes.gateway.inputs)
TokenIds = list[int]
Prompt = str | list[str] | TokenIds | list[TokenIds]


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)  # NaN: "a finite number"


class TextPart(BaseModel):
    """A text part of a message's content list."""

    type: Literal["text"] = "text"
    text: str


class ImageUrl(BaseModel):
    """Where an image is: a ``data:`` URL (PNG, JPEG, WebP), or http(s) where allowed."""

    url: str
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(BaseModel):
    """An image part of a message's content list (models that take images;
    runtimes.gateway.images)."""

    type: Literal["image_url"]
    image_url: ImageUrl


class FunctionCall(_Request):
    """A function the assistant called: its name and JSON-encoded arguments."""

    name: str
    arguments: str


class ToolCall(_Request):
    """One tool call of an assistant message (in the history, or generated)."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Request):
    """One message of the conversation; ``tool`` messages answer an assistant's tool call."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart | ImagePart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The content as plain text."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if isinstance(part, TextPart))

    def image_bytes(self) -> tuple[bytes, ...]:
        """The images' bytes, in order (the gateway rewrote each as a base64 data: URL)."""
        if not isinstance(self.content, list):
            return ()
        urls = [p.image_url.url for p in self.content if isinstance(p, ImagePart)]
        return tuple(base64.b64decode(u.partition(",")[2]) for u in urls)


class StreamOptions(_Request):
    """OpenAI's stream options: ask for a final usage-only chunk."""

    include_usage: bool = False


class _Sampling(_Request):
    model: str = Field(description="The model id: the snap's name (see GET /v1/models).")
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(
        default=None, ge=0, le=INT32_MAX, description="Extension: top-k sampling."
    )
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1)
    stop: str | Annotated[list[str], Field(max_length=16)] | None = Field(
        default=None, description="Up to 16 stop strings, of any length; never in the output."
    )
    presence_penalty: float = Field(default=0.0, ge=-2, le=2)
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2)
    logit_bias: (
        dict[
            Annotated[str, Field(pattern=r"^[0-9]{1,9}$")],
            Annotated[float, Field(ge=-100, le=100)],
        ]
        | None
    ) = Field(
        default=None,
        description="Token id -> bias from -100 to 100, as OpenAI takes it. llama-server engines "
        "apply it; the in-process engines refuse a non-empty map with 400.",
    )
    ignore_eos: bool = Field(
        default=False, description="Extension: generate max_tokens even past end-of-sequence."
    )
    n: int = Field(
        default=1, ge=1, le=128, description="Choices to generate (llama.cpp: up to its slots)."
    )
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None

    def stops(self) -> tuple[str, ...]:
        """``stop`` as a tuple."""
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class JsonSchemaFormat(_Request):
    """``response_format.json_schema``: the schema the reply must satisfy."""

    name: str = Field(max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Request):
    """``response_format``: free text, any JSON object, or JSON fitting a schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class FunctionDefinition(_Request):
    """A function the model may call."""

    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Request):
    """A tool (a function) offered to the model."""

    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Request):
    """The function ``tool_choice`` forces."""

    name: str


class NamedToolChoice(_Request):
    """``tool_choice`` forcing one function."""

    type: Literal["function"] = "function"
    function: NamedFunction


class ChatCompletionRequest(_Sampling):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: Tokens | None = None
    max_completion_tokens: Tokens | None = None
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)


class CompletionRequest(_Sampling):
    """POST /v1/completions: OpenAI's legacy endpoint, ``n`` choices for each prompt."""

    prompt: Prompt = Field(
        description=f"A text, a list of texts (up to {MAX_PROMPTS}), token ids, or a list of "
        "token-id lists; choice i*n+j is the j-th choice of prompt i."
    )
    max_tokens: int | None = Field(
        default=16,
        ge=0,
        le=INT32_MAX,
        description="0 generates nothing: with echo, the prompt is scored.",
    )
    logprobs: int | None = Field(
        default=None,
        ge=0,
        le=5,
        description="Log probabilities of the tokens, and of this "
        "many alternatives each (legacy shape: tokens, token_logprobs, top_logprobs, text_offset).",
    )
    echo: bool = Field(default=False, description="Put the prompt before the completion.")


class EmbeddingRequest(_Request):
    """POST /v1/embeddings."""

    model: str
    input: Prompt = Field(
        description=f"A text, a list of texts (at most {MAX_EMBEDDING_INPUTS}), token ids, or a "
        "list of token-id lists."
    )
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None
