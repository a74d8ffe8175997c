"""Regenerates the fleet test inventories from the shared recorded machines (run from the repo
root: python tests/data/fleet/make_data.py). The files are committed; this script documents how
they were made and which hand-made variants and broken entries they hold, line by line."""

from __future__ import annotations

import json
from pathlib import Path

import hwprobe

HERE = Path(__file__).parent
MACHINES = HERE.parent / "machines"
GIB = 1024**3


def profile(machine: str) -> dict:
    data = hwprobe.probe(str(MACHINES / machine / "machine-root")).to_data()
    data.pop("hostname")
    return data


def with_npu_driver(data: dict) -> dict:
    data = json.loads(json.dumps(data))
    for npu in data["npus"]:
        npu["driver-loaded"] = True
        npu["device-nodes"] = ["/dev/accel/accel0"]
    data["warnings"] = [w for w in data["warnings"] if w["source"] != "npu"]
    return data


def with_memory(data: dict, total: int, available: int) -> dict:
    data = json.loads(json.dumps(data))
    data["memory"]["total"] = total
    data["memory"]["available"] = available
    return data


def line(hostname: str, data: dict) -> str:
    return json.dumps({"hostname": hostname, **data}, separators=(",", ":"))


def main() -> None:
    lunar = profile("intel-core-ultra-7-256v")
    zbook = profile("hp-zbook-i712850HX+RadeonPROW6600M")
    pi5 = profile("raspberry-pi-5")
    sifive = profile("sifive-p550-premier")
    tiger = profile("i7-1165G7")
    lines = [
        line("kiosk-01", lunar),
        line("kiosk-02", lunar),
        line("kiosk-03", lunar),
        line("kiosk-npu-01", with_npu_driver(lunar)),
        "",  # blank lines are allowed
        line("ws-01", zbook),
        line("pi-01", pi5),
        '{"hostname": "broken-01", "cpus": [',  # truncated JSON
        line("pi-02", pi5),
        json.dumps(pi5, separators=(",", ":")),  # no hostname
        line("riscv-01", sifive),
        line("bad-memory-01", {**pi5, "memory": {"total": "lots"}}),  # wrong type
        "[1, 2, 3]",  # not an object
        line("pi-01", pi5),  # duplicate hostname
        line("tiny-01", with_memory(tiger, 3 * GIB, 2 * GIB)),
        line("tiny-02", with_memory(tiger, 3 * GIB, 2 * GIB)),
        line("bad-memory-02", {**pi5, "memory": {"total": "lots"}}),  # same bad hardware again
    ]
    (HERE / "fleet.jsonl").write_text("\n".join(lines) + "\n")
    profiles = HERE / "ansible" / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    for name, data in {
        "lunar-lake.json": lunar,
        "lunar-lake-npu.json": with_npu_driver(lunar),
        "raspberry-pi-5.json": pi5,
    }.items():
        (profiles / name).write_text(json.dumps(data, indent=2) + "\n")
    (profiles / "broken.json").write_text('{"cpus": [}\n')
    inline = json.dumps(pi5, separators=(",", ":"))
    (HERE / "ansible" / "hosts.ini").write_text(INI.replace("@PI5@", inline))
    (HERE / "ansible" / "inventory.yml").write_text(YAML)
    host_vars = HERE / "ansible" / "host_vars"
    host_vars.mkdir(exist_ok=True)
    (host_vars / "edge-npu.yml").write_text(
        "# host_vars beat the group's profile file\nhwprobe_profile_file: profiles/lunar-lake-npu.json\n"
    )


INI = """\
# An INI inventory: profiles shared through group vars, per host, inline JSON and recorded roots
[kiosks]
kiosk[01:03]
kiosk-npu hwprobe_profile_file=profiles/lunar-lake-npu.json

[kiosks:vars]
hwprobe_profile_file=profiles/lunar-lake.json

[servers]
altra-01 hwprobe_machine_root=../../machines/hp-proliant-rl300-gen11-altra ansible_user=ubuntu
pi-ini-01 hwprobe='@PI5@'
missing-01 hwprobe_profile_file=profiles/missing.json
broken-01 hwprobe_profile_file=profiles/broken.json
nofacts-01 ansible_host=10.0.0.9
quote-01 hwprobe='{"cpus": [
notroot-01 hwprobe_machine_root=profiles
[servers:oops]
ignored-01

[edge:children]
kiosks
servers
"""

YAML = """\
# A YAML inventory: groups, children, vars, a host range, host_vars/ and broken entries
all:
  vars:
    ansible_user: ubuntu
  children:
    edge:
      vars:
        hwprobe_profile_file: profiles/lunar-lake.json
      hosts:
        edge[1:2]:
        edge-npu:
    pis:
      hosts:
        pi-a:
          hwprobe_profile_file: profiles/raspberry-pi-5.json
        pi-b:
          hwprobe:
            cpus: "not a list"
        pi-c:
          hwprobe_profile_file: profiles/raspberry-pi-5.json
          hwprobe_machine_root: ../../machines/raspberry-pi-5
    machines:
      hosts:
        zbook-01:
          hwprobe_machine_root: ../../machines/hp-zbook-i712850HX+RadeonPROW6600M
        nofacts-02:
      colour: blue
"""


if __name__ == "__main__":
    main()
