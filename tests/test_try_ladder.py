"""End to end: a model ladder of two tiny generated GGUFs (`snapbuild new` on both files) tried as
a snap. The install hook installs only the chosen size's components, `models` lists every size
with its reason, `use-model` switches to the other size (installing its weights, removing the
first's) and the server serves it under the same model id, /v1/models and the discovery
document naming the size.

One operator's session on one trial, in file order (as tests/test_try_smollm2.py).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from support.llama import needs_llama_server
from support.tiny_models import write_tiny_gguf

from snapbuild.trial.sandbox import Trial

pytestmark = [pytest.mark.slow, needs_llama_server]
SNAPBUILD = str(Path(sys.executable).parent / "snapbuild")
NAME = "tinyladder"
BIG, SMALL = "662k", "110k"  # the sizes `new` names from the files' parameter counts


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def installed(trial: Trial) -> list[str]:
    """The components the stand-in installed (what $SNAP_COMPONENTS holds)."""
    root = trial.work / "components" / "x1"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def wait_option(port: int, option: str, timeout: float = 90) -> dict[str, Any]:
    """/v1/models once the server that answers serves ``option``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            health = requests.get(f"http://127.0.0.1:{port}/health", timeout=2)
            models = requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).json()
            if health.status_code == 200 and models["data"][0].get("option") == option:
                body: dict[str, Any] = models
                return body
        except (requests.RequestException, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"no server serving {option} on port {port}")


def published(trial: Trial, option: str, timeout: float = 30) -> dict[str, Any]:
    """The discovery document once the daemon published that ``option`` serves."""
    path = Path(trial.env["SNAP_COMMON"]) / "discovery" / "api.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data: dict[str, Any] = json.loads(path.read_text())
            if data.get("option") == option and data.get("status") == "ok":
                return data
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"no discovery document saying {option} serves at {path}")


@pytest.fixture(scope="module")
def tried(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Trial, str, int, int]]:
    files = tmp_path_factory.mktemp("ladder")
    big = write_tiny_gguf(files / "tiny-big-F16.gguf", embedding=128, layers=4, feed_forward=256)
    small = write_tiny_gguf(files / "tiny-small-F16.gguf")
    manifest = files / f"{NAME}.yaml"
    new = [SNAPBUILD, "new", str(big), str(small), "--name", NAME, "--license", "Apache-2.0"]
    subprocess.run([*new, "-o", str(manifest)], check=True, capture_output=True, timeout=120)
    work = tmp_path_factory.mktemp("try") / NAME
    port = free_port()
    try_it = [
        SNAPBUILD,
        "try",
        str(manifest),
        "--as",
        "trial",
        "--work-dir",
        str(work),
        "--port",
        str(port),
    ]
    proc = subprocess.run(try_it, capture_output=True, text=True, timeout=300, check=False)
    trial = Trial(work=work, name=NAME)
    try:
        yield trial, proc.stdout + proc.stderr, proc.returncode, port
    finally:
        trial.stop()


def test_try_installs_only_the_chosen_sizes_components(
    tried: tuple[Trial, str, int, int],
) -> None:
    trial, output, code, _ = tried
    assert code == 0, output
    assert (
        f"  install: selected model {BIG}, engine cpu: {BIG}: the best option that fits and "
        "decodes at least 5 tokens/s here; cpu is the only compatible engine (4 rejected)"
    ) in output.splitlines()
    assert installed(trial) == ["llamacpp-cpu", f"{NAME}-{BIG}-f16"]
    # both sizes were offered (staged), as the Store offers every component
    staged = sorted(p.name for p in trial.staged.iterdir())
    assert staged == ["llamacpp-cpu", f"{NAME}-{SMALL}-f16", f"{NAME}-{BIG}-f16"]


def test_models_lists_every_size_with_its_reason(tried: tuple[Trial, str, int, int]) -> None:
    trial, *_ = tried
    rows = json.loads(trial.run("models", "--json").stdout)
    assert [(r["option"], r["fits"], r["engine"], r["active"], r["reason"]) for r in rows] == [
        (BIG, True, "cpu", True, "selected"),
        (SMALL, True, "cpu", False, f"smaller than the selected {BIG} on cpu (runs here on cpu)"),
    ]
    assert [(r["inputs"], r["parameters"]) for r in rows] == [
        (["text"], 662400),
        (["text"], 109760),
    ]
    text = trial.run("models").stdout.splitlines()
    assert text[0].split() == ["MODEL", "PARAMETERS", "SIZE", "READS", "FITS", "ENGINE", "WHY"]
    assert text[1].startswith(f"*  {BIG}")


def test_use_model_switches_size_and_serves_it(tried: tuple[Trial, str, int, int]) -> None:
    trial, _, _, port = tried
    switched = trial.run("use-model", SMALL, "--assume-yes")
    assert switched.returncode == 0, switched.stderr
    assert switched.stdout.splitlines() == [
        "This will:",
        f"  - switch from model {BIG} on cpu to model {SMALL} on cpu (llama.cpp-cpu on cpu)",
        f"  - install components: {NAME}-{SMALL}-f16",
        f"  - remove the other size's components: {NAME}-{BIG}-f16",
        "  - start the server",
        f"Now using model {SMALL} on cpu.",
    ]
    assert installed(trial) == ["llamacpp-cpu", f"{NAME}-{SMALL}-f16"]
    models = wait_option(port, SMALL)
    assert [(m["id"], m["option"], m["inputs"]) for m in models["data"]] == [
        (NAME, SMALL, ["text"])
    ]
    status = json.loads(trial.run("status", "--json").stdout)
    assert (status["model"], status["option"]["name"], status["option"]["reads"]) == (
        NAME,
        SMALL,
        ["text"],
    )
    # other programs find the same model id, and the size that serves it, in the document
    document = published(trial, SMALL)
    assert (document["model"], document["engine"]["name"]) == (NAME, "cpu")
    assert document["capabilities"]["text"]["passed"] is True
    answer = trial.run("chat", "--max-tokens", "4", "--temperature", "0", input_text="Hi\n")
    assert answer.returncode == 0 and answer.stdout.strip(), answer.stderr
    assert trial.run("get", "model").stdout == f"model={SMALL}\n"


def test_use_model_auto_goes_back_to_the_best_size(tried: tuple[Trial, str, int, int]) -> None:
    trial, _, _, port = tried
    back = trial.run("use-model", "--auto", "--assume-yes")
    assert back.returncode == 0, back.stderr
    assert back.stdout.splitlines()[-1] == f"Now using model {BIG} on cpu."
    assert installed(trial) == ["llamacpp-cpu", f"{NAME}-{BIG}-f16"]
    wait_option(port, BIG)
    assert trial.run("get", "model").stdout == "model=auto\n"
