"""`snapbuild discover`: the discovery documents of every inference snap on a machine.

Documents laid out as snapd keeps them (``<root>/<snap>/common/discovery/api.json``), one not a
document, one $SNAP_COMMON given directly; ``--check`` against a port nobody answers on.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from snapbuild.cli import cli, run_cli
from snapbuild.serving.discovery import document_path, find


def _doc(snap: str, port: int, **extra: object) -> dict[str, object]:
    base = f"http://127.0.0.1:{port}"
    return {
        "schema-version": 1,
        "snap": snap,
        "model": snap,
        "base-url": f"{base}/v1",
        "health-url": f"{base}/health",
        "engine": {"name": "cpu"},
        "capabilities": {"text": {"passed": True, "detail": None, "seconds": 0.1}},
        "outage": None,
        **extra,
    }


def _write(common: Path, data: object) -> Path:
    path = document_path(common)
    path.parent.mkdir(parents=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again: nothing listens there


def test_every_snap_under_a_root_is_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snaps = tmp_path / "var-snap"
    port = _dead_port()
    _write(snaps / "alpha" / "common", _doc("alpha", port))
    outage = {"reason": "no-fit", "detail": "...", "resolution": "..."}
    _write(snaps / "beta" / "common", _doc("beta", port + 1, outage=outage))
    _write(snaps / "junk" / "common", "not json")
    (snaps / "other" / "common").mkdir(parents=True)  # a snap that publishes nothing
    elsewhere = _write(tmp_path / "gamma-common", {"schema-version": 2})
    assert run_cli(cli, ["discover", str(snaps), str(elsewhere.parent.parent)]) == 0
    lines = capsys.readouterr().out.splitlines()  # sorted by path
    assert lines[0] == f"{elsewhere}: not a discovery document of schema 1"
    assert lines[1] == f"alpha: http://127.0.0.1:{port}/v1 (model alpha, cpu; text proven)"
    assert lines[2] == (
        f"beta: http://127.0.0.1:{port + 1}/v1 (model beta, cpu; text proven) unavailable: no-fit"
    )
    assert lines[3].startswith(f"{snaps}/junk/common/discovery/api.json: cannot read it: ")
    assert len(lines) == 4


def test_check_asks_each_health_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "common", _doc("alpha", _dead_port()))
    assert run_cli(cli, ["discover", str(path), "--check", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["path"], row["snap"]) == (str(path), "alpha")
    assert (row["live"]["http"], row["live"]["status"]) == (None, "not answering")


def test_nothing_published(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert find([tmp_path]) == []
    assert run_cli(cli, ["discover", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"no inference snap publishes an API under {tmp_path}\n"
