"""Vulkan facts: software devices (lavapipe) are the CPU, reported as such and never as GPUs.

The recorded machine ``epyc-kvm+lavapipe`` is this project's own host with Mesa's Vulkan drivers
installed; its only Vulkan device is lavapipe. A replay reads the ICD manifests and the recorded
device list and never runs a tool; the live probe asks the Vulkan loader in a child process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.hwprobe import Machine

import hwprobe
from hwprobe import tables
from hwprobe._fs import RootFS
from hwprobe.capture import capture
from hwprobe.profile import HostProfile
from hwprobe.summary import summary
from hwprobe.vulkan import DEVICES_FILE, icd_paths, probe_vulkan

NAME = "epyc-kvm+lavapipe"
LVP = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"
LVP_TEXT = '{"ICD": {"api_version": "1.1.230", "library_path": "/usr/lib/x/libvulkan_lvp.so"}}'


def test_the_lavapipe_host_has_no_gpu_and_one_software_vulkan_device(machines_dir: Path) -> None:
    profile = hwprobe.probe(str(machines_dir / NAME / "machine-root"))
    assert profile.gpus == () and profile.displays == () and profile.warnings == ()
    assert profile.vulkan is not None and profile.vulkan.devices is not None
    (device,) = profile.vulkan.devices
    assert (device.name, device.device_type, device.software) == (
        "llvmpipe (LLVM 15.0.6, 256 bits)",
        "cpu",
        True,
    )
    assert (device.index, device.memory, device.pci_slot) == (0, 2 * 2**30, None)
    drivers = {d.manifest.rpartition("/")[2]: d.software for d in profile.vulkan.drivers}
    assert drivers == {
        "intel_hasvk_icd.x86_64.json": False,
        "intel_icd.x86_64.json": False,
        "lvp_icd.x86_64.json": True,
        "radeon_icd.x86_64.json": False,
    }
    line = (
        "Vulkan:  llvmpipe (LLVM 15.0.6, 256 bits) [device 0] software, runs on the CPU: not a GPU"
    )
    assert line in summary(profile).splitlines()


def test_the_lavapipe_host_matches_its_golden_profile(machines_dir: Path) -> None:
    root = str(machines_dir / NAME / "machine-root")
    text = hwprobe.probe(root).to_json().replace(root, "<root>")
    golden = machines_dir / NAME / "expected.json"
    if os.environ.get("SNAPBUILD_UPDATE_GOLDEN") == "1":
        golden.write_text(text + "\n")
    assert json.loads(text) == json.loads(golden.read_text())
    assert HostProfile.from_json(hwprobe.probe(root).to_json()) == hwprobe.probe(root)


def test_a_capture_of_the_lavapipe_host_replays_to_the_same_profile(
    machines_dir: Path, tmp_path: Path
) -> None:
    root = str(machines_dir / NAME / "machine-root")
    written = capture(tmp_path, root)
    assert DEVICES_FILE.lstrip("/") in written and LVP.lstrip("/") in written
    original = hwprobe.probe(root).to_json().replace(root, "<root>")
    replayed = hwprobe.probe(str(tmp_path)).to_json().replace(str(tmp_path), "<root>")
    assert json.loads(replayed) == json.loads(original)


def test_a_replay_never_runs_the_query(machines_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a replay ran a tool")

    monkeypatch.setattr("hwprobe.vulkan.start_query", refuse)
    assert hwprobe.probe(str(machines_dir / NAME / "machine-root")).vulkan is not None


def test_a_recorded_query_error_is_a_warning_and_devices_unknown(tmp_path: Path) -> None:
    machine = Machine(tmp_path).basics()
    machine.file(LVP.lstrip("/"), LVP_TEXT)
    machine.file(DEVICES_FILE.lstrip("/"), '{"error": "vkCreateInstance failed with VkResult -9"}')
    profile = hwprobe.probe(str(tmp_path))
    assert profile.vulkan is not None and profile.vulkan.devices is None
    (warning,) = [w for w in profile.warnings if w.source == "vulkan"]
    assert "VkResult -9" in warning.message
    assert "Vulkan:  drivers lvp_icd.x86_64.json; devices not listed" in summary(profile)


def test_a_broken_manifest_or_entry_is_a_warning(tmp_path: Path) -> None:
    machine = Machine(tmp_path).basics()
    machine.file("etc/vulkan/icd.d/broken.json", "[1, 2]")
    machine.file(
        DEVICES_FILE.lstrip("/"), '{"devices": [{"index": 0, "name": "x", "device-type": "tpu"}]}'
    )
    profile = hwprobe.probe(str(tmp_path))
    assert profile.vulkan is not None
    assert profile.vulkan.drivers == () and profile.vulkan.devices is None
    assert [w.message.split(" (")[0] for w in profile.warnings if w.source == "vulkan"] == [
        f"{tmp_path}/etc/vulkan/icd.d/broken.json is not a Vulkan driver manifest",
        "a Vulkan device entry is malformed",
    ]


def test_no_vulkan_at_all_is_null(tmp_path: Path) -> None:
    assert hwprobe.probe(str(Machine(tmp_path).basics().root)).vulkan is None


def test_the_live_search_follows_the_loaders_environment(tmp_path: Path) -> None:
    """The gpu-2404 wrapper adds mesa-2404's share/ to XDG_DATA_DIRS, and VK_DRIVER_FILES
    replaces the search: the probe reads what the loader would."""
    share = tmp_path / "gpu-2404" / "usr" / "share" / "vulkan" / "icd.d"
    share.mkdir(parents=True)
    (share / "lvp_icd.json").write_text(LVP_TEXT)
    live = RootFS("/")
    found = icd_paths(live, {"XDG_DATA_DIRS": f"/nonexistent:{share.parent.parent}"})
    assert str(share / "lvp_icd.json") in found
    only = icd_paths(live, {"VK_DRIVER_FILES": str(share / "lvp_icd.json")})
    assert only == [str(share / "lvp_icd.json")]
    assert icd_paths(live, {"VK_DRIVER_FILES": str(tmp_path / "none.json")}) == []


@pytest.mark.skipif(
    not any(Path("/usr/share/vulkan/icd.d").glob("lvp_icd*.json")),
    reason="lavapipe is not installed (apt-get install mesa-vulkan-drivers)",
)
def test_the_live_loader_lists_lavapipe_as_a_cpu_device(tmp_path: Path) -> None:
    lvp = next(Path("/usr/share/vulkan/icd.d").glob("lvp_icd*.json"))
    env = {**os.environ, "VK_DRIVER_FILES": str(lvp)}  # lavapipe alone, whatever else is here
    facts = probe_vulkan(RootFS("/"), env)
    assert facts is not None and facts.devices is not None
    (device,) = facts.devices
    assert device.device_type == "cpu" and device.software and device.memory
    assert [d.software for d in facts.drivers] == [True]
    env["VK_DRIVER_FILES"] = str(tmp_path / "missing.json")
    assert probe_vulkan(RootFS("/"), env) is None  # no driver manifest: no query either


def test_the_vulkan_table_validates_and_knows_the_software_drivers() -> None:
    data = tables.load_yaml("vulkan.yaml")
    assert tables.validate_table("vulkan", data) == tables.vulkan_table()
    assert set(tables.vulkan_table().software_libraries) == {
        "libvulkan_lvp.so",
        "libvk_swiftshader.so",
    }
    assert "/usr/share/vulkan/icd.d" in tables.vulkan_table().icd_directories
    data["icd-directories"] = ["usr/share/vulkan"]
    with pytest.raises(ValueError, match="is not /.../vulkan/icd.d"):
        tables.validate_table("vulkan", data)


def test_the_machine_readme_says_what_was_recorded(machines_dir: Path) -> None:
    assert "lavapipe" in (machines_dir / NAME / "README.md").read_text()
