"""What every engine shares, whichever way it runs (llama-server child or in-process adapter):
how to load it (:class:`LoadOptions`), how it fails (:class:`RuntimeFailure`), and what the
gateway may ask of it (:class:`Engine`).

The protocol is the one boundary between the gateway (:mod:`runtimes.gateway`) and the engines
(:mod:`runtimes.llamaserver`, :mod:`runtimes.inprocess`): it lives here, below both, so the
gateway never imports a concrete engine and an engine never sees a web framework's request. An
engine gets the request body the gateway validated (:mod:`runtimes.requests`) and a
:class:`Call`: the body's JSON as checked (for engines that relay it) and a way to notice a
client that hung up; nothing else of the connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeAlias

from starlette.responses import Response

from runtimes.requests import ChatCompletionRequest, CompletionRequest, EmbeddingRequest
from snapcommon.errors import SnapbuildError

Capability = Literal["chat", "completion", "embeddings"]
Modality = Literal["text", "vision", "audio"]  # what a model takes in
Status = Literal["loading", "ok", "restarting", "error"]  # /health's status
# a JSON value as parsed: what crosses the boundary untyped is at least typed as JSON
Json: TypeAlias = "str | int | float | bool | None | Sequence[Json] | Mapping[str, Json]"
JsonObject: TypeAlias = Mapping[str, Json]


class RuntimeFailure(SnapbuildError):
    """A runtime failed to load or run a model (exit 1): names the model file and runtime."""


@dataclass(frozen=True)
class LoadOptions:
    """How to load: the artifact, the runtime id (catalog), device, context and threads."""

    artifact: Path
    runtime: str
    device: str = "cpu"  # cpu, gpu, npu
    context_size: int = 4096
    threads: int | None = None  # None: the runtime's own default
    gpu_layers: int | None = None  # llama.cpp offload; None: all layers when the build can
    # llama.cpp engines serve through llama-server: its component tree (usr/bin/llama-server,
    # usr/lib), or the binary itself; None: $SNAPBUILD_LLAMA_ROOT
    llama_root: Path | None = None
    llama_server: Path | None = None
    chat_template: str | None = None  # the manifest's model.chat-template (runtimes.chat_templates)
    projector: Path | None = None  # llama.cpp's mmproj beside the weights: the engine reads images
    # concurrent serving (issue 13), from the Decision's batching plan; 1: one at a time
    sequences: int = 1  # continuous: sequences decoding together; micro-batch: texts per batch
    batch_window_ms: float = 5.0  # micro-batch: how long concurrent requests are gathered
    # continuous: tokens per paged-KV block on this runtime (the selector's batching table,
    # snapbuild/data/batching.yaml), so the cache holds ``sequences`` full contexts
    kv_block_tokens: int | None = None
    # OpenVINO INFERENCE_PRECISION_HINT; None: the device's default (bf16 on CPUs with AMX or
    # AVX512-BF16, whose rounding depends on the batch shape); "f32": batch-invariant math
    inference_precision: str | None = None


@dataclass(frozen=True)
class Call:
    """What an engine may use of one API call besides its validated body.

    ``json`` is the client's body as the gateway checked it (image URLs already rewritten as
    canonical ``data:`` URLs, :mod:`runtimes.gateway.images`): a llama-server engine forwards it
    so that fields only llama-server knows reach it unchanged. ``client_gone`` answers whether
    the client has hung up, so an engine can stop work nobody will read.
    """

    json: JsonObject
    client_gone: Callable[[], Awaitable[bool]]


class Engine(Protocol):
    """What the gateway needs from an engine (``LocalEngine``, ``LlamaServerEngine``).

    Before a request reaches ``chat``, ``completions`` or ``embeddings`` the gateway has checked
    everything that does not depend on the engine: the model id, the capability, readiness, the
    number of choices against :attr:`max_choices`, images against :attr:`inputs`, 1 to
    ``MAX_PROMPTS`` non-empty prompts, 1 to ``MAX_EMBEDDING_INPUTS`` non-empty inputs, token ids
    against :attr:`vocabulary`.
    """

    notes: list[str]  # what the engine chose differently from what was asked (logged at start)

    @property
    def capabilities(self) -> frozenset[str]:
        """What it does: chat, completion, embeddings (may shrink while loading)."""
        ...

    @property
    def runtime(self) -> str:
        """The runtime id (the catalog's)."""
        ...

    @property
    def inputs(self) -> tuple[Modality, ...]:
        """What it takes in: ``("text",)``, or ``("text", "vision")`` when it reads images."""
        ...

    @property
    def max_choices(self) -> int | None:
        """The most choices (``n``) one request may ask for, which the gateway enforces; None:
        the engine checks ``n`` itself and says why in its own words."""
        ...

    @property
    def vocabulary(self) -> int | None:
        """How many token ids the model knows, once loaded (prompts and inputs given as ids are
        checked against it); None: the engine takes text only, and ids are refused."""
        ...

    async def start(self) -> None:
        """Load and warm up; raise when that fails."""

    async def stop(self) -> None:
        """Release everything."""

    def status(self) -> tuple[Status, str | None]:
        """(status, detail) once started: an engine with a child process may lose it later."""
        ...

    def describe(self) -> dict[str, Any]:
        """What runs (``runtime_info`` in /health)."""
        ...

    def stats(self) -> dict[str, int]:
        """Request counters (``generations`` in /health)."""
        ...

    async def refresh_live(self) -> dict[str, float]:
        """Live gauges: queue depth, busy slots, KV-cache use."""
        ...

    async def chat(self, body: ChatCompletionRequest, call: Call) -> Response:
        """A checked chat request: its JSON answer or its event stream."""
        ...

    async def completions(self, body: CompletionRequest, call: Call) -> Response:
        """A checked completion request: its JSON answer or its event stream."""
        ...

    async def embeddings(self, body: EmbeddingRequest, call: Call) -> JsonObject:
        """A checked embeddings request: OpenAI's list object."""
        ...
