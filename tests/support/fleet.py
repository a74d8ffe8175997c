"""Helpers for the fleet tests: run ``snapbuild fleet`` in-process and compare with golden files.

Golden files live in tests/data/fleet/expected/. After an intended change (a new selector rule,
a new summary field), regenerate them with ``SNAPBUILD_UPDATE_GOLDEN=1 pytest tests/test_fleet*``
and review the diff: they are the full, ordered outputs the tests assert.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from snapbuild.cli import cli, run_cli

FLEET_DATA = Path(__file__).resolve().parent.parent / "data" / "fleet"
EXPECTED = FLEET_DATA / "expected"


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_fleet(capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    """``snapbuild fleet ARGS`` through the one error handler, capturing both streams."""
    capsys.readouterr()
    code = run_cli(cli, ["fleet", *args], prog_name="snapbuild")
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def assert_golden(name: str, text: str) -> None:
    """``text`` equals tests/data/fleet/expected/NAME (rewritten when SNAPBUILD_UPDATE_GOLDEN=1)."""
    path = EXPECTED / name
    if os.environ.get("SNAPBUILD_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing: run with SNAPBUILD_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(encoding="utf-8")
