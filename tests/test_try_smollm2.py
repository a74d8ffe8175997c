"""End to end: `snapbuild try smollm2` answers with the real SmolLM2 model, then the in-snap
command manages that trial snap (status, engines, use-engine, set port, chat) through the same
simulated environment: rendered hooks, snapctl stand-in, the daemon as the apps: entry says.

The tests are one operator's session on one trial, in file order: the first ones see the
service as `try` left it (stopped), later ones start it through `serving`. Each also passes
alone; shuffled, the first ones would see a running service.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from support.llama import needs_llama_server

from hwprobe import probe
from snapbuild.serving.threads import default_threads
from snapbuild.trial.sandbox import Trial

pytestmark = [pytest.mark.slow, needs_llama_server]
llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_health(port: int, engine: str, timeout: float = 90) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            resp = requests.get(f"http://127.0.0.1:{port}/health", timeout=2)
            if resp.status_code == 200 and resp.json()["engine"] == engine:
                body: dict[str, object] = resp.json()
                return body
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise AssertionError(f"no healthy {engine} server on port {port}")


def serving(trial: Trial) -> str:
    """Start the service if no test before this one left it running, and wait until it answers
    (so each test also runs alone); the active engine."""
    status = json.loads(trial.run("status", "--json").stdout)
    if not status["service"]["active"]:
        assert trial.snapctl("start", "smollm2.server").returncode == 0
    port = int(status["endpoint"].split(":")[2].split("/")[0])
    return str(wait_health(port, status["engine"])["engine"])


def daemons(work: Path) -> list[str]:
    """Command lines of live daemon processes started from this trial."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            environ = (proc / "environ").read_bytes().decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if "snaps.cli\0daemon" in cmdline and str(work) in environ and state != "Z":
            found.append(cmdline)
    return found


@pytest.fixture(scope="module")
def tried(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Trial, str, int]]:
    work = tmp_path_factory.mktemp("try") / "smollm2"
    port = free_port()
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "snapbuild"),
            "try",
            "smollm2",
            "--as",
            "trial",
            "--work-dir",
            str(work),
            "--port",
            str(port),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    trial = Trial(work=work, name="smollm2")
    try:
        yield trial, proc.stdout + proc.stderr, proc.returncode
    finally:
        trial.stop()
        assert daemons(work) == []


def test_try_answers_with_the_real_model(tried: tuple[Trial, str, int]) -> None:
    trial, output, code = tried
    assert code == 0, output
    lines = output.splitlines()
    assert lines[0] == f"Rendering the snapcraft project into {trial.project}"
    assert lines[1] in {
        "snap pack --check-skeleton: passed",
        "snap pack --check-skeleton: skipped: `snap` is not installed (apt-get install snapd "
        "gives `snap pack`)",
    }
    assert "Running the install hook ($SNAP/meta/hooks/install)" in lines
    install = [line for line in lines if line.startswith("  install: requesting components")]
    assert install == [
        "  install: requesting components (snapd installs them after this hook): llamacpp-cpu, "
        "smollm2-q4-1"
    ]
    health = json.loads(next(s for s in lines if s.startswith("Healthy: ")).split(" ", 1)[1])
    assert health["runtime_info"]["threads"] == default_threads(probe())  # from the probe
    answer = output.split("\nsmollm2: ", 1)[1].split("\nEndpoint: ", 1)[0]
    assert len(answer.split()) >= 3  # a real sentence came back, whatever its line breaks
    assert any(line.startswith("Endpoint: http://127.0.0.1:") for line in lines)
    assert f"  {trial.bin / 'smollm2'} status" in lines
    assert daemons(trial.work) == []  # try stopped its server on the way out


def test_the_hooks_run_are_the_rendered_ones(tried: tuple[Trial, str, int]) -> None:
    trial, _, _ = tried
    for hook in ("install", "post-refresh", "configure"):
        rendered = (trial.project / "snap" / "hooks" / hook).read_bytes()
        assert (trial.prime / "meta" / "hooks" / hook).read_bytes() == rendered
        assert rendered.endswith(f'exec "$SNAP/bin/inference-snap" hook {hook}\n'.encode())


