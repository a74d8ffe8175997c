"""The snapctl stand-in's supervisor: ``restart-condition`` with systemd's start limit.

Real processes throughout: shell daemons that count their starts, and the real in-snap daemon
whose port another program holds, which exits 2 at once. snapd's unit would restart it on
failure until systemd's start limit; so must the stand-in, and no further.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from snapbuild.trial.run import prepare
from snapbuild.trial.snapctl.supervisor import should_restart

GB = 1000**3


def _wait(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _snap(tmp_path: Path, script: str, **app: object) -> dict[str, str]:
    """A one-daemon snap tree; returns the environment to run the stand-in in."""
    prime = tmp_path / "prime"
    (prime / "meta").mkdir(parents=True)
    server = {"command": "bin/serve", "daemon": "simple", **app}
    (prime / "meta" / "snap.yaml").write_text(
        yaml.safe_dump({"name": "demo", "version": "1", "apps": {"server": server}})
    )
    serve = prime / "bin" / "serve"
    serve.parent.mkdir()
    serve.write_text('#!/bin/sh\necho start >> "$SNAP_DATA/starts"\n' + script)
    serve.chmod(0o755)
    (tmp_path / "data").mkdir()
    return {
        **os.environ,
        "SNAP": str(prime),
        "SNAP_NAME": "demo",
        "SNAP_DATA": str(tmp_path / "data"),
        "SNAPCTL_STANDIN_STATE": str(tmp_path / "state"),
    }


def _ctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "snapbuild.trial.snapctl", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def _row(env: dict[str, str]) -> list[str]:
    return _ctl(env, "services").stdout.splitlines()[1].split()


def _starts(tmp_path: Path) -> int:
    path = tmp_path / "data" / "starts"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_failing_daemon_is_restarted_up_to_the_start_limit_then_failed(tmp_path: Path) -> None:
    env = _snap(tmp_path, "exit 3\n", **{"restart-condition": "on-failure"})
    assert _ctl(env, "start", "--enable", "demo.server").returncode == 0
    _wait(lambda: _row(env) == ["demo.server", "enabled", "inactive", "failed"])
    time.sleep(1.0)  # well past the restart delay: nothing starts it again
    assert _starts(tmp_path) == 5
    log = (tmp_path / "state" / "logs" / "server.log").read_text().splitlines()
    assert log == [
        *[
            line
            for n in range(1, 6)
            for line in (
                f"snapctl-standin: server: starting (attempt {n})",
                "snapctl-standin: server: exited with status 3",
            )
        ],
        "snapctl-standin: server: start limit hit (5 starts within 10s); not restarting: "
        "the service is failed",
    ]
    # an explicit start clears the failure, as `snap start` after `systemctl reset-failed`
    assert _ctl(env, "start", "demo.server").returncode == 0
    _wait(lambda: _starts(tmp_path) == 10 and _row(env)[3] == "failed")


def test_a_daemon_that_recovers_keeps_running_and_stop_does_not_restart_it(
    tmp_path: Path,
) -> None:
    script = '[ "$(wc -l < "$SNAP_DATA/starts")" -ge 3 ] || exit 1\nexec sleep 300\n'
    env = _snap(tmp_path, script)  # no restart-condition: snapd's default is on-failure
    assert _ctl(env, "start", "demo.server").returncode == 0
    _wait(lambda: _starts(tmp_path) == 3)
    _wait(lambda: _row(env) == ["demo.server", "disabled", "active", "-"])
    assert _ctl(env, "stop", "demo.server").returncode == 0
    time.sleep(0.5)
    assert _row(env) == ["demo.server", "disabled", "inactive", "-"]
    assert _starts(tmp_path) == 3


def test_a_clean_exit_is_not_restarted_on_failure(tmp_path: Path) -> None:
    env = _snap(tmp_path, "exit 0\n")
    assert _ctl(env, "start", "demo.server").returncode == 0
    _wait(lambda: _row(env)[2] == "inactive")
    time.sleep(0.5)
    assert (_starts(tmp_path), _row(env)[3]) == (1, "-")


def test_restart_rules_follow_systemd() -> None:
    table = {
        cond: [should_restart(cond, rc) for rc in (0, 3, -9)]
        for cond in ("on-failure", "always", "never", "on-success", "on-abnormal", "on-watchdog")
    }
    assert table == {
        "on-failure": [False, True, True],
        "always": [True, True, True],
        "never": [False, False, False],
        "on-success": [True, False, False],
        "on-abnormal": [False, False, True],
        "on-watchdog": [False, False, False],
    }


def test_the_real_daemon_failing_is_not_restarted_in_a_loop(
    tmp_path: Path, machines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its port taken by another program, the daemon fails (exit 2); restarted on failure until
    the start limit, then left failed."""
    manifest = tmp_path / "huge-demo.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "name": "huge-demo",
                "title": "Too large",
                "summary": "Weights larger than the machine's memory",
                "description": "Test manifest.",
                "license": "MIT",
                "version": "1",
                "architectures": ["amd64"],
                "model": {"architecture": "llama", "parameters": 30_000_000_000},
                "artifacts": [
                    {
                        "name": "weights",
                        "format": "gguf",
                        "quantization": "Q4_K_M",
                        "files": [
                            {
                                "path": f"w-{i}.gguf",
                                "url": f"https://example.invalid/w-{i}.gguf",
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
        )
    )
    monkeypatch.setenv("SNAPBUILD_HOST_ROOT", str(machines_dir / "asus-ux301l" / "machine-root"))
    trial, decision, _ = prepare(str(manifest), work_dir=tmp_path / "work", echo=lambda _: None)
    assert decision.selected is None
    trial.stop()  # the install hook started it: with nothing to load it answers 503 saying why
    port = json.loads(trial.run("get", "port", "--json").stdout)["port"]
    # each start of the real daemon is a Python process: widen the window so a slow, shared
    # machine still counts all five starts inside it (the burst is what is under test)
    env = {**trial.env, "SNAPCTL_STANDIN_START_LIMIT_INTERVAL": "600s"}
    with socket.socket() as squatter:  # another program took the port: the daemon cannot serve
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        try:
            start = subprocess.run(
                [str(trial.bin / "snapctl"), "start", "huge-demo.server"], env=env, check=False
            )
            assert start.returncode == 0
            _wait(lambda: "failed" in trial.snapctl("services").stdout, timeout=120)
            log = trial.log()
            assert log.count("snapctl-standin: server: exited with status 2") == 5
            assert log.count(f"Error: port {port} on 127.0.0.1 is already in use") == 5
            assert log.splitlines()[-1] == (
                "snapctl-standin: server: start limit hit (5 starts within 600s); not "
                "restarting: the service is failed"
            )
            services = json.loads((trial.state / "services.json").read_text())["server"]
            assert (services["failed"], services["starts"]) == (True, 5)
        finally:
            trial.stop()
