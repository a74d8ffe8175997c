"""`snapbuild serve` keeps its port whatever keeps the engine from serving, and says why.

Each case is broken for real: weights that pass their checksum but do not load (a truncated
tiny GGUF, then the good file put back: the same port serves it), a selection where nothing
fits, a llama-server child killed past its restart limit. The 503s are OpenAI-shaped and say
what failed and what to do; /health says the reason.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest
import yaml
from support.llama import needs_llama_server
from support.serving import health_until, refused, snapbuild_serve, tiny_manifest
from support.tiny_models import write_tiny_llama_gguf

from runtimes.gateway.outage import Advice

pytestmark = [pytest.mark.slow, needs_llama_server]
CHAT = {"model": "broken", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


def test_weights_that_fail_to_load_answer_503_then_serve_once_replaced(tmp_path: Path) -> None:
    good = write_tiny_llama_gguf(tmp_path / "good.gguf").read_bytes()
    weights = tmp_path / "model.gguf"
    weights.write_bytes(good[: len(good) // 2])  # a GGUF header, then nothing: passes its sha256
    manifest = tiny_manifest(tmp_path, "broken", weights, runtime="llama.cpp-cpu", fmt="gguf")
    with snapbuild_serve(
        str(manifest), "--engine", "main", "--port", "auto", healthy=False
    ) as base:
        body = health_until(base, lambda code, b: b["status"] == "error")
        assert (body["reason"], body["resolution"]) == ("load-failed", Advice().load_failed)
        assert body["detail"] == f"llama-server could not serve {weights}"
        for error in (refused(base, **CHAT), refused(base, "/v1/models")):
            assert error["code"] == "model_load_failed"
            assert error["message"] == (
                f"the model is not being served: llama-server could not serve {weights}. "
                + Advice().load_failed
            )
        replaced = tmp_path / "model.gguf.new"
        replaced.write_bytes(good)
        replaced.replace(weights)  # as `snapbuild fetch` puts a file in place: atomically
        health_until(base, lambda code, b: code == 200)
        answer = httpx.post(f"{base}/v1/chat/completions", json=CHAT, timeout=60)
        assert answer.status_code == 200, answer.text


def test_nothing_fits_answers_503_with_every_reason(tmp_path: Path) -> None:
    weights = write_tiny_llama_gguf(tmp_path / "model.gguf")
    manifest = tiny_manifest(tmp_path, "broken", weights, runtime="llama.cpp-cpu", fmt="gguf")
    data = yaml.safe_load(manifest.read_text())
    data["engines"][0]["requires"] = {"all-of": [{"cpu-flags": ["no-such-flag"]}]}  # nowhere
    manifest.write_text(yaml.safe_dump(data))
    with snapbuild_serve(str(manifest), "--port", "auto", healthy=False) as base:
        body = health_until(base, lambda code, b: code == 503)
        assert (body["status"], body["reason"], body["engine"]) == ("error", "no-fit", "none")
        assert body["detail"].startswith("no engine of broken fits this machine (main: ")
        error = refused(base, **CHAT)
        assert error["code"] == "no_engine_fits"
        assert "See `snapbuild why-not broken`" in error["message"]
        assert refused(base, "/v1/embeddings", model="broken", input="x")["code"] == (
            "no_engine_fits"
        )


def test_a_child_killed_past_its_restart_limit_is_reported(tmp_path: Path) -> None:
    weights = write_tiny_llama_gguf(tmp_path / "model.gguf")
    manifest = tiny_manifest(tmp_path, "broken", weights, runtime="llama.cpp-cpu", fmt="gguf")
    env = {"SNAPBUILD_RESTART_LIMIT": "1"}
    with snapbuild_serve(str(manifest), "--engine", "main", "--port", "auto", env=env) as base:
        first = health_until(base, lambda code, b: code == 200)["runtime_info"]["child"]["pid"]
        os.kill(first, signal.SIGKILL)
        body = health_until(base, lambda code, b: b["status"] == "restarting")
        assert (body["reason"], body["resolution"]) == ("restarting", Advice().restarting)
        assert "restarting in 1s" in body["detail"]
        error = refused(base, **CHAT)
        assert error["code"] == "model_not_ready"  # transient: as while loading
        assert error["message"].endswith(Advice().restarting)
        second = health_until(base, lambda code, b: code == 200)["runtime_info"]["child"]["pid"]
        assert second != first
        os.kill(second, signal.SIGKILL)
        body = health_until(base, lambda code, b: b.get("reason") == "restart-limit")
        assert body["status"] == "error"
        assert body["detail"].endswith(
            "restart limit reached: it exited 2 times in a row, so it is not restarted again"
        )
        assert refused(base, **CHAT)["code"] == "restart_limit_reached"
        assert refused(base, "/v1/models")["code"] == "restart_limit_reached"
