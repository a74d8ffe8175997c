"""``snapbuild fleet plan``: full outputs over real recorded machines and broken inventories,
with the real selector and the shipped manifests (plus tests/data/fleet/manifests/edge-npu.yaml,
whose NPU engine beats its CPU engines, so the NPU-driver advice shows)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import get_args

import pytest
from pydantic import ValidationError
from support.fleet import FLEET_DATA, assert_golden, run_fleet
from support.manifests import GEMMA3_4B

from hwprobe.profile import HostProfile
from snapbuild.fleet.advice import (
    CHANGES,
    DETAILS,
    NEEDS,
    ChangeName,
    CounterfactualTable,
    advise,
    counterfactuals,
    read_table,
)
from snapbuild.fleet.planner import FleetPlan, default_selector, plan_fleet
from snapbuild.fleet.readers import read_inventories
from snapbuild.manifest.loader import load_manifest
from snapbuild.manifest.model import Manifest
from snapbuild.selection.decision import Decision
from snapbuild.selection.tables import packaged_tables

SKIPPED_JSONL = [
    "skipped fleet.jsonl:8: invalid JSON: Expecting value (column 36); write one complete JSON "
    "object",
    'skipped fleet.jsonl:10: the profile has no "hostname"; add "hostname": "<name>" to each '
    "line of a JSON Lines file",
    "skipped fleet.jsonl:12: host 'bad-memory-01': invalid hwprobe profile: memory.total: Input "
    "should be a valid integer, unable to parse string as an integer",
    "skipped fleet.jsonl:13: expected a JSON object, got an array",
    "skipped fleet.jsonl:14: host 'pi-01' is already planned from fleet.jsonl:7; hostnames must "
    "be unique across inventories (this entry is skipped)",
    "skipped fleet.jsonl:17: host 'bad-memory-02': invalid hwprobe profile: memory.total: Input "
    "should be a valid integer, unable to parse string as an integer",
]


@pytest.fixture(autouse=True)
def in_fleet_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FLEET_DATA)


def test_machines_gemma3_json(capsys: pytest.CaptureFixture[str]) -> None:
    """Every shared machine: the sifive board (riscv64) gets no engine, so exit 3."""
    result = run_fleet(capsys, "plan", GEMMA3_4B, "../machines", "--json")
    assert result.code == 3
    assert result.err == (
        "Error: 1 of 16 hosts get no engine (the plan above covers every host)\n"
        "Fix: see each host's reasons and the summary's advice on what would change it\n"
    )
    data = json.loads(result.out)
    assert list(data) == ["model", "hosts", "summary", "errors"]
    assert [h["hostname"] for h in data["hosts"]][:3] == [
        "ampere-one-siryn",
        "ampere-one-x-banshee-8",
        "asus-ux301l",
    ]
    assert_golden("machines-gemma3.json", result.out)


def test_broken_inventories_edge_npu_json(capsys: pytest.CaptureFixture[str]) -> None:
    """JSON Lines + INI + YAML, bad entries among them: skipped, reported, the rest planned."""
    result = run_fleet(
        capsys,
        "plan",
        "manifests/edge-npu.yaml",
        "fleet.jsonl",
        "ansible/hosts.ini",
        "ansible/inventory.yml",
        "--json",
    )
    assert result.code == 3
    assert result.err.splitlines() == [
        *SKIPPED_JSONL,
        "skipped ansible/hosts.ini:12: host 'missing-01': hwprobe_profile_file "
        "(ansible/hosts.ini:12): profiles/missing.json does not exist (paths are relative to the "
        "inventory file)",
        "skipped ansible/hosts.ini:13: host 'broken-01': hwprobe_profile_file "
        "(ansible/hosts.ini:13): profiles/broken.json is not valid JSON: Expecting value (line 1)",
        "skipped ansible/hosts.ini:14: host 'nofacts-01' carries no hwprobe facts: set one of "
        "hwprobe, hwprobe_profile_file or hwprobe_machine_root (see docs/fleet.md)",
        "skipped ansible/hosts.ini:15: cannot split the host line: No closing quotation (check "
        "the quotes)",
        "skipped ansible/hosts.ini:16: host 'notroot-01': hwprobe_machine_root "
        "(ansible/hosts.ini:16): profiles is not a recorded machine (it has no machine-root/, "
        "proc/ or sys/)",
        "skipped ansible/hosts.ini:17: bad section header '[servers:oops]' (its entries are "
        "skipped): use [group], [group:vars] or [group:children]",
        "skipped ansible/inventory.yml:16: host 'pi-b': hwprobe (ansible/inventory.yml:17): "
        "invalid hwprobe profile: cpus: Input should be a valid tuple",
        "skipped ansible/inventory.yml:19: host 'pi-c' sets both hwprobe_machine_root "
        "(ansible/inventory.yml:21), hwprobe_profile_file (ansible/inventory.yml:20): keep one",
        "skipped ansible/inventory.yml:26: host 'nofacts-02' carries no hwprobe facts: set one "
        "of hwprobe, hwprobe_profile_file or hwprobe_machine_root (see docs/fleet.md)",
        "skipped ansible/inventory.yml:27: group 'machines': unknown key 'colour' (use hosts, "
        "children or vars)",
        "Error: 1 of 21 hosts get no engine (the plan above covers every host)",
        "Fix: see each host's reasons and the summary's advice on what would change it",
    ]
    data = json.loads(result.out)
    assert len(data["errors"]) == 16
    assert data["errors"][0] == {
        "file": "fleet.jsonl",
        "line": 8,
        "message": "invalid JSON: Expecting value (column 36); write one complete JSON object",
    }
    by_host = {h["hostname"]: h for h in data["hosts"]}
    assert by_host["kiosk-npu-01"]["selected"]["engine"] == "intel-npu"
    assert by_host["kiosk-01"]["selected"]["engine"] == "cpu-avx2"
    assert by_host["riscv-01"]["selected"] is None
    assert data["summary"]["advice"][0] == {
        "change": "npu-driver",
        "hosts": 8,
        "from": "cpu-avx2",
        "to": "intel-npu",
        "message": "8 hosts have an Intel NPU but no NPU driver: installing it moves them from "
        "engine cpu-avx2 to engine intel-npu",
    }
    assert_golden("broken-edge-npu.json", result.out)


def test_text_output_smollm2(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_fleet(capsys, "plan", "smollm2", "fleet.jsonl")
    assert result.code == 3
    assert result.err.splitlines()[:-2] == SKIPPED_JSONL
    assert_golden("fleet-smollm2.txt", result.out)


def test_csv_output(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_fleet(capsys, "plan", GEMMA3_4B, "fleet.jsonl", "ansible/inventory.yml", "--csv")
    assert result.code == 3
    rows = list(csv.reader(io.StringIO(result.out)))
    assert rows[0][:3] == ["hostname", "source", "engine"]
    assert len(rows) == 1 + 10 + 5
    assert_golden("fleet-gemma3.csv", result.out)


def test_all_planned_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_fleet(capsys, "plan", GEMMA3_4B, "ansible/profiles/raspberry-pi-5.json", "--json")
    assert result.code == 0
    assert result.err == ""
    data = json.loads(result.out)
    assert data["summary"]["engines"] == [{"engine": "cpu-arm64", "hosts": 1}]
    assert data["hosts"][0]["hostname"] == "raspberry-pi-5"


def test_each_distinct_profile_is_decided_once(tmp_path: Path) -> None:
    """300 hosts over three kinds of hardware: three selector calls, same answers as one by one."""
    source = [json.loads(line) for line in Path("fleet.jsonl").read_text().splitlines()[:7] if line]
    kinds = [source[0], source[3], source[5]]
    lines = [json.dumps({**kinds[i % 3], "hostname": f"h{i:03}"}) for i in range(300)]
    (tmp_path / "big.jsonl").write_text("\n".join(lines) + "\n")
    calls: list[HostProfile] = []
    real = default_selector()

    def counting(manifest: Manifest, host: HostProfile) -> Decision:
        calls.append(host)
        return real(manifest, host)

    manifest = load_manifest(GEMMA3_4B)
    plan = plan_fleet(manifest, read_inventories([tmp_path / "big.jsonl"]), selector=counting)
    assert len(calls) == 3
    for index in (0, 1, 2, 299):
        host = plan.inventory.hosts[index]
        alone = real(manifest, plan.inventory.profiles[host.key])
        assert plan.outcome_of(host.key).decision == alone


def test_near_memory_limit_margin(capsys: pytest.CaptureFixture[str]) -> None:
    """asus-ux301l keeps less than 10% of its memory free on gemma3; a 1% margin clears it."""
    machine = "../machines/asus-ux301l"
    tight = json.loads(run_fleet(capsys, "plan", GEMMA3_4B, machine, "--json").out)
    memory = tight["hosts"][0]["selected"]["memory"]
    assert memory["margin"] == memory["available"] - memory["required"]
    assert memory["margin"] < 0.1 * memory["available"]
    assert memory["near-limit"] is True
    assert tight["summary"]["near-memory-limit"]["hosts"] == 1
    loose = run_fleet(capsys, "plan", GEMMA3_4B, machine, "--json", "--near-margin", "1")
    assert json.loads(loose.out)["summary"]["near-memory-limit"]["hosts"] == 0


def test_more_ram_advice_reports_the_smallest_upgrade(capsys: pytest.CaptureFixture[str]) -> None:
    """tiny-01/02 (2 GiB free) fit gemma3 with 8 GiB more; the 16 GiB change is not repeated."""
    result = run_fleet(capsys, "plan", GEMMA3_4B, "fleet.jsonl", "--json")
    advice = json.loads(result.out)["summary"]["advice"]
    ram = [a for a in advice if a["change"].startswith("ram-")]
    assert [(a["change"], a["hosts"], a["from"]) for a in ram] == [("ram-8g", 2, None)]
    assert ram[0]["message"].startswith("2 hosts have too little RAM: 8 GiB more moves them to ")


def test_bad_usage(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    both = run_fleet(capsys, "plan", GEMMA3_4B, "fleet.jsonl", "--json", "--csv")
    assert (both.code, both.out) == (2, "")
    assert both.err == ("Error: --json and --csv are exclusive\nFix: pick one output format\n")
    nothing = run_fleet(capsys, "plan", GEMMA3_4B, str(tmp_path / "none.jsonl"))
    assert (nothing.code, nothing.out) == (2, "")
    assert nothing.err == (
        f"skipped {tmp_path / 'none.jsonl'}: no such file or folder\n"
        "Error: no host could be read from the inventories\n"
        f"  {tmp_path / 'none.jsonl'}: no such file or folder\n"
        "Fix: fix the entries above; see docs/fleet.md for the inventory formats\n"
    )
    strict = run_fleet(capsys, "plan", "smollm2", "fleet.jsonl", "--json", "--strict")
    assert strict.code == 2
    assert strict.err.splitlines()[-2:] == [
        "Error: 6 inventory entries were skipped (--strict)",
        "Fix: fix the entries reported above, or drop --strict to plan the rest",
    ]
    channel = run_fleet(
        capsys,
        "plan",
        "smollm2",
        "fleet.jsonl",
        "--emit",
        "ansible",
        str(tmp_path),
        "--channel",
        "stable\nx",
    )
    assert channel.code == 2
    assert channel.err.splitlines()[-2:] == [
        "Error: invalid snap channel 'stable\\nx'",
        "Fix: use [track/]risk[/branch] with risk one of stable, candidate, beta, edge",
    ]


def test_counterfactual_data_and_code_agree() -> None:
    """Every change named in data/counterfactuals.yaml exists in code, and none is unused (the
    drivers' vendor names: tests/test_selector_data.py)."""
    named = {cf.change for cf in counterfactuals()}
    assert named == set(CHANGES) == set(get_args(ChangeName)) == set(NEEDS) == set(DETAILS)
    for cf in counterfactuals():
        cf.message.format(hosts="2 hosts", have="have", move="to engine x", vendor="Intel")


@pytest.mark.parametrize(
    ("index", "changes", "message"),
    [
        (0, {"change": "add-gpu"}, "counterfactuals.0.change\n  Input should be 'load-npu"),
        (
            0,
            {"params": {"bytes": 1}},
            "npu-driver: load-npu-driver takes params drivers, got bytes",
        ),
        (2, {"params": {}}, "ram-8g: add-memory takes params bytes, got none"),
        (2, {"message": "{hosts} lack {vendor} RAM"}, "ram-8g: the message uses {vendor}; add-"),
        (1, {"id": "npu-driver"}, "counterfactual ids listed twice: npu-driver"),
    ],
)
def test_a_broken_counterfactual_table_is_rejected(
    index: int, changes: dict[str, object], message: str
) -> None:
    data = read_table()
    assert CounterfactualTable.model_validate(data).counterfactuals == counterfactuals()
    entries = list(data["counterfactuals"])
    entries[index] = {**entries[index], **changes}
    with pytest.raises(ValidationError, match=message):
        CounterfactualTable.model_validate({**data, "counterfactuals": entries})


def test_advice_counts_hosts_not_profiles() -> None:
    manifest = load_manifest(str(FLEET_DATA / "manifests" / "edge-npu.yaml"))
    inventory = read_inventories([Path("fleet.jsonl")])
    selector = default_selector()
    plan = plan_fleet(manifest, inventory, selector=selector)
    advice = advise(plan, selector)
    # kiosk-01..03 share one profile: one selector run, three hosts moved
    assert [(a.change, a.hosts, a.from_engine, a.to_engine) for a in advice] == [
        ("npu-driver", 3, "cpu-avx2", "intel-npu")
    ]


def test_the_fast_json_encoder_writes_exactly_the_plan_data() -> None:
    """``to_json`` hand-assembles 100,000-host documents for speed; ``plan_data`` is what it
    must mean. Over a fleet with skipped entries, advice and hosts without an engine."""
    from snapbuild.fleet.report import plan_data, to_json

    manifest = load_manifest(str(FLEET_DATA / "manifests" / "edge-npu.yaml"))
    inventory = read_inventories([Path("fleet.jsonl")])
    selector = default_selector()
    plan = plan_fleet(manifest, inventory, selector=selector)
    advice = advise(plan, selector)
    expected = plan_data(plan, advice)
    assert expected["hosts"] and expected["errors"] and expected["summary"]
    assert json.loads(to_json(plan, advice)) == json.loads(json.dumps(expected))


def test_a_fleet_is_planned_under_the_tables_its_selector_was_given() -> None:
    """Without llama.cpp's Vulkan build in the catalog, ws-01's AMD GPU (gfx1032, not a ROCm
    target) has no engine left and the workstation moves to its Intel integrated GPU; every other
    host keeps its engine, and the packaged tables still give ws-01 Vulkan."""
    packaged = packaged_tables()
    runtimes = tuple(r for r in packaged.catalog.runtimes if r.id != "llama.cpp-vulkan")
    catalog = packaged.catalog.model_copy(update={"runtimes": runtimes})
    selector = default_selector(tables=packaged.model_copy(update={"catalog": catalog}))
    inventory = read_inventories([Path("fleet.jsonl")])
    manifest = load_manifest(GEMMA3_4B)

    def engines(plan: FleetPlan) -> list[tuple[str, str | None]]:
        return [
            (h.hostname, (plan.outcome_of(h.key).selected or {}).get("engine"))
            for h in inventory.hosts
        ]

    plan = plan_fleet(manifest, inventory, selector=selector)
    packaged_plan = plan_fleet(manifest, inventory, selector=default_selector())
    kiosks = [(name, "openvino-gpu") for name in ("kiosk-01", "kiosk-02", "kiosk-03")]
    rest = [("pi-01", "cpu-arm64"), ("pi-02", "cpu-arm64")]
    rest += [(name, None) for name in ("riscv-01", "tiny-01", "tiny-02")]
    assert engines(plan) == [
        *kiosks,
        ("kiosk-npu-01", "openvino-gpu"),
        ("ws-01", "openvino-gpu"),
        *rest,
    ]
    assert engines(packaged_plan) == [
        *kiosks,
        ("kiosk-npu-01", "openvino-gpu"),
        ("ws-01", "vulkan"),
        *rest,
    ]
    ws = next(h.key for h in inventory.hosts if h.hostname == "ws-01")
    assert plan.outcome_of(ws).reasons == (
        "openvino-gpu runs on the integrated GPU, runner-up cpu-avx2 on the CPU: accelerator "
        "class decides first",
    )
