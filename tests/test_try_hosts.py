"""The trial on recorded machines: nothing fits (the service loads nothing, status explains) and a
missing hardware-observe connection (safe CPU choice, said so)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.llama import needs_llama_server

from snapbuild.trial.run import prepare
from snapbuild.trial.sandbox import Trial

GB = 1000**3
HUGE = {
    "name": "huge-model",
    "title": "A model too large for a laptop",
    "summary": "Three 4.9 GB weight files",
    "description": "Test manifest: its weights alone exceed a 7 GiB machine's memory.",
    "license": "Apache-2.0",
    "version": "1",
    "architectures": ["amd64", "arm64"],
    "model": {"architecture": "llama", "parameters": 30_000_000_000},
    "artifacts": [
        {
            "name": "weights",
            "format": "gguf",
            "quantization": "Q4_K_M",
            "files": [
                {
                    "path": f"part-{i}.gguf",
                    "url": f"https://example.invalid/part-{i}.gguf",
                    "sha256": f"{i}" * 64,
                    "size": 49 * GB // 10,
                }
                for i in range(1, 4)
            ],
        }
    ],
    "engines": [
        {
            "name": "cpu",
            "summary": "llama.cpp on the CPU",
            "runtime": "llama.cpp-cpu",
            "artifact": "weights",
        }
    ],
}


def test_nothing_fits_installs_nothing_and_says_why(
    tmp_path: Path, machines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = tmp_path / "huge-model.yaml"
    manifest.write_text(yaml.safe_dump(HUGE, sort_keys=False))
    root = machines_dir / "asus-ux301l" / "machine-root"
    monkeypatch.setenv("SNAPBUILD_HOST_ROOT", str(root))
    work = tmp_path / "work"
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "snapbuild"),
            "try",
            str(manifest),
            "--as",
            "trial",
            "--work-dir",
            str(work),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    err = proc.stderr.splitlines()
    assert err[0] == "Error: no engine of huge-model fits this machine; the service stays disabled"
    trial = Trial(work=work, name="huge-model")
    services = trial.snapctl("services").stdout.splitlines()
    # enabled (it answers 503 saying why while it runs), stopped by `try` on its way out
    assert services[1].split() == ["huge-model.server", "enabled", "inactive", "-"]
    status = json.loads(trial.run("status", "--json").stdout)
    assert status["engine"] is None
    assert status["service"] == {"name": "huge-model.server", "enabled": True, "active": False}
    problem = status["problem"].splitlines()
    assert problem[0] == (
        "No engine of huge-model fits this machine, so the server loads no model (its API "
        "answers 503 saying why)."
    )
    assert problem[1].startswith("  cpu: RAM available ")
    assert problem[-1] == (
        "Run `huge-model why` for every reason; after freeing memory or adding hardware run "
        "`huge-model use-engine --auto`."
    )
    assert list((work / "components" / "x1").glob("*")) == []  # nothing installed
    # what the server answered meanwhile: tests/test_fallback_snap.py


@pytest.mark.slow
@needs_llama_server
def test_without_hardware_observe_a_cpu_engine_is_chosen_and_said(
    tmp_path: Path, machines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    root = machines_dir / "hp-zbook-i712850HX+RadeonPROW6600M" / "machine-root"
    monkeypatch.setenv("SNAPBUILD_HOST_ROOT", str(root))
    trial, decision, _ = prepare(
        "smollm2",
        work_dir=tmp_path / "work",
        echo=lambda _: None,
        connections={"hardware-observe": False},
    )
    try:
        assert decision.selected is not None and decision.selected.device == "gpu"
        status = json.loads(trial.run("status", "--json").stdout)
        assert status["device"] == "cpu"
        assert status["notes"] == [
            "the hardware-observe interface is not connected, so GPUs and NPUs cannot be seen: "
            "chose among CPU engines only. Run `sudo snap connect smollm2:hardware-observe` "
            "then `smollm2 use-engine --auto`."
        ]
        assert [
            r["engine"] for r in json.loads(trial.run("engines", "--json").stdout) if r["active"]
        ] == [status["engine"]]
    finally:
        trial.stop()
