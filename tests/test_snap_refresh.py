"""post-refresh: re-validate the engine after a refresh, through the rendered hook and the
file-backed snapctl stand-in.

A "refresh" here is what snapd does: the new revision's files appear under $SNAP (a new
manifest and engine data), or the machine changed under the snap, and the post-refresh hook
runs. The engine must be kept (and the server left running, same process) when nothing changed,
and re-selected, recorded and explained when the active engine was removed or no longer fits.
"""

from __future__ import annotations

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

NAME = "refresh-demo"
WEIGHTS = b"GGUF" + bytes(range(256)) * 16


def _manifest(engines: list[str]) -> dict[str, Any]:
    import hashlib

    all_engines = {
        "cpu-avx2": {
            "name": "cpu-avx2",
            "summary": "llama.cpp on CPUs with AVX2",
            "runtime": "llama.cpp-cpu",
            "artifact": "weights",
            "requires": {"all-of": [{"cpu-flags": ["avx2"]}]},
        },
        "cpu-any": {
            "name": "cpu-any",
            "summary": "llama.cpp on any CPU",
            "runtime": "llama.cpp-cpu",
            "artifact": "weights",
        },
    }
    return {
        "name": NAME,
        "title": "Refresh demo",
        "summary": "Two CPU engines, one needing AVX2",
        "description": "Test manifest for post-refresh re-validation.",
        "license": "MIT",
        "version": "1",
        "architectures": ["amd64", "arm64"],
        "model": {"architecture": "llama", "parameters": 1_000_000},
        "artifacts": [
            {
                "name": "weights",
                "format": "gguf",
                "quantization": "Q8_0",
                "files": [
                    {
                        "path": "model.gguf",
                        "url": "https://example.invalid/model.gguf",
                        "sha256": hashlib.sha256(WEIGHTS).hexdigest(),
                        "size": len(WEIGHTS),
                    }
                ],
            }
        ],
        "engines": [all_engines[e] for e in engines],
    }


def _render(tmp_path: Path, engines: list[str], out: Path) -> Path:
    manifest_file = tmp_path / f"{NAME}-{len(engines)}.yaml"
    manifest_file.write_text(yaml.safe_dump(_manifest(engines), sort_keys=False))
    make(str(manifest_file), out)
    return out


@pytest.fixture
def trial(tmp_path: Path, machines_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Trial]:
    """Installed on a recorded AVX2 laptop: cpu-avx2 runs (an idle stand-in for the server)."""
    monkeypatch.delenv("SNAPBUILD_HOST_PROFILE", raising=False)
    monkeypatch.setenv("SNAPBUILD_HOST_ROOT", str(machines_dir / "asus-ux301l" / "machine-root"))
    trial = Trial(work=tmp_path / "work", name=NAME)
    _render(tmp_path, ["cpu-avx2", "cpu-any"], trial.project)
    assemble_prime(trial, "amd64")
    write_commands(trial)
    idle_server(trial)
    for comp in ("llamacpp-cpu", "weights"):
        (trial.staged / comp).mkdir(parents=True)
    (trial.staged / "weights" / "model.gguf").write_bytes(WEIGHTS)
    proc = trial.run_hook("install")
    assert proc.returncode == 0, proc.stderr
    assert _selected(trial) == "cpu-avx2"
    yield trial
    trial.stop()


def _selected(trial: Trial) -> str | None:
    data = json.loads((Path(trial.env["SNAP_DATA"]) / "decision.json").read_text())
    selected = data["selected"]
    return None if selected is None else str(selected["engine"])


def _server_pid(trial: Trial) -> int:
    services = json.loads((trial.state / "services.json").read_text())
    return int(services["server"]["pid"])


def _refresh_to(tmp_path: Path, trial: Trial, engines: list[str]) -> None:
    """Put the new revision's manifest and engine data in place, as snapd mounts a new $SNAP."""
    new = _render(tmp_path, engines, tmp_path / "new-project")
    for item in (new / "snapbuild-data").iterdir():
        shutil.copy2(item, trial.prime / "snapbuild" / item.name)


def test_unchanged_keeps_the_engine_and_does_not_restart(trial: Trial) -> None:
    pid = _server_pid(trial)
    decision_before = (Path(trial.env["SNAP_DATA"]) / "decision.json").read_text()
    proc = trial.run_hook("post-refresh")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert _selected(trial) == "cpu-avx2"
    assert _server_pid(trial) == pid
    assert (Path(trial.env["SNAP_DATA"]) / "decision.json").read_text() == decision_before
    services = trial.snapctl("services").stdout.splitlines()
    assert services[1].split() == [f"{NAME}.server", "enabled", "active", "-"]


def test_a_removed_engine_is_replaced_recorded_and_explained(tmp_path: Path, trial: Trial) -> None:
    pid = _server_pid(trial)
    _refresh_to(tmp_path, trial, ["cpu-any"])
    proc = trial.run_hook("post-refresh")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "after the refresh engine cpu-avx2 is no longer in this snap: switched to cpu-any"
    ]
    assert _selected(trial) == "cpu-any"
    assert _server_pid(trial) != pid  # restarted on the new engine
    status = json.loads(trial.run("status", "--json").stdout)
    assert (status["engine"], status["service"]["active"]) == ("cpu-any", True)
    assert status["notes"] == [
        "after the refresh engine cpu-avx2 is no longer in this snap: switched to cpu-any"
    ]


def test_an_engine_unfit_on_the_machine_now_is_replaced_and_explained(
    tmp_path: Path, trial: Trial, machines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = probe(str(machines_dir / "asus-ux301l" / "machine-root"))
    data = host.to_data()
    data["cpus"][0]["flags"] = [f for f in data["cpus"][0]["flags"] if f != "avx2"]
    profile = tmp_path / "no-avx2.json"
    profile.write_text(json.dumps(data))
    monkeypatch.setenv("SNAPBUILD_HOST_PROFILE", str(profile))
    pid = _server_pid(trial)
    proc = trial.run_hook("post-refresh")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "after the refresh engine cpu-avx2 no longer fits this machine "
        "(needs AVX2: CPU has AVX only): switched to cpu-any"
    ]
    assert _selected(trial) == "cpu-any"
    assert _server_pid(trial) != pid
