"""Capabilities proven at start: each declared capability is tried once on the running engine.

A manifest declares that an engine reads images or calls tools; whether it does on this
machine (the projector loaded, the template renders tools, the engine supports them at all) is
only known by trying. So before ``/health`` says ready the gateway runs one small request per
declared capability through the very engine that will serve clients, and publishes what
passed: a token of text, a tiny generated image through the projector, a constrained tool
call. What failed is reported in ``/health``, ``/v1/models`` and the snap's ``status``, and a
request that needs it gets a clear 400 (:func:`refusal`), never a silent downgrade.

Every check is bounded (:data:`CHECK_TIMEOUT_S`), so a hung engine delays readiness by a known
amount at most; the time each took is published with its result.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from starlette.responses import Response

from runtimes import requests as s
from runtimes.declared import Capability
from runtimes.engine import Call, Engine, Json, JsonObject
from runtimes.gateway.answers import Proof
from runtimes.gateway.errors import ApiError

# each check's bound: a first request on a large model on a busy CPU takes seconds, a hung
# engine never answers; readiness is delayed by at most this per declared capability
CHECK_TIMEOUT_S = 60.0
TOOL_NAME = "report_status"
# no parameters: the shortest constrained call (about 35 tokens in llama.cpp's generic format)
TOOL: dict[str, Json] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Report that the service works.",
        "parameters": {"type": "object", "properties": {}},
    },
}


async def _never_gone() -> bool:
    return False


def _call(payload: JsonObject) -> Call:
    """A check's call: its JSON, and a client that never hangs up."""
    return Call(json=payload, client_gone=_never_gone)


def _answer(response: Response) -> dict[str, Any]:
    """The JSON body of an engine's whole (non-streamed) answer."""
    if response.status_code != 200:
        raise ValueError(f"the engine answered HTTP {response.status_code}")
    data: dict[str, Any] = json.loads(bytes(response.body))
    return data


def tiny_png() -> str:
    """A 32 x 32 PNG as a ``data:`` URL: the smallest image any projector resizes and reads."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 60, 40)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


async def _chat(engine: Engine, payload: dict[str, Json]) -> dict[str, Any]:
    body = s.ChatCompletionRequest.model_validate(payload)
    return _answer(await engine.chat(body, _call(payload)))


async def check_text(engine: Engine, model: str) -> str | None:
    """One generated token (one vector, for an embedder); None when it came."""
    if "completion" in engine.capabilities:
        payload: dict[str, Json] = {"model": model, "prompt": "Hello", "max_tokens": 1}
        payload.update(temperature=0, ignore_eos=True)  # exactly one token, even an end
        body = s.CompletionRequest.model_validate(payload)
        out = _answer(await engine.completions(body, _call(payload)))
        tokens = int((out.get("usage") or {}).get("completion_tokens", 0))
        return None if tokens >= 1 else "the engine answered without generating a token"
    if "chat" in engine.capabilities:
        payload = {"model": model, "messages": [{"role": "user", "content": "Hello"}]}
        out = await _chat(engine, {**payload, "max_tokens": 1, "temperature": 0})
        return None if out.get("choices") else "the engine answered no choice"
    if "embeddings" in engine.capabilities:
        payload = {"model": model, "input": "Hello"}
        body_e = s.EmbeddingRequest.model_validate(payload)
        data = (await engine.embeddings(body_e, _call(payload))).get("data")
        return None if isinstance(data, Sequence) and data else "the engine returned no vector"
    return "the engine does neither completions, chat nor embeddings"


async def check_vision(engine: Engine, model: str) -> str | None:
    """One token about a tiny generated image, read through the projector."""
    if "vision" not in engine.inputs or "chat" not in engine.capabilities:
        return "the engine does not read images here (no projector, or no chat)"
    parts: list[Json] = [
        {"type": "text", "text": "What colour is this image?"},
        {"type": "image_url", "image_url": {"url": tiny_png()}},
    ]
    messages: list[Json] = [{"role": "user", "content": parts}]
    out = await _chat(engine, {"model": model, "messages": messages, "max_tokens": 1})
    return None if out.get("choices") else "the engine answered no choice"


async def check_tools(engine: Engine, model: str) -> str | None:
    """One tool call the request forces (``tool_choice: required``), parsed back."""
    if "chat" not in engine.capabilities:
        return "the engine does not chat here (no chat template), so it cannot call tools"
    messages: list[Json] = [{"role": "user", "content": "Report that the service is working."}]
    payload: dict[str, Json] = {"model": model, "messages": messages, "tools": [TOOL]}
    payload.update(tool_choice="required", parallel_tool_calls=False)
    payload.update(max_tokens=64, temperature=0)
    message = ((await _chat(engine, payload)).get("choices") or [{}])[0].get("message") or {}
    calls = message.get("tool_calls") or []
    if not calls:
        return f"no tool call came back (the answer was {str(message.get('content'))[:80]!r})"
    function = calls[0].get("function") or {}
    if function.get("name") != TOOL_NAME:
        return f"the tool call names {function.get('name')!r}, not {TOOL_NAME!r}"
    try:
        arguments = json.loads(function.get("arguments") or "")
    except ValueError:
        return f"the tool call's arguments are not JSON: {function.get('arguments')!r}"
    return None if isinstance(arguments, dict) else "the tool call's arguments are not an object"


CHECKS: dict[Capability, Callable[[Engine, str], Awaitable[str | None]]] = {
    "text": check_text,
    "vision": check_vision,
    "tools": check_tools,
}


async def prove(
    engine: Engine, model: str, declared: Sequence[Capability], timeout: float = CHECK_TIMEOUT_S
) -> dict[str, Proof]:
    """Run the check of each declared capability, one after the other, each within
    ``timeout`` seconds; a check that raises or times out failed, with the reason."""
    proofs: dict[str, Proof] = {}
    for capability in declared:
        started = time.monotonic()
        try:
            problem = await asyncio.wait_for(CHECKS[capability](engine, model), timeout)
        except TimeoutError:
            problem = f"no answer within {timeout:g}s"
        except ApiError as exc:
            problem = exc.message
        except Exception as exc:  # an engine's failure is the check's result, never a crash
            problem = f"{type(exc).__name__}: {exc}"
        proofs[capability] = Proof(
            passed=problem is None, detail=problem, seconds=round(time.monotonic() - started, 3)
        )
    return proofs


def refusal(proofs: Mapping[str, Proof], needs: Capability) -> ApiError | None:
    """The 400 for a request that needs a capability whose check failed at start; None when it
    passed or was not checked."""
    proof = proofs.get(needs)
    if proof is None or proof.passed:
        return None
    what = {"vision": "read images", "tools": "call tools", "text": "generate text"}[needs]
    param = {"vision": "messages", "tools": "tools", "text": None}[needs]
    return ApiError(
        400,
        f"this server cannot {what}: the {needs} check at start failed ({proof.detail}); "
        f"send the request without it, or see GET /health",
        param=param,
        code=f"{needs}_unavailable",
    )
