"""Fleet inventories: every reader, with broken entries reported by file and line and skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.fleet import FLEET_DATA

from snapbuild.fleet.ansible_inventory import expand_host_pattern
from snapbuild.fleet.inventory import Inventory
from snapbuild.fleet.readers import read_inventories


def hosts_of(inventory: Inventory) -> list[tuple[str, str]]:
    return [(h.hostname, h.source) for h in inventory.hosts]


def issues_of(inventory: Inventory) -> list[str]:
    return [issue.format() for issue in inventory.issues]


@pytest.fixture
def in_fleet_data(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from tests/data/fleet so reported paths are short and stable."""
    monkeypatch.chdir(FLEET_DATA)
    return FLEET_DATA


def test_json_lines_with_bad_lines(in_fleet_data: Path) -> None:
    inventory = read_inventories([Path("fleet.jsonl")])
    assert hosts_of(inventory) == [
        ("kiosk-01", "fleet.jsonl:1"),
        ("kiosk-02", "fleet.jsonl:2"),
        ("kiosk-03", "fleet.jsonl:3"),
        ("kiosk-npu-01", "fleet.jsonl:4"),
        ("ws-01", "fleet.jsonl:6"),
        ("pi-01", "fleet.jsonl:7"),
        ("pi-02", "fleet.jsonl:9"),
        ("riscv-01", "fleet.jsonl:11"),
        ("tiny-01", "fleet.jsonl:15"),
        ("tiny-02", "fleet.jsonl:16"),
    ]
    assert issues_of(inventory) == [
        "fleet.jsonl:8: invalid JSON: Expecting value (column 36); write one complete JSON object",
        'fleet.jsonl:10: the profile has no "hostname"; add "hostname": "<name>" to each line of '
        "a JSON Lines file",
        "fleet.jsonl:12: host 'bad-memory-01': invalid hwprobe profile: memory.total: Input "
        "should be a valid integer, unable to parse string as an integer",
        "fleet.jsonl:13: expected a JSON object, got an array",
        "fleet.jsonl:14: host 'pi-01' is already planned from fleet.jsonl:7; hostnames must be "
        "unique across inventories (this entry is skipped)",
        # line 17 repeats line 12's hardware: the remembered verdict, reported for its own line
        "fleet.jsonl:17: host 'bad-memory-02': invalid hwprobe profile: memory.total: Input "
        "should be a valid integer, unable to parse string as an integer",
    ]
    # kiosks 1-3 share hardware, as do pi-01/02 and tiny-01/02: six distinct profiles
    assert len(inventory.profiles) == 6
    assert inventory.hosts[0].key == inventory.hosts[2].key != inventory.hosts[3].key


def test_ansible_ini_inventory(in_fleet_data: Path) -> None:
    inventory = read_inventories([Path("ansible/hosts.ini")])
    assert hosts_of(inventory) == [
        ("kiosk01", "ansible/hosts.ini:3"),
        ("kiosk02", "ansible/hosts.ini:3"),
        ("kiosk03", "ansible/hosts.ini:3"),
        ("kiosk-npu", "ansible/hosts.ini:4"),
        ("altra-01", "ansible/hosts.ini:10"),
        ("pi-ini-01", "ansible/hosts.ini:11"),
    ]
    assert issues_of(inventory) == [
        "ansible/hosts.ini:12: host 'missing-01': hwprobe_profile_file (ansible/hosts.ini:12): "
        "profiles/missing.json does not exist (paths are relative to the inventory file)",
        "ansible/hosts.ini:13: host 'broken-01': hwprobe_profile_file (ansible/hosts.ini:13): "
        "profiles/broken.json is not valid JSON: Expecting value (line 1)",
        "ansible/hosts.ini:14: host 'nofacts-01' carries no hwprobe facts: set one of hwprobe, "
        "hwprobe_profile_file or hwprobe_machine_root (see docs/fleet.md)",
        "ansible/hosts.ini:15: cannot split the host line: No closing quotation (check the quotes)",
        "ansible/hosts.ini:16: host 'notroot-01': hwprobe_machine_root (ansible/hosts.ini:16): "
        "profiles is not a recorded machine (it has no machine-root/, proc/ or sys/)",
        "ansible/hosts.ini:17: bad section header '[servers:oops]' (its entries are skipped): "
        "use [group], [group:vars] or [group:children]",
    ]
    keys = {h.hostname: h.key for h in inventory.hosts}
    # group vars give kiosk01-03 the shared profile; kiosk-npu's own line overrides it
    assert keys["kiosk01"] == keys["kiosk03"] != keys["kiosk-npu"]
    npu = inventory.profiles[keys["kiosk-npu"]].npus[0]
    assert npu.driver_loaded is True


