"""The gateway-engine boundary (runtimes.engine.Engine): what the gateway hands an engine, what
it asks of one, and how the catalog's ``serving`` chooses the engine.

A recording engine stands in for the real ones, so these tests see exactly what crosses the
protocol: the validated body (with images already checked and rewritten), the client's own
JSON, a way to notice a hung-up client, and nothing of the web framework.
"""

from __future__ import annotations

import ast
import base64
import dataclasses
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from support.serving import app_in_thread
from support.tiny_models import write_tiny_llama_gguf
from test_layers import imported_modules

from runtimes.catalog import load_catalog
from runtimes.engine import Call, JsonObject, LoadOptions, Modality, Status
from runtimes.gateway.metrics import Metrics
from runtimes.gateway.server import build_engine, create_app
from runtimes.inprocess.engine import LocalEngine
from runtimes.inprocess.llamacpp import LlamaCppAdapter
from runtimes.llamaserver.engine import LlamaServerEngine

ROOT = Path(__file__).resolve().parent.parent
IDLE = {"active": 0, "queued": 0, "completed": 0, "cancelled": 0, "failed": 0}


class Recorder:
    """An engine that records what the gateway handed it and answers ``{"ok": true}``."""

    capabilities = frozenset({"chat", "completion", "embeddings"})
    runtime = "recorder"

    def __init__(self, *, max_choices: int | None = None) -> None:
        self.notes: list[str] = []
        self.inputs: tuple[Modality, ...] = ("text", "vision")
        self.max_choices = max_choices
        self.vocabulary: int | None = 100
        self.health: tuple[Status, str | None] = ("ok", None)
        self.calls: list[tuple[BaseModel, Call, bool]] = []

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def status(self) -> tuple[Status, str | None]:
        return self.health

    def describe(self) -> dict[str, Any]:
        return {"runtime": self.runtime}

    def stats(self) -> dict[str, int]:
        return dict(IDLE)

    async def refresh_live(self) -> dict[str, float]:
        return {}

    async def _record(self, body: BaseModel, call: Call) -> None:
        self.calls.append((body, call, await call.client_gone()))

    async def chat(self, body: Any, call: Call) -> Response:
        await self._record(body, call)
        return JSONResponse({"ok": True})

    async def completions(self, body: Any, call: Call) -> Response:
        await self._record(body, call)
        return JSONResponse({"ok": True})

    async def embeddings(self, body: Any, call: Call) -> JsonObject:
        await self._record(body, call)
        return {"ok": True}


@pytest.fixture
def served() -> Iterator[tuple[Recorder, str]]:
    engine = Recorder(max_choices=2)
    with app_in_thread(create_app(engine, model_id="tiny", context_size=64)) as base:
        yield engine, base


def _chat(base: str, **extra: Any) -> httpx.Response:
    messages = extra.pop("messages", [{"role": "user", "content": "hi"}])
    body = {"model": "tiny", "messages": messages, **extra}
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)


def _webp_url() -> str:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (4, 4), (200, 10, 10)).save(out, format="WEBP")
    return "data:image/webp;base64," + base64.b64encode(out.getvalue()).decode()


def test_the_engine_gets_the_checked_image_not_the_clients(served: tuple[Recorder, str]) -> None:
    engine, base = served
    image = {"type": "image_url", "image_url": {"url": _webp_url()}}
    content = [{"type": "text", "text": "what is it?"}, image]
    assert _chat(base, messages=[{"role": "user", "content": content}]).status_code == 200
    body, call, _ = engine.calls[-1]
    url = body.messages[0].content[1].image_url.url  # type: ignore[attr-defined]
    assert url.startswith("data:image/png;base64,")  # WebP re-encoded: llama.cpp reads no WebP
    assert call.json["messages"][0]["content"][1]["image_url"]["url"] == url  # type: ignore[index,call-overload]
    assert body.messages[0].image_bytes()[0].startswith(b"\x89PNG")  # type: ignore[attr-defined]


def test_the_engine_gets_the_clients_own_fields_and_no_connection(
    served: tuple[Recorder, str],
) -> None:
    engine, base = served
    assert _chat(base, mirostat=2, temperature=0.5).status_code == 200
    body, call, gone = engine.calls[-1]
    assert call.json["mirostat"] == 2 and not hasattr(body, "mirostat")
    assert body.temperature == 0.5  # type: ignore[attr-defined]
    assert {f.name for f in dataclasses.fields(Call)} == {"json", "client_gone"}
    assert gone is False  # the client was still there while the engine ran
    response = httpx.post(
        f"{base}/v1/embeddings",
        json={"model": "tiny", "input": ["a"], "dimensions": 8},
        timeout=30,
    )
    assert response.json() == {"ok": True}
    assert engine.calls[-1][1].json["dimensions"] == 8


def test_the_gateway_refuses_more_choices_than_the_engine_generates(
    served: tuple[Recorder, str],
) -> None:
    engine, base = served
    refused = _chat(base, n=3)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "n"
    assert "(2, its parallel slots)" in refused.json()["error"]["message"]
    assert not engine.calls
    assert _chat(base, n=2).status_code == 200


def test_an_engine_without_a_limit_checks_n_itself() -> None:
    engine = Recorder(max_choices=None)
    with app_in_thread(create_app(engine, model_id="tiny", context_size=64)) as base:
        assert _chat(base, n=5).status_code == 200
    assert engine.calls[-1][0].n == 5  # type: ignore[attr-defined]


def test_health_follows_the_engines_status_after_the_load(served: tuple[Recorder, str]) -> None:
    engine, base = served
    engine.health = ("restarting", "llama-server stopped answering")
    health = httpx.get(f"{base}/health", timeout=10)
    assert health.status_code == 503
    assert (health.json()["status"], health.json()["detail"]) == engine.health
    assert _chat(base).json()["error"]["code"] == "model_not_ready"


def test_the_routes_import_no_concrete_engine() -> None:
    path = ROOT / "runtimes/gateway/routes.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = [name for _, name in imported_modules(tree, "runtimes.gateway.routes", False)]
    engines = ("runtimes.inprocess", "runtimes.llamaserver")
    assert [name for name in imported if name.startswith(engines)] == []


def test_the_catalogs_serving_chooses_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama.cpp entries say ``serving: llama-server``; switched to ``in-process``, the same
    entry is served by its ``adapter`` (the llama-cpp-python binding) in the gateway's process,
    with nothing else to change."""
    path = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    options = LoadOptions(artifact=path, runtime="llama.cpp-cpu", context_size=128, threads=1)
    assert isinstance(build_engine(options, model_id="tiny", metrics=Metrics()), LlamaServerEngine)

    catalog = load_catalog()
    switched = tuple(
        e.model_copy(update={"serving": "in-process"}) if e.id == options.runtime else e
        for e in catalog.runtimes
    )
    in_process = catalog.model_copy(update={"runtimes": switched})
    monkeypatch.setattr("runtimes.catalog.load_catalog", lambda *args: in_process)
    engine = build_engine(options, model_id="tiny", metrics=Metrics())
    assert isinstance(engine, LocalEngine) and isinstance(engine.adapter, LlamaCppAdapter)
    assert engine.max_choices is None
    with app_in_thread(create_app(engine, model_id="tiny", context_size=128)) as base:
        answer = httpx.post(
            f"{base}/v1/completions",
            json={"model": "tiny", "prompt": "hello", "max_tokens": 3},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] >= 1
        info = httpx.get(f"{base}/health", timeout=10).json()["runtime_info"]
    assert info["runtime"] == "llama.cpp-cpu" and "server" not in info  # no llama-server child
