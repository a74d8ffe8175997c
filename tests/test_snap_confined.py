"""The snaps users install, run as snapd runs them: smollm2 and minilm packed by `snapbuild pack`
(craft-parts through snapcraft 9.0.1's own services, `snap pack`), the `.snap` and its `.comp`
files mounted read-only in a private mount namespace where the checkout and every host venv are
hidden, snapd's environment for a strict snap, and inet sockets refused (EACCES, as AppArmor
refuses them) to every hook and app whose network plugs are not connected
(:mod:`snapbuild.trial.snapd`). Nothing of the development tree takes part: the code that runs
is the snap's own venv on core24's Python 3.12.

Each snap lives one life per module, in file order: install (hooks, components, service), an
answer over HTTP through the official client, the discovery document and Unix socket a consumer
finds it by, `<snap> status` and `engines`, `snap set port=` (the configure hook, the server
moving), a refresh with its post-refresh hook. smollm2 serves
the real SmolLM2-135M-Instruct GGUF; minilm's weights are a placeholder upstream, so a tiny
generated ONNX encoder stands in for them in a copy of its manifest.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from support.confined import (
    harness_or_skip,
    pack_or_skip,
    port_of,
    published,
    wait_closed,
    wait_ready,
)
from support.tiny_encoder import write_tiny_onnx_encoder

from snapbuild.pack import Packed
from snapbuild.paths import manifests_dir
from snapbuild.trial.snapd import SnapRun

pytestmark = pytest.mark.slow
SNAPS = ("smollm2", "minilm")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def minilm_manifest(directory: Path) -> Path:
    """minilm's manifest with a tiny ONNX encoder (its own byte tokenizer) as the weights."""
    import hashlib

    model = write_tiny_onnx_encoder(directory / "model.onnx")
    data = yaml.safe_load((manifests_dir() / "minilm.yaml").read_text())
    data["artifacts"][0]["files"] = [
        {
            "path": "model.onnx",
            "url": "https://example.invalid/model.onnx",
            "sha256": hashlib.sha256(model.read_bytes()).hexdigest(),
            "size": model.stat().st_size,
            "local": {"path": str(model)},
        }
    ]
    path = directory / "minilm.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class Life:
    """One snap's life: what was packed, the run, the port it serves on now."""

    def __init__(self, name: str, packed: Packed, run: SnapRun, install: list[Any]) -> None:
        self.name = name
        self.packed = packed
        self.run = run
        self.install = install
        self.port = port_of(run)

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="none")


@pytest.fixture(scope="module", params=SNAPS)
def life(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Life]:
    harness_or_skip()
    name: str = request.param
    where = tmp_path_factory.mktemp(name)
    manifest: str | Path = name if name == "smollm2" else minilm_manifest(where)
    packed = pack_or_skip(manifest, where / "out")
    with SnapRun(packed.snap, where / "run", components=dict(packed.components)) as run:
        results = run.install()
        yield Life(name, packed, run, results)


def test_the_hooks_install_it_and_the_service_starts(life: Life) -> None:
    hooks = [(Path(r.argv[0]).name, r.returncode) for r in life.install]
    assert hooks == [("install", 0), ("configure", 0)], life.install
    install = life.install[0].stderr
    assert "selected engine cpu" in install
    assert "requesting components (snapd installs them after this hook): " in install
    assert sorted(life.run.installed_components()) == sorted(life.packed.components)
    server = life.run.services()["server"]
    assert (server.enabled, server.active, server.failed) == (True, True, False)
    health = wait_ready(life.run, life.port)
    assert (health["model"], health["device"]) == (life.name, "cpu")


def test_it_answers_through_the_official_client(life: Life) -> None:
    client = life.client()
    if life.name == "minilm":
        answer = client.embeddings.create(model="minilm", input=["a snap", "another one"])
        assert [len(d.embedding) for d in answer.data] == [32, 32]  # the tiny encoder's width
        assert answer.model == "minilm"
        return
    chat = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=8,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert (chat.model, chat.choices[0].finish_reason) == ("smollm2", "length")
    assert chat.usage is not None and chat.usage.completion_tokens == 8
    stream = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=8,
        temperature=0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == chat.choices[0].message.content


def test_status_and_engines_from_the_snaps_own_command(life: Life) -> None:
    status = life.run.run_app(life.name, ["status"])
    assert status.returncode == 0, status
    lines = status.stdout.splitlines()
    assert lines[0] == f"model:        {life.name}"
    assert lines[1].startswith("engine:       cpu")
    assert f"endpoint:     http://127.0.0.1:{life.port}/v1" in lines
    assert any(line.startswith("live:         ok") for line in lines), status.stdout
    engines = life.run.run_app(life.name, ["engines"])
    assert engines.returncode == 0, engines
    names = [e["name"] for e in yaml.safe_load(_manifest_of(life))["engines"]]
    assert all(name in engines.stdout for name in names), engines.stdout


