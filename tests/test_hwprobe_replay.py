"""hwprobe.replay: the one rule by which the snap's hooks and `snapbuild try` pick the machine."""

from __future__ import annotations

from pathlib import Path

from hwprobe import probe
from hwprobe.replay import HOST_PROFILE_VAR, HOST_ROOT_VAR, probe_from_environ


def test_a_recorded_root_is_probed(machines_dir: Path) -> None:
    root = str(machines_dir / "raspberry-pi-5" / "machine-root")
    got = probe_from_environ({HOST_ROOT_VAR: root})
    assert [c.model_name for c in got.cpus] == ["Cortex-A76"]
    assert (got.cpus, got.memory.total) == (probe(root).cpus, probe(root).memory.total)


def test_a_profile_file_wins_over_a_root(machines_dir: Path, tmp_path: Path) -> None:
    recorded = probe(str(machines_dir / "asus-ux301l" / "machine-root"))
    profile = tmp_path / "host.json"
    profile.write_text(recorded.to_json(), encoding="utf-8")
    pi = str(machines_dir / "raspberry-pi-5" / "machine-root")
    got = probe_from_environ({HOST_PROFILE_VAR: str(profile), HOST_ROOT_VAR: pi})
    assert got == recorded


def test_without_either_this_machine_is_probed() -> None:
    assert probe_from_environ({}).cpus == probe("/").cpus
