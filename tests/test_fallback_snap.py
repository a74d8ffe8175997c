"""The snap's service keeps its port whatever keeps the engine from serving, publishes where its
API is, and serves it on a Unix socket too: played through `snapbuild try`'s trial (the rendered
hooks, the snapctl stand-in, the real daemon, the real llama-server on a tiny generated GGUF).

The machine changes under the trial by replaying recorded ones (``SNAPBUILD_HOST_ROOT``): the
tiny model's one engine needs AVX-512, which the recorded i7-1165G7 has and the recorded
Haswell laptop (asus-ux301l) lacks. The tests are one operator's session, in file order; a
consumer program plays the other side (the discovery document through the content slot, the
socket, ``snapbuild discover``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from support.llama import needs_llama_server
from support.serving import health_until, refused, tiny_manifest
from support.tiny_models import write_tiny_llama_gguf

from hwprobe.replay import HOST_ROOT_VAR
from snapbuild.trial.health import wait_healthy
from snapbuild.trial.run import prepare
from snapbuild.trial.sandbox import Trial, TrialError

pytestmark = [pytest.mark.slow, needs_llama_server]
MACHINES = Path(__file__).parent / "data" / "machines"
FITS, SMALL = "i7-1165G7", "asus-ux301l"
NAME = "fallback-demo"
SNAPBUILD = [sys.executable, "-c", "from snapbuild.cli import main; main()"]


def on(machine: str) -> None:
    """The machine the snap sees from now on (the trial hands the variable to the snap)."""
    os.environ[HOST_ROOT_VAR] = str(MACHINES / machine / "machine-root")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def avx512_manifest(directory: Path, name: str, weights: Path) -> Path:
    """A manifest whose one llama.cpp engine loads ``weights`` on CPUs with AVX-512 only."""
    path = tiny_manifest(directory, name, weights, runtime="llama.cpp-cpu", fmt="gguf")
    data = yaml.safe_load(path.read_text())
    data["engines"][0]["requires"] = {"all-of": [{"cpu-flags": ["avx512f"]}]}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def installed(directory: Path, manifest: Path) -> Trial:
    """The snap installed on the machine that fits (hooks run, server started)."""
    on(FITS)
    port = free_port()
    trial, _, _ = prepare(str(manifest), port=port, work_dir=directory, echo=lambda _: None)
    return trial


def use_engine_auto(trial: Trial) -> subprocess.CompletedProcess[str]:
    """`<snap> use-engine --auto -y` on the machine the snap sees now (the trial's launcher
    keeps the variables it was written with, so this runs the snap's command with them now)."""
    command = [str(trial.prime / "bin" / "inference-snap"), "use-engine", "--auto", "-y"]
    return subprocess.run(command, env=trial.env, capture_output=True, text=True, check=False)


def base_of(trial: Trial) -> str:
    return f"http://127.0.0.1:{json.loads(trial.run('get', 'port', '--json').stdout)['port']}"


def document(trial: Trial) -> dict[str, Any]:
    """The published discovery document."""
    path = Path(trial.env["SNAP_COMMON"]) / "discovery" / "api.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def chat(base: str, model: str = NAME, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60, **extra)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trial]:
    saved = os.environ.get(HOST_ROOT_VAR)
    directory = tmp_path_factory.mktemp("fallback")
    weights = write_tiny_llama_gguf(directory / "tiny.gguf")
    trial = installed(directory / "work", avx512_manifest(directory, NAME, weights))
    try:
        yield trial
    finally:
        trial.stop()
        os.environ.pop(HOST_ROOT_VAR, None)
        if saved is not None:
            os.environ[HOST_ROOT_VAR] = saved


def test_the_engine_serves_and_publishes_where(demo: Trial) -> None:
    base = base_of(demo)
    health = health_until(base, lambda code, body: code == 200)
    assert health["capabilities"]["text"]["passed"] is True
    doc = document(demo)
    common = demo.env["SNAP_COMMON"]
    assert {k: v for k, v in doc.items() if k not in ("updated", "capabilities")} == {
        "schema-version": 1,
        "snap": NAME,
        "model": NAME,
        "version": "0.1",
        "revision": "x1",
        "base-url": f"{base}/v1",
        "health-url": f"{base}/health",
        "socket": f"{common}/api.sock",
        "engine": {
            "name": "main",
            "runtime": "llama.cpp-cpu",
            "device": "cpu",
            "quantization": "F16",
        },
        "option": None,  # a snap with one model (a ladder: the size that serves)
        "inputs": ["text"],
        "declared": ["text"],
        "status": "ok",
        "outage": None,
    }
    assert doc["capabilities"] == health["capabilities"]
    status = json.loads(demo.run("status", "--json").stdout)
    assert status["discovery"] == doc  # `status --json` shows the same document
    text = demo.run("status").stdout.splitlines()
    assert f"discovery:    {common}/discovery/api.json (Unix socket {common}/api.sock)" in text
    assert any(line.startswith("capabilities: text passed") for line in text)


def test_a_consumer_finds_the_api_through_the_slot_and_the_socket(
    demo: Trial, tmp_path: Path
) -> None:
    import openai

    slots = yaml.safe_load((demo.prime / "meta" / "snap.yaml").read_text())["slots"]
    assert slots == {
        "inference-api": {
            "interface": "content",
            "content": "inference-api",
            "read": ["$SNAP_COMMON/discovery"],
        }
    }
    # the consumer's plug (content: inference-api, target: $SNAP_DATA/inference): snapd mounts
    # the slot's directory there; the trial stands a link in for the bind mount
    shared = slots["inference-api"]["read"][0].replace("$SNAP_COMMON", demo.env["SNAP_COMMON"])
    target = tmp_path / "consumer" / "inference"
    target.parent.mkdir()
    target.symlink_to(shared)
    found = json.loads((target / "api.json").read_text())
    client = openai.OpenAI(base_url=found["base-url"], api_key="unused")
    answer = client.chat.completions.create(
        model=found["model"], messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    )
    assert answer.model == NAME and answer.choices
    with httpx.Client(transport=httpx.HTTPTransport(uds=found["socket"]), timeout=60) as local:
        over_socket = openai.OpenAI(base_url="http://localhost/v1", api_key="-", http_client=local)
        assert [m.id for m in over_socket.models.list()] == [NAME]
        assert local.get("http://localhost/health").json()["status"] == "ok"
    listed = subprocess.run(
        [*SNAPBUILD, "discover", str(demo.work), "--check", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert (row["snap"], row["base-url"], row["live"]["http"]) == (NAME, found["base-url"], 200)


def test_disabled_by_the_operator_answers_503_then_serves_again(demo: Trial) -> None:
    base = base_of(demo)
    proc = demo.run("set", "engine-enabled=false")
    assert proc.returncode == 0, proc.stderr
    body = health_until(base, lambda code, b: b.get("reason") == "disabled")
    assert body["detail"] == "the engine is disabled by the operator (engine-enabled=false)"
    error = refused(base, model=NAME, messages=[{"role": "user", "content": "Hi"}])
    assert error["code"] == "engine_disabled"
    assert error["message"].endswith(
        f"Run `{NAME} set engine-enabled=true` (or `sudo snap set {NAME} engine-enabled=true`) "
        "to load the model again."
    )
    assert document(demo)["outage"]["reason"] == "disabled"
    status = demo.run("status").stdout
    assert "server:       unavailable: disabled: the engine is disabled by the operator" in status
    assert status.splitlines()[-1] == (
        "The engine is disabled by the operator (engine-enabled=false): the API answers 503 "
        f"saying so. Run `{NAME} set engine-enabled=true` to load the model again."
    )
    assert demo.run("set", "engine-enabled=true").returncode == 0
    health_until(base, lambda code, b: code == 200)
    assert chat(base).status_code == 200


def test_a_child_killed_past_its_restart_limit_answers_503_until_restarted(demo: Trial) -> None:
    base = base_of(demo)
    limited = {**demo.env, "SNAPBUILD_RESTART_LIMIT": "1"}
    ctl = [str(demo.bin / "snapctl"), "restart", f"{NAME}.server"]
    assert subprocess.run(ctl, env=limited, check=False).returncode == 0
    for _ in range(2):
        pid = health_until(base, lambda code, b: code == 200)["runtime_info"]["child"]["pid"]
        os.kill(pid, signal.SIGKILL)
        health_until(base, lambda code, b: code == 503)
    body = health_until(base, lambda code, b: b.get("reason") == "restart-limit")
    assert body["resolution"] == (
        f"Read why it keeps exiting in `snap logs {NAME}.server`, then run "
        f"`sudo snap restart {NAME}.server`."
    )
    assert refused(base, "/v1/models")["code"] == "restart_limit_reached"
    live = json.loads(demo.run("status", "--json").stdout)["live"]
    assert (live["status"], live["child"]["restarts"]) == ("error", 1)
    assert demo.snapctl("restart", f"{NAME}.server").returncode == 0  # what the 503 said to do
    health_until(base, lambda code, b: code == 200)
    assert chat(base).status_code == 200


def test_nothing_fits_answers_503_then_serves_when_it_fits(demo: Trial) -> None:
    base = base_of(demo)
    on(SMALL)  # the same snap on a machine without AVX-512
    proc = use_engine_auto(demo)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == (
        "No engine fits; the server answers 503 saying why (see `status`)."
    )
    body = health_until(base, lambda code, b: b.get("reason") == "no-fit")
    assert body["detail"] == (
        f"no engine of {NAME} fits this machine (main: needs AVX512F: CPU has AVX2 only)"
    )
    assert body["resolution"] == (
        f"Run `{NAME} why` for every reason; after freeing memory or installing the driver it "
        f"names, run `{NAME} use-engine --auto`."
    )
    assert refused(base, "/v1/completions", model=NAME, prompt="Hi")["code"] == "no_engine_fits"
    socket_path = document(demo)["socket"]
    with httpx.Client(transport=httpx.HTTPTransport(uds=socket_path), timeout=30) as local:
        assert refused("http://localhost", "/v1/models", client=local)["code"] == "no_engine_fits"
    assert document(demo)["outage"]["reason"] == "no-fit"
    on(FITS)  # the machine that fits again: the same port serves the model
    assert use_engine_auto(demo).returncode == 0
    health_until(base, lambda code, b: code == 200)
    assert chat(base).status_code == 200
    assert document(demo)["status"] == "ok"


def test_weights_that_fail_to_load_answer_503_then_serve_once_replaced(
    demo: Trial, tmp_path: Path
) -> None:
    good = write_tiny_llama_gguf(tmp_path / "good.gguf").read_bytes()
    weights = tmp_path / "tiny.gguf"
    # a sound header and metadata, but one tensor renamed: llama.cpp misses it; passes its sha256
    weights.write_bytes(good.replace(b"output_norm.weight", b"output_norx.weight", 1))
    broken = installed(tmp_path / "work", avx512_manifest(tmp_path, "broken-demo", weights))
    try:
        base = base_of(broken)
        body = health_until(base, lambda code, b: b.get("reason") == "load-failed")
        assert body["detail"].startswith("llama-server could not serve ")
        assert body["resolution"].startswith(
            "The files of engine main pass their checksums but do not load: run "
            "`broken-demo use-engine --auto`"
        )
        assert (
            refused(base, "/v1/completions", model="broken-demo", prompt="Hi")["code"]
            == "model_load_failed"
        )
        with pytest.raises(TrialError, match=r"^the server cannot serve the model \(load-fa"):
            wait_healthy(broken, f"{base}/health", timeout=60)  # `snapbuild try` says so at once
        listed = subprocess.run(
            [*SNAPBUILD, "discover", str(demo.work), str(broken.work)],
            capture_output=True,
            text=True,
            check=False,
        )
        rows = sorted(listed.stdout.splitlines())  # one line per snap: both are listed
        assert [row.split(":")[0] for row in rows] == ["broken-demo", NAME]
        assert rows[0].endswith("unavailable: load-failed")
        replaced = tmp_path / "tiny.gguf.new"
        replaced.write_bytes(good)
        replaced.replace(weights)  # repaired weights: the server loads them on the same port
        health_until(base, lambda code, b: code == 200)
        assert chat(base, "broken-demo").status_code == 200
    finally:
        broken.stop()
