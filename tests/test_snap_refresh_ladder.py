"""post-refresh of a snap built from a model ladder, through the rendered hook and the snapctl
stand-in: the size that ran is kept across a refresh while it fits (even when the new revision
brings a larger one that would fit too), and replaced, explained and its weights removed when
the machine no longer has room for it; when no size fits, the server stays to answer why.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.trials import idle_server

from hwprobe import probe
from snapbuild.project.builder import make
from snapbuild.trial.prime import assemble_prime, write_commands
from snapbuild.trial.sandbox import Trial

NAME = "ladder-demo"
WEIGHTS = b"GGUF" + bytes(range(256)) * 16
GIB = 1 << 30
SIZES = {"huge": 2 * GIB + GIB // 2, "big": 2 * GIB, "small": 64 << 20}  # declared bytes


def _manifest(options: list[str]) -> dict[str, Any]:
    """A ladder of ``options`` (best first) sharing one CPU engine."""
    return {
        "name": NAME,
        "title": "Ladder demo",
        "summary": "One CPU engine, several model sizes",
        "description": "Test manifest for post-refresh of a model ladder.",
        "license": "MIT",
        "version": "1",
        "architectures": ["amd64", "arm64"],
        "min-tokens-per-second": 1,
        "model": {"architecture": "llama"},
        "options": [
            {"name": o, "model": {"architecture": "llama", "parameters": SIZES[o] // 2}}
            for o in options
        ],
        "artifacts": [
            {
                "name": f"{o}-weights",
                "option": o,
                "format": "gguf",
                "quantization": "Q8_0",
                "files": [
                    {
                        "path": "model.gguf",
                        "url": f"https://example.invalid/{o}/model.gguf",
                        "sha256": hashlib.sha256(WEIGHTS).hexdigest(),
                        "size": SIZES[o],
                    }
                ],
            }
            for o in options
        ],
        "engines": [
            {
                "name": "cpu",
                "summary": "llama.cpp on any CPU",
                "runtime": "llama.cpp-cpu",
                "quantization": "Q8_0",
            }
        ],
    }


def _render(tmp_path: Path, options: list[str], out: Path) -> Path:
    manifest_file = tmp_path / f"{NAME}-{len(options)}.yaml"
    manifest_file.write_text(yaml.safe_dump(_manifest(options), sort_keys=False))
    make(str(manifest_file), out)
    return out


@pytest.fixture
def trial(tmp_path: Path, machines_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Trial]:
    """Installed on a recorded laptop (3.3 GiB free): big runs (an idle stand-in server)."""
    monkeypatch.delenv("SNAPBUILD_HOST_PROFILE", raising=False)
    monkeypatch.setenv("SNAPBUILD_HOST_ROOT", str(machines_dir / "asus-ux301l" / "machine-root"))
    trial = Trial(work=tmp_path / "work", name=NAME)
    _render(tmp_path, ["big", "small"], trial.project)
    assemble_prime(trial, "amd64")
    write_commands(trial)
    idle_server(trial)
    for comp in ("llamacpp-cpu", "huge-weights", "big-weights", "small-weights"):
        (trial.staged / comp).mkdir(parents=True)
        (trial.staged / comp / "model.gguf").write_bytes(WEIGHTS)
    proc = trial.run_hook("install")
    assert proc.returncode == 0, proc.stderr
    assert _selected(trial) == ("big", "cpu")
    assert _installed(trial) == ["big-weights", "llamacpp-cpu"]
    yield trial
    trial.stop()


def _selected(trial: Trial) -> tuple[str, str] | None:
    data = json.loads((Path(trial.env["SNAP_DATA"]) / "decision.json").read_text())
    selected = data["selected"]
    return None if selected is None else (str(selected["option"]), str(selected["engine"]))


def _installed(trial: Trial) -> list[str]:
    return sorted(p.name for p in Path(trial.env["SNAP_COMPONENTS"]).iterdir())


def _server_pid(trial: Trial) -> int:
    services = json.loads((trial.state / "services.json").read_text())
    return int(services["server"]["pid"])


def test_the_size_that_ran_is_kept_though_a_larger_one_came(tmp_path: Path, trial: Trial) -> None:
    """A new revision adds huge, which would fit: the refresh keeps big and the server."""
    pid = _server_pid(trial)
    new = _render(tmp_path, ["huge", "big", "small"], tmp_path / "new-project")
    for item in (new / "snapbuild-data").iterdir():
        shutil.copy2(item, trial.prime / "snapbuild" / item.name)
    proc = trial.run_hook("post-refresh")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert _selected(trial) == ("big", "cpu")
    assert _server_pid(trial) == pid
    rows = json.loads(trial.run("models", "--json").stdout)
    assert [(r["option"], r["active"], r["reason"]) for r in rows] == [
        ("huge", False, "runs here on cpu; big on cpu was asked for"),
        ("big", True, "selected"),
        ("small", False, "smaller than the selected big on cpu (runs here on cpu)"),
    ]


def test_a_size_that_no_longer_fits_is_replaced_and_its_weights_removed(
    tmp_path: Path, trial: Trial, machines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = probe(str(machines_dir / "asus-ux301l" / "machine-root"))
    data = host.to_data()
    data["memory"]["available"] = GIB  # something else took the rest
    profile = tmp_path / "busy.json"
    profile.write_text(json.dumps(data))
    monkeypatch.setenv("SNAPBUILD_HOST_PROFILE", str(profile))
    pid = _server_pid(trial)
    proc = trial.run_hook("post-refresh")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "after the refresh model big no longer fits this machine (cpu: RAM available 1.0 GiB < "
        "2.2 GiB needed even at the minimum context 512 (2.2 GiB at 4096)): switched to model "
        "small, engine cpu",
        "requesting components (snapd installs them after this hook): small-weights",
        "removing the other model sizes' components: big-weights",
    ]
    assert _selected(trial) == ("small", "cpu")
    assert _server_pid(trial) != pid
    assert _installed(trial) == ["llamacpp-cpu", "small-weights"]
    status = json.loads(trial.run("status", "--json").stdout)
    assert status["option"] == {
        "name": "small",
        "title": None,
        "parameters": 33554432,
        "reads": ["text"],
    }


def test_when_no_size_fits_the_server_stays_to_say_why(
    tmp_path: Path, trial: Trial, machines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not even the smallest size fits any more: the server is restarted to load nothing and
    answer 503 saying why (snaps/fallback.py), and status names the smallest size's blockers."""
    host = probe(str(machines_dir / "asus-ux301l" / "machine-root"))
    data = host.to_data()
    data["memory"]["available"] = 16 << 20
    profile = tmp_path / "full.json"
    profile.write_text(json.dumps(data))
    monkeypatch.setenv("SNAPBUILD_HOST_PROFILE", str(profile))
    pid = _server_pid(trial)
    proc = trial.run_hook("post-refresh")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("after the refresh model big no longer fits this machine (cpu: ")
    assert lines[0].endswith("): no model fits")
    assert lines[1:3] == [
        "No engine of ladder-demo fits this machine, so the server loads no model (its API "
        "answers 503 saying why).",
        "Not even the smallest model, small:",
    ]
    assert lines[3].startswith("  cpu: RAM available 16 MiB < ")
    assert _selected(trial) is None
    assert _server_pid(trial) != pid  # restarted: it loads nothing, it answers why
    status = json.loads(trial.run("status", "--json").stdout)
    assert status["service"]["enabled"] and status["service"]["active"]
    assert status["problem"].splitlines()[1:3] == lines[2:4]
    assert _installed(trial) == ["big-weights", "llamacpp-cpu"]  # nothing to switch to
