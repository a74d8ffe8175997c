"""The snapctl stand-in and the snapctl client, run as real processes on a small snap tree.

The service here is a real shell daemon (it spawns a child, to check that stop kills the whole
process group); the client under test is the same :class:`snaps.snapctl.Snapctl` the hooks use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from snaps.snapctl import ServiceState, Snapctl, SnapctlError

SNAP_YAML = {
    "name": "demo",
    "version": "1",
    "apps": {
        "demo": {"command": "bin/demo"},
        "server": {
            "command": "bin/serve --flag",
            "daemon": "simple",
            "environment": {"GREETING": "hi-$SNAP_NAME${MISSING:+x}"},
        },
    },
}


@pytest.fixture
def snap_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A snap tree whose server writes its argv/env, spawns a child and sleeps."""
    prime = tmp_path / "prime"
    (prime / "meta").mkdir(parents=True)
    (prime / "meta" / "snap.yaml").write_text(yaml.safe_dump(SNAP_YAML))
    serve = prime / "bin" / "serve"
    serve.parent.mkdir()
    serve.write_text(
        '#!/bin/sh\n[ -d "$SNAP_COMPONENTS/weights" ] && echo yes > "$SNAP_DATA/saw-weights"\n'
        'echo "args=$* greeting=$GREETING" > "$SNAP_DATA/started"\n'
        'sleep 300 &\necho $! > "$SNAP_DATA/child"\nwait\n'
    )
    serve.chmod(0o755)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    snapctl = bindir / "snapctl"
    snapctl.write_text(f'#!/bin/sh\nexec {sys.executable} -m snapbuild.trial.snapctl "$@"\n')
    snapctl.chmod(0o755)
    staged = tmp_path / "staged" / "weights"
    staged.mkdir(parents=True)
    (staged / "model.gguf").write_text("w")
    data = tmp_path / "data"
    data.mkdir()
    for key, value in {
        "SNAP": str(prime),
        "SNAP_NAME": "demo",
        "SNAP_DATA": str(data),
        "SNAP_COMPONENTS": str(tmp_path / "components"),
        "SNAPCTL_STANDIN_STATE": str(tmp_path / "state"),
        "SNAPCTL_STANDIN_COMPONENTS": str(tmp_path / "staged"),
        "PATH": f"{bindir}:{os.environ['PATH']}",
    }.items():
        monkeypatch.setenv(key, value)
    return tmp_path


