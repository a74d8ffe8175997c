"""Default ports are distinct and stable per snap name, so inference snaps share a machine."""

from __future__ import annotations

from pathlib import Path

import yaml

from snapbuild.manifest.loader import load_manifest
from snapbuild.manifest.ports import BASE, SPAN, derived_port

MANIFESTS = Path(__file__).resolve().parent.parent / "manifests"


def test_the_derived_port_is_a_pure_function_of_the_name() -> None:
    assert derived_port("smollm2") == 8441  # 8300 + crc32("smollm2") % 600, on every machine
    assert derived_port("gemma3") == 8669
    ports = {derived_port(f"model-{i}") for i in range(40)}
    assert all(BASE <= p < BASE + SPAN for p in ports)
    assert len(ports) >= 38  # spread: a few birthday collisions among 40 names at most


def test_a_manifest_without_a_port_gets_the_derived_one(tmp_path: Path) -> None:
    data = yaml.safe_load((MANIFESTS / "smollm2.yaml").read_text())
    data["name"] = "my-model"
    del data["default-port"]
    path = tmp_path / "my-model.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_manifest(str(path)).default_port == derived_port("my-model")
    data["default-port"] = 9123  # a manifest that names its port keeps it
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_manifest(str(path)).default_port == 9123


def test_shipped_manifests_do_not_collide() -> None:
    ports = {p.stem: load_manifest(str(p)).default_port for p in sorted(MANIFESTS.glob("*.yaml"))}
    assert len(ports) >= 3
    assert len(set(ports.values())) == len(ports), f"two shipped snaps share a port: {ports}"