def test_status_and_engines(tried: tuple[Trial, str, int]) -> None:
    trial, _, _ = tried
    status = json.loads(trial.run("status", "--json").stdout)
    active = status["engine"]
    port = status["endpoint"].split(":")[2].split("/")[0]
    serving = status.pop("serving")
    assert (serving["slots"], serving["context-per-slot"], serving["kv-cache-type"]) == (
        8,
        4096,
        "f16",
    )
    assert status.pop("live") is None  # the service is stopped
    common = trial.work / "var" / "common"
    assert status.pop("discovery-file") == f"{common}/discovery/api.json"
    published = json.loads((common / "discovery" / "api.json").read_text())
    assert status.pop("discovery") == published  # what the server published when it ran
    assert (published["base-url"], published["capabilities"]["text"]["passed"]) == (
        f"http://127.0.0.1:{port}/v1",
        True,
    )
    assert status == {
        "snap": "smollm2",
        "model": "smollm2",
        "engine": active,
        "runtime": "llama.cpp-cpu",
        "device": "cpu",
        "quantization": "Q4_1",
        "inputs": ["text"],
        "forced": False,
        "service": {"name": "smollm2.server", "enabled": True, "active": False},
        "endpoint": f"http://127.0.0.1:{port}/v1",
        "context-size": 4096,
        "daemon": None,  # stopped after serving: nothing to explain
        "problem": None,
        "notes": [],
    }
    text = trial.run("status").stdout.splitlines()
    assert text[6].startswith(
        "serving:      8 parallel slots x 4096 tokens, f16 KV cache, flash attention on, "
        "prompt-cache reuse from 256 tokens, 90 MiB prompt cache (8 slots, the device's "
        "preferred number, fit in f16"
    )
    del text[6]
    assert text == [
        "model:        smollm2",
        f"engine:       {active} (llama.cpp-cpu on cpu, Q4_1)",
        "inputs:       text",
        "service:      smollm2.server (inactive, enabled)",
        f"endpoint:     http://127.0.0.1:{port}/v1",
        "context-size: 4096",
        "capabilities: text passed",
        f"discovery:    {common}/discovery/api.json (Unix socket {common}/api.sock)",
        "The service is enabled but not running: stopped, still starting, or failed "
        "(see the service log).",
    ]
    rows = json.loads(trial.run("engines", "--json").stdout)
    assert [r["engine"] for r in rows] == ["cuda", "vulkan", "cpu-avx2", "cpu"]
    assert [r["engine"] for r in rows if r["active"]] == [active]
    table = trial.run("engines").stdout.splitlines()
    assert table[0].split() == ["ENGINE", "RUNTIME", "DEVICE", "QUANT", "COMPATIBLE", "FIT", "RANK"]
    marked = [line.split()[1] for line in table[1:] if line.startswith("*")]
    assert marked == [active]


def _other_cpu_engine(trial: Trial) -> tuple[str, str]:
    rows = json.loads(trial.run("engines", "--json").stdout)
    active = next(r["engine"] for r in rows if r["active"])
    others = [r["engine"] for r in rows if r["compatible"] and not r["active"]]
    if not others:
        pytest.skip("this machine has only one compatible engine to switch between")
    return active, others[0]


def test_use_engine_no_changes_nothing(tried: tuple[Trial, str, int]) -> None:
    trial, _, _ = tried
    active, other = _other_cpu_engine(trial)
    before = {p: p.read_bytes() for p in (trial.work / "var" / "x1").glob("*.json")}
    config_before = (trial.state / "config.json").read_bytes()
    proc = trial.run("use-engine", other, input_text="n\n")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1] == "Nothing changed."
    assert {p: p.read_bytes() for p in (trial.work / "var" / "x1").glob("*.json")} == before
    assert (trial.state / "config.json").read_bytes() == config_before
    assert json.loads(trial.run("status", "--json").stdout)["engine"] == active


