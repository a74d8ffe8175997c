"""``snapbuild fleet plan`` of a model ladder (the shipped gemma3, 270M to 27B): the option each
host gets, hosts per option, and the what-if that names the larger size a change would bring
("with 8 GiB more RAM these 40 hosts would run 12b")."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
from support.fleet import FLEET_DATA, assert_golden, run_fleet

import hwprobe
from hwprobe.profile import MemoryFacts

MACHINES = FLEET_DATA.parent / "machines"
GIB = 1 << 30


@pytest.fixture(autouse=True)
def in_fleet_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FLEET_DATA)


def test_every_recorded_machine_gets_an_option(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_fleet(capsys, "plan", "gemma3", "../machines", "--json")
    assert result.code == 3  # the riscv64 board runs no size
    data = json.loads(result.out)
    picks = {
        h["hostname"]: (h["selected"]["option"], h["selected"]["engine"])
        for h in data["hosts"]
        if h["selected"]
    }
    assert picks["raspberry-pi-5"] == ("1b", "cpu-arm64")
    assert picks["xps13-7390"] == ("4b", "cpu-avx2")
    assert picks["hp-proliant-rl300-gen11-altra"] == ("27b", "cpu-arm64")
    assert data["summary"]["options"] == [
        {"option": "4b", "hosts": 11},
        {"option": "27b", "hosts": 3},
        {"option": "1b", "hosts": 1},
    ]
    assert_golden("machines-gemma3-ladder.json", result.out)


def _small_altras(path: Path, hosts: int) -> Path:
    """``hosts`` Ampere Altra servers with 8 GiB of RAM: enough for 4b, not for 12b."""
    altra = hwprobe.probe(str(MACHINES / "hp-proliant-rl300-gen11-altra" / "machine-root"))
    small = replace(altra, memory=MemoryFacts(total=8 * GIB, available=7 * GIB))
    line = json.loads(small.to_json())
    path.write_text(
        "".join(json.dumps({**line, "hostname": f"altra-{i:02d}"}) + "\n" for i in range(hosts))
    )
    return path


def test_the_what_if_names_the_larger_size_more_ram_brings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fleet = _small_altras(tmp_path / "altras.jsonl", 40)
    data = json.loads(run_fleet(capsys, "plan", "gemma3", str(fleet), "--json").out)
    assert {h["selected"]["option"] for h in data["hosts"]} == {"4b"}
    assert data["summary"]["advice"] == [
        {
            "change": "ram-8g",
            "hosts": 40,
            "from": "cpu-arm64",
            "to": "cpu-arm64",
            "from-option": "4b",
            "to-option": "12b",
            "message": "40 hosts have too little RAM: 8 GiB more moves them from model 4b "
            "(engine cpu-arm64) to model 12b (engine cpu-arm64)",
        }
    ]
    text = run_fleet(capsys, "plan", "gemma3", str(fleet)).out.splitlines()
    assert text[1].startswith("  altra-00  model 4b, cpu-arm64 on cpu, context 8192, margin ")
    assert "  model 4b: 40" in text


def test_the_csv_has_an_option_column(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fleet = _small_altras(tmp_path / "altras.jsonl", 2)
    rows = list(
        csv.reader(io.StringIO(run_fleet(capsys, "plan", "gemma3", str(fleet), "--csv").out))
    )
    assert rows[0][:5] == ["hostname", "source", "option", "engine", "runtime"]
    assert [r[:4] for r in rows[1:]] == [
        ["altra-00", f"{fleet}:1", "4b", "cpu-arm64"],
        ["altra-01", f"{fleet}:2", "4b", "cpu-arm64"],
    ]
