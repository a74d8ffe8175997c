"""Start real API servers for tests: in a thread (create_app + uvicorn) or as a
``snapbuild serve`` subprocess, and tiny manifests that point at generated model files."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml


def wait_healthy(
    base: str, *, timeout: float = 60.0, proc: subprocess.Popen[str] | None = None
) -> dict[str, Any]:
    """Poll /health until 200; return its body."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}")
        try:
            response = httpx.get(f"{base}/health", timeout=5)
            last = response.json()
            if response.status_code == 200:
                return dict(last)
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"server at {base} not healthy in {timeout}s: {last}")


def health_until(
    base: str, wanted: Callable[[int, dict[str, Any]], bool], timeout: float = 90
) -> dict[str, Any]:
    """Poll /health until ``wanted(status code, body)``; the body (for servers that answer
    503 on purpose: loading, or an engine that cannot serve)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            response = httpx.get(f"{base}/health", timeout=5)
            last = (response.status_code, response.json())
            if wanted(*last):
                return dict(last[1])
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"/health at {base} never got there: {last}")


def refused(
    base: str, path: str = "/v1/chat/completions", client: httpx.Client | None = None, **body: Any
) -> dict[str, Any]:
    """The error object of the OpenAI-shaped 503 a /v1 route answers (GET without a body);
    ``client``: another way to the server (through its Unix socket)."""
    http = client or httpx.Client(timeout=30)
    try:
        response = http.post(f"{base}{path}", json=body) if body else http.get(f"{base}{path}")
    finally:
        if client is None:
            http.close()
    assert response.status_code == 503, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["type"] == "service_unavailable"
    return error


@contextlib.contextmanager
def http_files_server(handler: type[Any]) -> Iterator[str]:
    """Serve a ``http.server`` handler class on a free loopback port; yield its base URL.

    For tests of downloads: the handler decides what each request gets (good files, cut-off
    bodies, errors), and the server stops when the block ends.
    """
    import http.server

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextlib.contextmanager
def app_in_thread(app: Any, **config: Any) -> Iterator[str]:
    """Run a FastAPI app with uvicorn (``config``: more of its options) on a free loopback
    port; yield its base URL."""
    import uvicorn

    from runtimes.gateway.server import bind_socket

    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base)
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextlib.contextmanager
def snapbuild_serve(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 90.0,
    healthy: bool = True,
    memory: int = 0,
) -> Iterator[str]:
    """Run ``snapbuild serve ARGS --port auto`` as a subprocess; yield its base URL once it is
    healthy (``healthy=False``: once it listens, whatever /health says). ``memory``: an
    address-space cap (bytes) for it and its llama-server (util-linux prlimit)."""
    command = [sys.executable, "-c", "from snapbuild.cli import main; main()", "serve", *args]
    if memory:
        command = ["prlimit", f"--as={memory}", "--", *command]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stderr is not None
    base = None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while base is None and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            raise AssertionError(f"snapbuild serve exited {proc.returncode}: {''.join(lines)}")
        lines.append(line)
        if match := re.search(r"on (http://[\d.]+:\d+)/v1", line):
            base = match.group(1)
    assert base is not None, "".join(lines)
    drain = threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True)  # type: ignore[union-attr]
    drain.start()
    try:
        if healthy:
            wait_healthy(base, timeout=timeout, proc=proc)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def tiny_manifest(
    directory: Path,
    name: str,
    model_file: Path,
    *,
    runtime: str,
    fmt: str,
    kind: str = "chat",
    quantization: str | None = None,
) -> Path:
    """A manifest with one engine whose artifact is ``model_file`` (an absolute local path,
    generated F16 GGUF or fp32 ONNX unless ``quantization`` says otherwise)."""
    data = {
        "schema-version": 1,
        "name": name,
        "title": f"{name} test model",
        "summary": "A tiny generated model for tests",
        "description": "Random weights; exercises the real runtime.",
        "license": "Apache-2.0",
        "version": "0.1",
        "architectures": ["amd64", "arm64"],
        "default-context-size": 256,
        "min-context-size": 64,
        "model": {"architecture": "llama", "kind": kind},
        "artifacts": [
            {
                "name": "weights",
                "format": fmt,
                "quantization": quantization or ("F16" if fmt == "gguf" else "fp32"),
                "files": [
                    {
                        "path": model_file.name,
                        "url": "https://example.invalid/" + model_file.name,
                        "sha256": hashlib.sha256(model_file.read_bytes()).hexdigest(),
                        "size": model_file.stat().st_size,
                        "local": {"path": str(model_file)},
                    }
                ],
            }
        ],
        "engines": [
            {"name": "main", "summary": "the one engine", "runtime": runtime, "artifact": "weights"}
        ],
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