def test_switch_engine_and_back(tried: tuple[Trial, str, int]) -> None:
    trial, _, _ = tried
    active, other = _other_cpu_engine(trial)
    port = int(json.loads(trial.run("get", "port", "--json").stdout)["port"])
    proc = trial.run("use-engine", other, "--assume-yes")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "This will:",
        f"  - switch from {active} to {other} (llama.cpp-cpu on cpu)",
        "  - start the server",
        f"Now using {other}.",
    ]
    assert wait_health(port, other)["engine"] == other
    assert json.loads(trial.run("get", "engine", "--json").stdout) == {"engine": other}
    proc = trial.run("use-engine", "--auto", "-y")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1:] == [
        f"  - switch from {other} to {active} (llama.cpp-cpu on cpu)",
        "  - restart the server",
        f"Now using {active}.",
    ]
    wait_health(port, active)
    assert json.loads(trial.run("get", "engine", "--json").stdout) == {"engine": "auto"}


def test_set_port_restarts_on_the_new_port(tried: tuple[Trial, str, int]) -> None:
    trial, _, _ = tried
    active = serving(trial)
    new_port = free_port()
    proc = trial.run("set", f"port={new_port}")
    assert (proc.returncode, proc.stdout) == (0, "Set port.\n")
    assert wait_health(new_port, active)["engine"] == active
    answer = requests.post(
        f"http://127.0.0.1:{new_port}/v1/chat/completions",
        json={"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8},
        timeout=60,
    )
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"].strip()


def test_busy_or_invalid_port_is_rejected_and_nothing_applied(
    tried: tuple[Trial, str, int],
) -> None:
    trial, _, _ = tried
    config_before = (trial.state / "config.json").read_bytes()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        proc = trial.run("set", f"port={busy}", "context-size=2048")
        assert proc.returncode == 2
        assert proc.stderr.splitlines()[0] == (
            f"Error: invalid configuration: port {busy} is busy on 127.0.0.1: another program "
            f"listens there (pick a free port, e.g. `set port={busy + 1}`)"
        ) or proc.stderr.startswith(f"Error: invalid configuration: port {busy} is busy")
        assert (trial.state / "config.json").read_bytes() == config_before
        # snapd's path: `snap set` stores the value, then the configure hook must refuse it
        assert trial.snapctl("set", f"port={busy}").returncode == 0
        hook = trial.run_hook("configure")
        assert hook.returncode == 2
        assert hook.stderr.startswith(f"Error: invalid configuration: port {busy} is busy")
        (trial.state / "config.json").write_bytes(config_before)  # snapd rolls back
    proc = trial.run("set", "port=70000")
    assert (proc.returncode, proc.stderr.splitlines()) == (
        2,
        [
            "Error: invalid configuration: port 70000 is out of range: use 1-65535",
            "Fix: Change the value(s) named above; nothing was applied.",
        ],
    )
    assert (trial.state / "config.json").read_bytes() == config_before


def test_chat_piped_streams_answers(tried: tuple[Trial, str, int]) -> None:
    trial, _, _ = tried
    serving(trial)
    proc = trial.run("chat", "--max-tokens", "12", input_text="Say hello.\nName a colour.\n")
    assert proc.returncode == 0, proc.stderr
    answers = proc.stdout.splitlines()
    assert len([a for a in answers if a.strip()]) >= 2
    assert not proc.stdout.startswith("Chatting with")  # no prompts when piped
    too_hot = trial.run("chat", "--temperature", "3", input_text="Hi\n")
    assert too_hot.returncode == 2 and "Traceback" not in too_hot.stderr
    assert "Invalid value for '--temperature': 3.0 is not in the range 0<=x<=2." in too_hot.stderr


def test_env_settings_reach_the_runtime(tried: tuple[Trial, str, int]) -> None:
    trial, _, _ = tried
    serving(trial)
    proc = trial.run("set", "env.OMP_NUM_THREADS=1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(trial.run("get", "env.OMP_NUM_THREADS", "--json").stdout) == {
        "env.OMP_NUM_THREADS": "1"
    }
    running = json.loads((trial.work / "var" / "x1" / "running.json").read_text())
    deadline = time.monotonic() + 30
    while running["env"] != {"OMP_NUM_THREADS": "1"} and time.monotonic() < deadline:
        time.sleep(0.2)
        running = json.loads((trial.work / "var" / "x1" / "running.json").read_text())
    assert running["env"] == {"OMP_NUM_THREADS": "1"}  # the restarted daemon got it
    assert os.environ.get("OMP_NUM_THREADS") != "sentinel"
