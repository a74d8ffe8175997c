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
        '#!/bin/sh\necho "args=$* greeting=$GREETING" > "$SNAP_DATA/started"\n'
        'sleep 300 &\necho $! > "$SNAP_DATA/child"\nwait\n'
    )
    serve.chmod(0o755)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    snapctl = bindir / "snapctl"
    snapctl.write_text(f'#!/bin/sh\nexec {sys.executable} -m snaps.snapctl_standin "$@"\n')
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
    for _ in range(100):
        if (data / "child").exists():
            break
        time.sleep(0.05)
    assert (data / "started").read_text() == "args=--flag greeting=hi-demo\n"
    child = int((data / "child").read_text())
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
    from snaps.snapctl_standin import expand

    env = {"SNAP": "/s", "LD_LIBRARY_PATH": "/x"}
    assert expand("${SNAP_LIBRARY_PATH}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}", env) == ":/x"
    assert expand("$SNAP/bin:${NOPE:-/usr/bin}", env) == "/s/bin:/usr/bin"