def test_a_consumer_finds_the_api_through_the_discovery_document(life: Life) -> None:
    """What a consumer snap reads through the `inference-api` content slot: the document in
    $SNAP_COMMON/discovery names the model, the port and the Unix socket, which all answer."""
    common = f"/var/snap/{life.name}/common"
    doc = published(life.run, life.name, life.port)
    assert (doc["model"], doc["engine"]["device"], doc["outage"]) == (life.name, "cpu", None)
    assert doc["health-url"] == f"http://127.0.0.1:{life.port}/health"
    assert doc["capabilities"]["text"]["passed"] is True
    assert doc["socket"] == f"{common}/api.sock"
    transport = httpx.HTTPTransport(uds=str(life.run.inside(doc["socket"])))
    with httpx.Client(transport=transport, base_url="http://localhost", timeout=30) as local:
        card = local.get("/v1/models").json()["data"][0]
    assert (card["id"], card["capabilities"]) == (life.name, doc["capabilities"])


def _manifest_of(life: Life) -> str:
    """The manifest the snap carries ($SNAP/snapbuild/manifest.yaml)."""
    return life.run.inside(f"/snap/{life.name}/current/snapbuild/manifest.yaml").read_text()


def test_snap_set_port_moves_the_server(life: Life) -> None:
    old, new = life.port, free_port()
    result = life.run.snap_set(f"port={new}")
    assert result.returncode == 0, result
    assert port_of(life.run) == new
    wait_closed(old)
    life.port = new
    assert wait_ready(life.run, new)["model"] == life.name
    assert published(life.run, life.name, new)["base-url"] == f"http://127.0.0.1:{new}/v1"


def test_a_busy_port_is_refused_by_the_configure_hook(life: Life) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        result = life.run.snap_set(f"port={taken}")
    assert result.returncode != 0
    assert f"port {taken} is busy on 127.0.0.1" in result.stderr
    assert port_of(life.run) == life.port  # snapd keeps the configuration the hook refused


def test_a_refresh_runs_post_refresh_and_serves_again(life: Life) -> None:
    results = life.run.refresh(life.packed.snap, components=dict(life.packed.components))
    hooks = [(Path(r.argv[0]).name, r.returncode) for r in results]
    assert ("post-refresh", 0) in hooks, results
    assert all(code == 0 for _, code in hooks), results
    assert os.readlink(life.run.inside(f"/snap/{life.name}/current")) == "x2"
    health = wait_ready(life.run, life.port)
    assert (health["model"], health["status"]) == (life.name, "ok")


def test_nothing_was_written_outside_the_snaps_own_places(life: Life) -> None:
    """/ and $SNAP are read-only in the namespace: a write anywhere else would have failed and
    shown up in a hook's or the service's output."""
    outputs = [r.stderr + r.stdout for r in life.install] + [life.run.service_log("server")]
    for text in outputs:
        assert "Read-only file system" not in text
        assert "Traceback" not in text


def test_the_install_hook_needs_no_inet_socket(tmp_path: Path) -> None:
    """With network-bind disconnected, the hooks may not open an inet socket (EACCES); the
    install hook still succeeds: the free-port check says it cannot tell and leaves it to the
    daemon."""
    harness_or_skip()
    packed = pack_or_skip("smollm2", tmp_path / "out")
    with SnapRun(
        packed.snap,
        tmp_path / "run",
        components=dict(packed.components),
        connections={"network-bind": False, "network": False},
    ) as run:
        result = run.run_hook("install")
        assert result.returncode == 0, result
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr
        assert run.snapctl("get", "port").stdout.strip() == "8326"  # the manifest's, unchecked


def test_snapbuild_try_runs_the_packed_snap(tmp_path: Path) -> None:
    """`snapbuild try` (and so `make demo`) installs what users install where it can: the
    packed snap run as snapd runs it, then one question through the snap's own `chat`."""
    harness_or_skip()
    pack_or_skip("smollm2", tmp_path / "warm")  # skips where packing cannot run
    snapbuild = Path(sys.executable).parent / "snapbuild"
    command = [str(snapbuild), "try", "smollm2", "--as", "snapd", "--work-dir", str(tmp_path / "w")]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    out = proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Installing smollm2_1.0_amd64.snap as snapd runs it" in out
    assert "Ran the install hook ($SNAP/meta/hooks/install) as snapd runs it" in out
    assert "TRIAL" not in out
    answer = next(line for line in out.splitlines() if line.startswith("smollm2: "))
    assert len(answer) > len("smollm2: ")
    packed = sorted(p.name for p in (tmp_path / "w" / "out").iterdir())
    assert packed == [
        "smollm2+llamacpp-cpu.comp",
        "smollm2+smollm2-q4-1.comp",
        "smollm2_1.0_amd64.snap",
    ]