def test_ansible_yaml_inventory(in_fleet_data: Path) -> None:
    inventory = read_inventories([Path("ansible/inventory.yml")])
    assert hosts_of(inventory) == [
        ("edge1", "ansible/inventory.yml:10"),
        ("edge2", "ansible/inventory.yml:10"),
        ("edge-npu", "ansible/inventory.yml:11"),
        ("pi-a", "ansible/inventory.yml:14"),
        ("zbook-01", "ansible/inventory.yml:24"),
    ]
    assert issues_of(inventory) == [
        "ansible/inventory.yml:16: host 'pi-b': hwprobe (ansible/inventory.yml:17): invalid "
        "hwprobe profile: cpus: Input should be a valid tuple",
        "ansible/inventory.yml:19: host 'pi-c' sets both hwprobe_machine_root "
        "(ansible/inventory.yml:21), hwprobe_profile_file (ansible/inventory.yml:20): keep one",
        "ansible/inventory.yml:26: host 'nofacts-02' carries no hwprobe facts: set one of "
        "hwprobe, hwprobe_profile_file or hwprobe_machine_root (see docs/fleet.md)",
        "ansible/inventory.yml:27: group 'machines': unknown key 'colour' (use hosts, children "
        "or vars)",
    ]
    keys = {h.hostname: h.key for h in inventory.hosts}
    # host_vars/edge-npu.yml beats the group's profile file
    assert keys["edge1"] != keys["edge-npu"]
    assert inventory.profiles[keys["edge-npu"]].npus[0].driver_loaded is True


def test_machine_roots_folder(machines_dir: Path) -> None:
    inventory = read_inventories([machines_dir])
    names = sorted(p.name for p in machines_dir.iterdir() if (p / "machine-root").is_dir())
    assert [h.hostname for h in inventory.hosts] == names
    assert [h.source for h in inventory.hosts] == [str(machines_dir / n) for n in names]
    assert inventory.issues == []
    # a machine-root folder itself, and a folder of profiles, read the same hardware
    direct = read_inventories([machines_dir / "raspberry-pi-5" / "machine-root"])
    assert [h.hostname for h in direct.hosts] == ["raspberry-pi-5"]
    assert direct.hosts[0].key == inventory.hosts[names.index("raspberry-pi-5")].key


def test_profile_folder_and_single_files(in_fleet_data: Path) -> None:
    inventory = read_inventories([Path("ansible/profiles")])
    assert hosts_of(inventory) == [
        ("lunar-lake-npu", "ansible/profiles/lunar-lake-npu.json:1"),
        ("lunar-lake", "ansible/profiles/lunar-lake.json:1"),
        ("raspberry-pi-5", "ansible/profiles/raspberry-pi-5.json:1"),
    ]
    assert issues_of(inventory) == [
        "ansible/profiles/broken.json:1: invalid JSON: Expecting value (column 11); write one "
        "complete JSON object"
    ]


