"""Running the real in-snap daemon of a trial by hand, for tests of what it answers; a trial
whose server app idles, for tests about files and hooks."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import httpx
import yaml

from snapbuild.trial.sandbox import Trial


def daemon_outage(trial: Trial) -> tuple[dict[str, Any], list[str]]:
    """Run the daemon command (no supervisor) of a snap whose engine cannot serve until it
    answers on its port; its /health (a 503) and its log until it said so. Stopped after."""
    proc = subprocess.Popen(trial.command("daemon"), stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        for line in proc.stderr:
            if line.startswith("answering 503"):
                break
            lines.append(line.rstrip("\n"))
        port = json.loads(trial.run("get", "port", "--json").stdout)["port"]
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
        assert health.status_code == 503, (health.text, lines)
        return health.json(), lines
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def idle_server(trial: Trial) -> None:
    """Make the primed snap's server app a shell that sleeps instead of loading the model:
    hooks and the CLI see a running service without any engine work."""
    snap_yaml = trial.prime / "meta" / "snap.yaml"
    meta = yaml.safe_load(snap_yaml.read_text())
    meta["apps"]["server"]["command"] = "bin/idle"
    snap_yaml.write_text(yaml.safe_dump(meta))
    idle = trial.prime / "bin" / "idle"
    idle.write_text("#!/bin/sh\nexec sleep 600\n")
    idle.chmod(0o755)