def _written(path: Path, timeout: float = 60) -> str:
    """The line a service script writes (``echo ... > path`` truncates first: wait for it whole)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and (text := path.read_text()).endswith("\n"):
            return text
        time.sleep(0.05)
    raise AssertionError(f"{path} was not written within {timeout} s")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in {"Z", "X"}


def test_config_round_trip_keeps_json_types(snap_env: Path) -> None:
    ctl = Snapctl()
    ctl.set({"port": 8081, "host": "127.0.0.1", "env.omp-num-threads": "4", "flag": True})
    assert ctl.get("port", "host", "env", "flag", "missing") == {
        "port": 8081,
        "host": "127.0.0.1",
        "env": {"omp-num-threads": "4"},
        "flag": True,
    }
    ctl.unset("env.omp-num-threads", "flag")
    assert ctl.get("port", "env", "flag") == {"port": 8081, "env": {}}
    raw = subprocess.run(["snapctl", "get", "host"], capture_output=True, text=True, check=True)
    assert raw.stdout == "127.0.0.1\n"  # a lone string prints bare, as snapctl does


def test_invalid_option_name_is_refused(snap_env: Path) -> None:
    with pytest.raises(SnapctlError) as err:
        Snapctl().set({"env.OMP_NUM_THREADS": "4"})
    assert err.value.details == "error: invalid option name: 'env.OMP_NUM_THREADS'"
    assert not (snap_env / "state" / "config.json").exists()


def test_service_lifecycle_runs_the_apps_command_and_kills_its_group(snap_env: Path) -> None:
    ctl = Snapctl()
    assert ctl.services() == [ServiceState("demo.server", enabled=False, active=False)]
    ctl.start("demo.server", enable=True)
    data = snap_env / "data"
    child = int(_written(data / "child"))
    assert (data / "started").read_text() == "args=--flag greeting=hi-demo\n"
    assert ctl.service("demo.server") == ServiceState("demo.server", enabled=True, active=True)
    table = subprocess.run(["snapctl", "services"], capture_output=True, text=True, check=True)
    assert table.stdout.splitlines() == [
        "Service      Startup  Current  Notes",
        "demo.server  enabled  active   -",
    ]
    ctl.restart("demo.server")
    assert ctl.service("demo.server").active
    assert not _alive(child)  # restart stopped the old group, child included
    ctl.stop("demo.server", disable=True)
    assert ctl.service("demo.server") == ServiceState("demo.server", enabled=False, active=False)
    record = json.loads((snap_env / "state" / "services.json").read_text())
    assert record == {"server": {"enabled": False}}


def test_unknown_service_is_refused(snap_env: Path) -> None:
    with pytest.raises(SnapctlError) as err:
        Snapctl().start("demo.nope")
    assert err.value.details == "error: unknown service: 'demo.nope'"


def test_install_links_staged_component_where_snapd_mounts_it(snap_env: Path) -> None:
    ctl = Snapctl()
    ctl.install("weights")
    installed = snap_env / "components" / "weights"
    assert (installed / "model.gguf").read_text() == "w"
    ctl.install("weights")  # installing again is a no-op, as with snapd
    with pytest.raises(SnapctlError) as err:
        ctl.install("runtime")
    assert err.value.details == (
        "error: cannot install component 'runtime': not available "
        f"(looked in {snap_env / 'staged' / 'runtime'})"
    )


def test_is_connected_reads_connections(snap_env: Path) -> None:
    ctl = Snapctl()
    assert ctl.is_connected("hardware-observe")
    (snap_env / "state" / "connections.json").write_text('{"hardware-observe": false}')
    assert not ctl.is_connected("hardware-observe")


def test_expand_follows_shell_rules() -> None:
    from snapbuild.trial.snapctl.services import expand

    env = {"SNAP": "/s", "LD_LIBRARY_PATH": "/x"}
    assert expand("${SNAP_LIBRARY_PATH}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}", env) == ":/x"
    assert expand("$SNAP/bin:${NOPE:-/usr/bin}", env) == "/s/bin:/usr/bin"


def _in_hook(monkeypatch: pytest.MonkeyPatch, hook: str = "install") -> None:
    monkeypatch.setenv("SNAPCTL_STANDIN_HOOK", hook)


def _after_hook(monkeypatch: pytest.MonkeyPatch, command: str) -> subprocess.CompletedProcess[str]:
    """What the hook runner does when the hook has exited: flush (0) or discard (non-zero)."""
    monkeypatch.delenv("SNAPCTL_STANDIN_HOOK")
    return subprocess.run(["snapctl", command], capture_output=True, text=True, check=False)


def test_inside_a_hook_components_and_services_wait_for_the_flush(
    snap_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctl = Snapctl()
    _in_hook(monkeypatch)
    ctl.start("demo.server", enable=True)
    ctl.install("weights")
    # nothing happened yet: snapd acts after the hook, not during it
    assert not (snap_env / "components" / "weights").exists()
    assert ctl.service("demo.server") == ServiceState("demo.server", enabled=False, active=False)
    queue = json.loads((snap_env / "state" / "queue.json").read_text())
    assert queue == [
        {"hook": "install", "command": "start", "args": ["--enable", "demo.server"]},
        {"hook": "install", "command": "install", "args": ["+weights"]},
    ]
    flushed = _after_hook(monkeypatch, "flush")
    assert (flushed.returncode, flushed.stderr) == (0, "")
    assert (snap_env / "components" / "weights" / "model.gguf").read_text() == "w"
    assert ctl.service("demo.server") == ServiceState("demo.server", enabled=True, active=True)
    # components first, then services (though the start was asked first): the server found
    # its component when it started
    _written(snap_env / "data" / "started")
    assert (snap_env / "data" / "saw-weights").read_text() == "yes\n"
    assert json.loads((snap_env / "state" / "queue.json").read_text()) == []
    ctl.stop("demo.server")


def test_a_failed_hook_discards_what_it_queued(
    snap_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctl = Snapctl()
    _in_hook(monkeypatch, "configure")
    ctl.install("weights")
    ctl.start("demo.server", enable=True)
    assert _after_hook(monkeypatch, "discard").returncode == 0
    later = subprocess.run(["snapctl", "flush"], capture_output=True, text=True, check=False)
    assert later.returncode == 0  # a later flush finds nothing to do
    assert not (snap_env / "components" / "weights").exists()
    assert ctl.service("demo.server") == ServiceState("demo.server", enabled=False, active=False)


def test_outside_a_hook_install_and_remove_happen_at_once(snap_env: Path) -> None:
    ctl = Snapctl()
    ctl.install("weights")
    assert (snap_env / "components" / "weights" / "model.gguf").read_text() == "w"
    ctl.remove("weights")
    assert not (snap_env / "components" / "weights").exists()
    assert (snap_env / "staged" / "weights" / "model.gguf").exists()  # only the mount went
    with pytest.raises(SnapctlError) as err:
        ctl.remove("weights")
    assert err.value.details == "error: cannot remove component 'weights': it is not installed"


def test_a_queued_install_that_fails_stops_the_flush_and_names_the_hook(
    snap_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctl = Snapctl()
    _in_hook(monkeypatch)
    ctl.install("runtime")  # not staged: accepted in the hook, fails when snapd gets to it
    ctl.start("demo.server", enable=True)
    flushed = _after_hook(monkeypatch, "flush")
    assert (flushed.returncode, flushed.stderr) == (
        1,
        "error: after the install hook, `install +runtime` failed: cannot install component "
        f"'runtime': not available (looked in {snap_env / 'staged' / 'runtime'})\n",
    )
    # the start queued after it did not happen, as snapd's change stops at a failed task
    assert ctl.service("demo.server") == ServiceState("demo.server", enabled=False, active=False)


def test_a_hook_cannot_flush_its_own_queue(snap_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _in_hook(monkeypatch)
    proc = subprocess.run(["snapctl", "flush"], capture_output=True, text=True, check=False)
    assert (proc.returncode, proc.stderr) == (
        1,
        "error: flush runs after the hook, not inside it\n",
    )