def test_fast_path_and_slow_path_agree(tmp_path: Path, in_fleet_data: Path) -> None:
    """Reordered keys and spacing are the same hardware: one profile, one decision."""
    first = json.loads(Path("fleet.jsonl").read_text().splitlines()[0])
    first.pop("hostname")
    reordered = dict(reversed(list(first.items())))
    lines = [
        json.dumps({"hostname": "a", **first}),
        json.dumps({**reordered, "hostname": "b"}, indent=None, separators=(", ", ": ")),
        json.dumps({"hostname": "c", **first}),
        json.dumps({"hostname": 'quote"d\\', **first}),
        json.dumps({"hostname": "", **first}),
        json.dumps({"hostname": 7, **first}),
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    inventory = read_inventories([path])
    assert [h.hostname for h in inventory.hosts] == ["a", "b", "c", 'quote"d\\']
    assert len(inventory.profiles) == 1
    assert issues_of(inventory) == [
        f'{path}:5: the profile has an empty "hostname"; add '
        '"hostname": "<name>" to each line of a JSON Lines file',
        f'{path}:6: the profile has a "hostname" that is a number, not a non-empty string; add '
        '"hostname": "<name>" to each line of a JSON Lines file',
    ]


def test_missing_and_unknown_paths(tmp_path: Path) -> None:
    odd = tmp_path / "fleet.xml"
    odd.write_text("<fleet/>")
    empty = tmp_path / "empty"
    empty.mkdir()
    inventory = read_inventories([tmp_path / "nope.jsonl", odd, empty])
    assert issues_of(inventory) == [
        f"{tmp_path / 'nope.jsonl'}: no such file or folder",
        f"{odd}: unknown inventory kind '.xml': use .json (one hwprobe profile), .jsonl (JSON "
        "Lines), .yml/.yaml or .ini (Ansible inventory), or a folder",
        f"{empty}: the folder holds no inventory: expected *.json, *.jsonl files or recorded "
        "machine folders (with machine-root/, or proc/ and sys/)",
    ]


def test_host_ranges() -> None:
    assert expand_host_pattern("kiosk[08:11].lan") == [
        "kiosk08.lan",
        "kiosk09.lan",
        "kiosk10.lan",
        "kiosk11.lan",
    ]
    assert expand_host_pattern("r[a:c]n[1:2]") == ["ran1", "ran2", "rbn1", "rbn2", "rcn1", "rcn2"]
    assert expand_host_pattern("web[1:9:4]") == ["web1", "web5", "web9"]
    with pytest.raises(ValueError, match="empty host range"):
        expand_host_pattern("h[5:1]")


def test_unreadable_ansible_inventories(tmp_path: Path) -> None:
    bad_yaml = tmp_path / "bad.yml"
    bad_yaml.write_text("all:\n  hosts:\n    a: [\n")
    not_groups = tmp_path / "list.yaml"
    not_groups.write_text("- a\n- b\n")
    empty = tmp_path / "hosts"
    empty.write_text("# nothing here\n[group]\n")
    inline = tmp_path / "inline.ini"
    inline.write_text("h1 hwprobe='{\"cpus\": [}'\nh2 hwprobe='[1]'\nh3 odd\n")
    inventory = read_inventories([bad_yaml, not_groups, empty, inline])
    assert inventory.hosts == []
    assert issues_of(inventory) == [
        f"{bad_yaml}:4: invalid YAML: expected the node content, but found '<stream end>'",
        f"{not_groups}:1: an Ansible YAML inventory is a mapping of groups",
        f"{empty}: the inventory lists no hosts",
        f"{inline}:1: host 'h1': hwprobe ({inline}:1) is not valid JSON: Expecting value "
        "(column 11)",
        f"{inline}:2: host 'h2': hwprobe ({inline}:2): a hwprobe profile is a JSON object, not "
        "an array",
        f"{inline}:3: host 'h3': expected key=value, got 'odd' (quote values with spaces, e.g. "
        "hwprobe='{...}')",
    ]


def test_yaml_inventory_lines_merges_and_repeated_keys(tmp_path: Path) -> None:
    """Lines come from ruamel.yaml's positions: a key written twice is reported where it
    repeats (the first is read), a merge key (<<) brings its anchor's variables, a lone scalar
    is placed after the comments above it; a host named n stays "n" (YAML 1.1 as PyYAML and
    Ansible read it, not a boolean)."""
    profile = FLEET_DATA / "ansible" / "profiles" / "raspberry-pi-5.json"
    inventory_file = tmp_path / "inventory.yml"
    inventory_file.write_text(
        "# shared facts\n"
        "x-pi: &pi\n"
        f"  hwprobe_profile_file: {profile}\n"
        "all:\n"
        "  hosts:\n"
        "    pi-a:\n"
        "      <<: *pi\n"
        "    n:\n"
        "      <<: *pi\n"
        "    pi-b:\n"
        "      hwprobe_profile_file: nowhere.json\n"
        "    pi-b:\n"
        "      hwprobe_profile_file: elsewhere.json\n"
        "  hosts: []\n"
    )
    scalar = tmp_path / "scalar.yml"
    scalar.write_text("# not an inventory\n\n---\nkiosk01\n")
    inventory = read_inventories([inventory_file, scalar])
    assert hosts_of(inventory) == [("pi-a", f"{inventory_file}:6"), ("n", f"{inventory_file}:8")]
    assert issues_of(inventory) == [
        f"{inventory_file}:3: group 'x-pi': unknown key 'hwprobe_profile_file' (use hosts, "
        "children or vars)",
        f"{inventory_file}:10: host 'pi-b': hwprobe_profile_file ({inventory_file}:11): "
        "nowhere.json does not exist (paths are relative to the inventory file)",
        f"{inventory_file}:12: all.hosts.pi-b appears twice: this one is ignored (merge the two)",
        f"{inventory_file}:14: all.hosts appears twice: this one is ignored (merge the two)",
        f"{scalar}:4: an Ansible YAML inventory is a mapping of groups",
    ]
