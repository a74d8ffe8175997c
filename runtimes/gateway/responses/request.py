"""The body of ``POST /v1/responses``, as far as a local model can honour it.

Typed like the chat request (:mod:`runtimes.requests`), so a wrong field is the same 400 naming
it and nothing a client sends reaches the translation unchecked. Input items are told apart by
their ``type`` (a message may leave it out, as OpenAI's easy input messages do); the tags are
capitalised so that an error's ``param`` names the field, not the tag
(:func:`runtimes.gateway.validation.field_name`). What the API has and a local model does not
(hosted tools, files, background runs, stored conversations) is accepted by the schema and
refused by the translation with a 400 that names it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from runtimes.requests import JsonSchemaFormat


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class TextContent(_Body):
    """Text in an input message (``output_text`` when an earlier answer is sent back)."""

    type: Literal["input_text", "output_text", "text"]
    text: str


class ImageContent(_Body):
    """An image in an input message: a ``data:`` URL (a file id is refused)."""

    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["auto", "low", "high"] | None = None


class RefusalContent(_Body):
    """A refusal sent back as part of an earlier answer."""

    type: Literal["refusal"]
    refusal: str


class OtherContent(_Body):
    """Content a local model cannot take (files, audio): refused, naming it."""

    type: Literal["input_file", "input_audio"]


Content = Annotated[
    TextContent | ImageContent | RefusalContent | OtherContent, Field(discriminator="type")
]


class MessageItem(_Body):
    """A message of the conversation."""

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Content]


class FunctionCallItem(_Body):
    """A function call the model made earlier, sent back with its output."""

    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


class FunctionCallOutputItem(_Body):
    """What a function call returned."""

    type: Literal["function_call_output"]
    call_id: str
    output: str | list[Content]


class ReasoningItem(_Body):
    """Reasoning an earlier answer carried; a local model has none to continue, so it is left
    out of the conversation."""

    type: Literal["reasoning"]


def _item_kind(value: Any) -> str:
    kind = value.get("type", "message") if isinstance(value, dict) else getattr(value, "type", "")
    return {
        "message": "Message",
        "function_call": "FunctionCall",
        "function_call_output": "FunctionCallOutput",
        "reasoning": "Reasoning",
    }.get(kind, "Unknown")


InputItem = Annotated[
    Annotated[MessageItem, Tag("Message")]
    | Annotated[FunctionCallItem, Tag("FunctionCall")]
    | Annotated[FunctionCallOutputItem, Tag("FunctionCallOutput")]
    | Annotated[ReasoningItem, Tag("Reasoning")],
    Discriminator(_item_kind),
]


class FunctionTool(_Body):
    """A function the model may call (the Responses API's flat shape)."""

    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class HostedTool(_Body):
    """A tool OpenAI runs (web search, file search...): refused, naming it."""

    model_config = ConfigDict(extra="allow")
    type: str


class FunctionChoice(_Body):
    """``tool_choice`` forcing one function."""

    type: Literal["function"]
    name: str


class TextFormat(_Body):
    """``text.format``: text, any JSON object, or JSON fitting a schema."""

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(default=None, max_length=64)
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None

    def json_schema(self) -> JsonSchemaFormat | None:
        """The chat API's ``json_schema`` for this format."""
        if self.type != "json_schema":
            return None
        return JsonSchemaFormat.model_validate(
            {"name": self.name or "response", "schema": self.schema_ or {}, "strict": self.strict}
        )


class TextParam(_Body):
    """``text``: the format of the answer."""

    format: TextFormat = Field(default_factory=lambda: TextFormat(type="text"))


class ResponseRequest(_Body):
    """POST /v1/responses."""

    model: str = Field(description="The model id: the snap's name (see GET /v1/models).")
    input: str | list[InputItem] = Field(description="A text, or the conversation's items.")
    instructions: str | None = Field(
        default=None,
        description="A system message before the input (not carried over by "
        "previous_response_id, as OpenAI does).",
    )
    previous_response_id: str | None = Field(
        default=None, description="Continue a stored response of this server process."
    )
    store: bool = Field(default=True, description="Keep the response for previous_response_id.")
    stream: bool = False
    tools: list[FunctionTool | HostedTool] = Field(default_factory=list)
    tool_choice: Literal["none", "auto", "required"] | FunctionChoice = "auto"
    parallel_tool_calls: bool = True
    text: TextParam = Field(default_factory=TextParam)
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1, description="Extension.")
    metadata: dict[str, str] | None = None
    user: str | None = None
    background: bool | None = None
    conversation: Any = None
