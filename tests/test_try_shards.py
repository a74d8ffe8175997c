"""`snapbuild try` on a model the builder stores in pieces, and a daemon that starts before snapd
has installed its components.

Real processes throughout: the builder renders with a shrunk component budget (so the tiny GGUF
is cut into three shards, one component each, as a 15 GB model's would be), the trial stages the
pieces exactly as ``components.yaml`` lays them out, the rendered install hook only asks for the
components, and the real daemon (llama.cpp on the tiny model) waits for them, joins and verifies
the pieces, and serves; /health reports the probe's CPU thread count.
"""

from __future__ import annotations

import hashlib
import json
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
import yaml
from support.llama import needs_llama_server
from support.tiny_models import write_tiny_llama_gguf
from support.trials import daemon_outage

from hwprobe import probe
from snapbuild.manifest.loader import load_manifest
from snapbuild.project import packing
from snapbuild.serving.threads import default_threads
from snapbuild.trial.health import wait_healthy
from snapbuild.trial.prime import assemble_prime, render, write_commands
from snapbuild.trial.run import PROMPT, run_trial
from snapbuild.trial.sandbox import Trial
from snapbuild.trial.stage import stage_components

pytestmark = [pytest.mark.slow, needs_llama_server]
pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

NAME = "tiny-pieces"
MACHINE = "asus-ux301l"
COMPONENTS = ("llamacpp-cpu", "tiny-pieces-f32", "tiny-pieces-f32-2", "tiny-pieces-f32-3")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _thirds(data: bytes) -> list[bytes]:
    step = -(-len(data) // 3)
    return [data[i : i + step] for i in range(0, len(data), step)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def sharded(
    tmp_path: Path, machines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, bytes]:
    """A manifest whose one GGUF is declared in three shards, the whole file in the cache."""
    cache = tmp_path / "cache"
    (cache / NAME / "tiny-pieces-f32").mkdir(parents=True)
    model = write_tiny_llama_gguf(cache / NAME / "tiny-pieces-f32" / "tiny.gguf").read_bytes()
    url = "https://example.invalid/tiny"
    manifest = {
        "name": NAME,
        "title": "Tiny model in pieces",
        "summary": "A tiny GGUF the snap stores as three pieces",
        "description": "Test manifest for `snapbuild try` on split weights.",
        "license": "MIT",
        "version": "1",
        "architectures": ["amd64", "arm64"],
        "model": {"architecture": "llama", "parameters": 109_760},  # what the file says
        "artifacts": [
            {
                "name": "tiny-pieces-f32",
                "format": "gguf",
                "quantization": "F16",  # the tiny generator writes F16 (general.file_type)
                "files": [
                    {
                        "path": "tiny.gguf",
                        "url": f"{url}/tiny.gguf",
                        "sha256": _sha(model),
                        "size": len(model),
                        "shards": [
                            {"url": f"{url}/tiny.gguf.{i}", "sha256": _sha(p), "size": len(p)}
                            for i, p in enumerate(_thirds(model))
                        ],
                    }
                ],
            }
        ],
        "engines": [
            {
                "name": "cpu",
                "summary": "llama.cpp on the CPU",
                "runtime": "llama.cpp-cpu",
                "artifact": "tiny-pieces-f32",
            }
        ],
    }
    path = tmp_path / f"{NAME}.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    monkeypatch.setattr(packing, "COMPONENT_BUDGET", max(len(p) for p in _thirds(model)))
    monkeypatch.setenv("SNAPBUILD_CACHE", str(cache))
    monkeypatch.setenv("SNAPBUILD_HOST_ROOT", str(machines_dir / MACHINE / "machine-root"))
    monkeypatch.delenv("SNAPBUILD_HOST_PROFILE", raising=False)
    return path, model


def _expected_threads(machines_dir: Path) -> int:
    threads = default_threads(probe(str(machines_dir / MACHINE / "machine-root")))
    assert threads  # the recorded laptop has known cores
    return threads


def test_try_stages_the_pieces_and_the_sharded_model_answers(
    sharded: tuple[Path, bytes], tmp_path: Path, machines_dir: Path
) -> None:
    manifest, model = sharded
    said: list[str] = []
    work = tmp_path / "work"
    result = run_trial(
        str(manifest), work_dir=work, port=_free_port(), echo=said.append, max_tokens=8
    )
    trial = result.trial
    pieces = _thirds(model)
    for i, comp in enumerate(["tiny-pieces-f32", "tiny-pieces-f32-2", "tiny-pieces-f32-3"]):
        staged = trial.staged / comp / f"tiny.gguf.part-{i + 1:02d}"
        assert staged.read_bytes() == pieces[i]
    joined = work / "var" / "common" / "artifacts" / "tiny-pieces-f32" / "tiny.gguf"
    assert joined.read_bytes() == model
    health = json.loads(
        next(s for s in said if s.startswith("Healthy: ")).removeprefix("Healthy: ")
    )
    info = health["runtime_info"]
    assert (info["artifact"], info["threads"]) == (str(joined), _expected_threads(machines_dir))
    assert isinstance(result.answer, str)
    assert f"You: {PROMPT}" in "\n".join(said)
    assert [s for s in said if s.startswith("  install: ")] == [
        "  install: selected engine cpu: cpu is the only compatible engine (0 rejected)",
        "  install: requesting components (snapd installs them after this hook): llamacpp-cpu, "
        "tiny-pieces-f32, tiny-pieces-f32-2, tiny-pieces-f32-3",
    ]
    log = trial.log()
    assert f"joining tiny-pieces-f32/tiny.gguf from 3 pieces ({len(model)} bytes)" in log


def _wait(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_the_daemon_waits_for_components_then_serves(
    sharded: tuple[Path, bytes], tmp_path: Path, machines_dir: Path
) -> None:
    manifest_file, model = sharded
    manifest = load_manifest(str(manifest_file))
    trial = Trial(work=tmp_path / "work", name=NAME)
    render(str(manifest_file), trial.project, None)
    snapcraft = assemble_prime(trial, "amd64")
    write_commands(trial)
    assert stage_components(trial, manifest, [("cpu", None)], snapcraft) == []
    port = _free_port()
    assert trial.snapctl("set", f"port={port}").returncode == 0
    try:
        # the hook has run, snapd has not got to its queue yet; the service is started anyway
        assert trial.run_hook("install", flush=False).returncode == 0
        assert trial.snapctl("start", f"{NAME}.server").returncode == 0
        _wait(lambda: "waiting for components" in trial.log())
        status = json.loads(trial.run("status", "--json").stdout)
        assert status["daemon"] == {
            "phase": "waiting",
            "message": "waiting for components llamacpp-cpu, tiny-pieces-f32, "
            "tiny-pieces-f32-2, tiny-pieces-f32-3 (snapd installs them after the install hook; "
            "up to 300s)",
        }
        assert trial.run("status").stdout.splitlines()[3] == (
            f"server:       waiting: {status['daemon']['message']}"
        )
        time.sleep(1.0)
        assert "exited with status" not in trial.log()  # patient, not a restart loop
        assert trial.snapctl("flush").returncode == 0  # snapd installs the components
        health = wait_healthy(trial, f"http://127.0.0.1:{port}/health", timeout=120)
        assert health["runtime_info"]["threads"] == _expected_threads(machines_dir)
        log = trial.log()
        assert "components present after " in log
        assert log.count("snapctl-standin: server: starting") == 1
        reply = requests.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
            timeout=60,
        )
        assert reply.status_code == 200
        assert reply.json()["model"] == NAME
        assert json.loads(trial.run("status", "--json").stdout)["daemon"] is None  # serving
    finally:
        trial.stop()


def test_a_daemon_whose_components_never_come_fails_clearly(
    sharded: tuple[Path, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest_file, _ = sharded
    trial = Trial(work=tmp_path / "work", name=NAME)
    render(str(manifest_file), trial.project, None)
    assemble_prime(trial, "amd64")
    write_commands(trial)
    assert trial.run_hook("install", flush=False).returncode == 0
    monkeypatch.setenv("SNAPBUILD_COMPONENT_WAIT", "1")
    health, log = daemon_outage(trial)  # it answers on its port why, instead of exiting
    components = trial.work / "components" / "x1"
    missing = ", ".join(
        str(components / c)
        for c in ("llamacpp-cpu", "tiny-pieces-f32", "tiny-pieces-f32-2", "tiny-pieces-f32-3")
    )
    fix = (
        f"See `snap changes` for a failed component install, then run "
        f"`{NAME} use-engine cpu` to install them."
    )
    assert log == [
        "waiting for components llamacpp-cpu, tiny-pieces-f32, tiny-pieces-f32-2, "
        "tiny-pieces-f32-3 (snapd installs them after the install hook; up to 1s)",
        "Error: engine cpu's components were not installed within 1s",
        f"  missing: {missing}",
        f"Fix: {fix}",
    ]
    assert (health["reason"], health["resolution"]) == ("failed", fix)
    assert health["detail"] == (
        f"engine cpu's components were not installed within 1s (missing: {missing})"
    )
