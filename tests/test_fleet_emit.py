"""Rollout files: the Ansible playbook passes ansible-playbook --syntax-check, the cloud-init
user-data passes cloud-init's schema check, and odd hostnames never become YAML syntax."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.fleet import FLEET_DATA, assert_golden, run_fleet
from support.manifests import GEMMA3_4B

from hwprobe.profile import HostProfile
from snapbuild.fleet.emit import emit_ansible, emit_cloud_init, planned_inventory
from snapbuild.fleet.inventory import Inventory
from snapbuild.fleet.planner import plan_fleet
from snapbuild.manifest.loader import load_manifest

ANSIBLE_PLAYBOOK = shutil.which("ansible-playbook") or str(
    Path(sys.executable).parent / "ansible-playbook"
)
CLOUD_INIT = shutil.which("cloud-init")


@pytest.fixture(autouse=True)
def in_fleet_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FLEET_DATA)


def has_community_general() -> bool:
    try:
        import ansible_collections.community.general  # noqa: F401
    except ImportError:
        return False
    return True


def syntax_check(folder: Path) -> subprocess.CompletedProcess[str]:
    if not Path(ANSIBLE_PLAYBOOK).exists():
        pytest.skip("ansible-playbook is not installed (pip install ansible-core)")
    return subprocess.run(
        [ANSIBLE_PLAYBOOK, "--syntax-check", "-i", "inventory.yml", "site.yml"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )


def emit(capsys: pytest.CaptureFixture[str], kind: str, folder: Path, *extra: str) -> None:
    result = run_fleet(
        capsys, "plan", GEMMA3_4B, "fleet.jsonl", "--json", "--emit", kind, str(folder), *extra
    )
    assert result.code == 3  # riscv-01 and tiny-01/02 get no engine; the files are written anyway
    assert json.loads(result.out)["model"] == "gemma3"


def test_ansible_playbook_community_module(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    emit(capsys, "ansible", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "inventory.yml",
        "requirements.yml",
        "site.yml",
    ]
    assert_golden("ansible/site.yml", (tmp_path / "site.yml").read_text())
    assert_golden("ansible/inventory.yml", (tmp_path / "inventory.yml").read_text())
    assert_golden("ansible/requirements.yml", (tmp_path / "requirements.yml").read_text())
    if not has_community_general():
        pytest.skip(
            "community.general is not installed: `ansible-galaxy collection install "
            "community.general` (or pip install ansible) to syntax-check this variant"
        )
    checked = syntax_check(tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip() == "playbook: site.yml"


def test_ansible_playbook_builtin_module(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The variant for controllers without community.general checks with ansible-core alone."""
    emit(capsys, "ansible", tmp_path, "--snap-module", "builtin", "--channel", "latest/edge")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inventory.yml", "site.yml"]
    assert_golden("ansible/site-builtin.yml", (tmp_path / "site.yml").read_text())
    checked = syntax_check(tmp_path)
    assert checked.returncode == 0, checked.stderr
    play = yaml.safe_load((tmp_path / "site.yml").read_text())
    install = play[1]["tasks"][0]["ansible.builtin.command"]
    assert install["argv"] == ["snap", "install", "gemma3", "--channel=latest/edge"]


def test_planned_inventory_groups(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    emit(capsys, "ansible", tmp_path)
    inventory = yaml.safe_load((tmp_path / "inventory.yml").read_text())
    planned = inventory["all"]["children"]["snapbuild_planned"]["children"]
    engines = {g: (sorted(v["hosts"]), v["vars"]["snapbuild_engine"]) for g, v in planned.items()}
    plan = json.loads(run_fleet(capsys, "plan", GEMMA3_4B, "fleet.jsonl", "--json").out)
    expected: dict[str, list[str]] = {}
    for host in plan["hosts"]:
        if host["selected"]:
            expected.setdefault(host["selected"]["engine"], []).append(host["hostname"])
    assert {e: hosts for hosts, e in engines.values()} == {
        e: sorted(h) for e, h in expected.items()
    }
    assert sorted(inventory["all"]["children"]["snapbuild_no_engine"]["hosts"]) == [
        "riscv-01",
        "tiny-01",
        "tiny-02",
    ]


def test_cloud_init_user_data(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    emit(capsys, "cloud-init", tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names[0] == "groups.yaml"
    assert all(n.startswith("user-data-") for n in names[1:])
    for name in names:
        assert_golden(f"cloud-init/{name}", (tmp_path / name).read_text())
    groups = yaml.safe_load((tmp_path / "groups.yaml").read_text())
    assert groups["no-engine"] == ["riscv-01", "tiny-01", "tiny-02"]
    for engine, entry in groups["engines"].items():
        data = yaml.safe_load((tmp_path / entry["user-data"]).read_text())
        assert data == {
            "snap": {
                "commands": [
                    ["snap", "install", "gemma3", "--channel=stable"],
                    ["snap", "set", "gemma3", f"engine={engine}"],
                ]
            }
        }
    if CLOUD_INIT is None:
        pytest.skip("cloud-init is not installed (apt-get install cloud-init) for its schema check")
    for name in names[1:]:
        checked = subprocess.run(
            [CLOUD_INIT, "schema", "--config-file", str(tmp_path / name)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert checked.stdout.strip() == f"Valid cloud-config: {tmp_path / name}"


def test_odd_hostnames_stay_data(tmp_path: Path) -> None:
    """A hostname full of YAML and Jinja syntax comes back from every emitted file unchanged."""
    odd = 'evil: {{ lookup("pipe", "id") }}\n- [x] # "quoted"'
    profile = HostProfile.from_data(
        json.loads(Path("ansible/profiles/raspberry-pi-5.json").read_text())
    )
    inventory = Inventory()
    inventory.add_host(odd, "test", None, inventory.add_profile(profile))
    plan = plan_fleet(load_manifest(GEMMA3_4B), inventory)
    emit_ansible(plan, tmp_path / "a")
    emit_cloud_init(plan, tmp_path / "c")
    loaded = yaml.safe_load((tmp_path / "a" / "inventory.yml").read_text())
    assert loaded == planned_inventory(plan, "stable")
    group = loaded["all"]["children"]["snapbuild_planned"]["children"]["snapbuild_gemma3_cpu_arm64"]
    assert list(group["hosts"]) == [odd]
    groups = yaml.safe_load((tmp_path / "c" / "groups.yaml").read_text())
    assert groups["engines"]["cpu-arm64"]["hosts"] == [odd]
    assert odd not in (tmp_path / "c" / "user-data-cpu-arm64.yaml").read_text()
