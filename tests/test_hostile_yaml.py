"""Hostile YAML: alias bombs, deep nesting and oversized manifests, in manifests (``validate``,
``make``) and fleet inventories, each run bounded in memory and time. The limits
(:data:`snapbuild.manifest.yaml_rt.LIMITS`) refuse them while composing, before any consumer walks
the tree, with a message naming the file, the line and the limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import hostile
from support.bounded import MIB, Bounded, snapbuild

from snapbuild.manifest import yaml_rt

PEAK = 300 * MIB
SECONDS = 30.0

CASES = {
    "billion-laughs": (hostile.billion_laughs(9), "aliases may repeat at most 10000 nodes"),
    "deep-flow": (hostile.deep_flow(50_000), "nested deeper than 64 levels"),
    "deep-block": (hostile.deep_block(300), "nested deeper than 64 levels"),
}


def _bounded(result: Bounded, what: str) -> None:
    print(f"{what}: {result.describe()}")
    assert not result.timed_out and result.peak_rss < PEAK and result.seconds < SECONDS, what
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_manifests_are_refused_by_validate_and_make(tmp_path: Path, case: str) -> None:
    text, reason = CASES[case]
    manifest = tmp_path / "bomb.yaml"
    manifest.write_text(text)
    for command in (
        ("validate", str(manifest)),
        ("make", str(manifest), "-o", str(tmp_path / "o")),
    ):
        result = snapbuild(*command)
        _bounded(result, f"{command[0]} {case}")
        assert result.returncode == 2, result.stderr
        assert f"{manifest} is refused: " in result.stderr and reason in result.stderr
    assert not (tmp_path / "o").exists()


def test_inventories_are_reported_and_planning_stops_cleanly(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(hostile.billion_laughs(9))
    result = snapbuild("fleet", "plan", "smollm2", str(inventory))
    _bounded(result, "fleet plan billion-laughs")
    assert result.returncode == 2
    assert f"{inventory}:1: invalid YAML: its aliases expand" in result.stderr


def test_a_manifest_larger_than_a_mebibyte_is_refused_unread(tmp_path: Path) -> None:
    manifest = tmp_path / "huge.yaml"
    manifest.write_text("name: x\n" + "# padding\n" * 200_000)
    result = snapbuild("validate", str(manifest))
    _bounded(result, "validate 2 MB manifest")
    assert result.returncode == 2 and "a manifest may be at most 1048576 bytes" in result.stderr


def test_shared_values_within_the_limit_still_load() -> None:
    """Aliases that repeat a little (Ansible's ``<<: *vars``) are read as before; a document
    at the depth limit loads, one level more does not."""
    doc = yaml_rt.load("base: &b {x: 1, y: [1, 2]}\nh1: {<<: *b}\nh2: *b\n")
    assert yaml_rt.plain(doc.tree)["h2"] == {"x": 1, "y": [1, 2]}
    yaml_rt.load(hostile.deep_flow(yaml_rt.LIMITS.depth - 1))
    with pytest.raises(yaml_rt.YamlLimitError, match="deeper than 64"):
        yaml_rt.load(hostile.deep_flow(yaml_rt.LIMITS.depth))


def test_a_list_or_mapping_as_a_key_is_a_yaml_error(tmp_path: Path) -> None:
    """Found by the fuzz run (tests/test_fuzz.py): ``? artifacts:`` makes a mapping a key, which
    the round-trip loader could not hash (a TypeError, exit 70)."""
    manifest = tmp_path / "m.yaml"
    manifest.write_text("name: x\n? [a, b]\n: c\n? artifacts:\n  - 1\n")
    result = snapbuild("validate", str(manifest))
    _bounded(result, "validate complex keys")
    assert result.returncode == 2
    assert "a key must be plain text or a number, not a list or a mapping" in result.stderr
