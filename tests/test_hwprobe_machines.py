"""Every shared real machine replayed: the complete CPU, GPU, NPU and display lists.

Case names say what each machine should produce. The full profile is also compared with the
golden ``tests/data/machines/<name>/expected.json`` (regenerate with SNAPBUILD_UPDATE_GOLDEN=1
after a reviewed change).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

import hwprobe
from hwprobe.profile import HostProfile, error_message

GIB = 1024**3

# (architecture, vendor, model, isa: x86 level | arm64 features | riscv isa, threads, cores)
CPUS: dict[str, list[tuple[object, ...]]] = {
    "ampere-one-siryn": [
        ("arm64", "Ampere", "AmpereOne", ("asimd", "bf16", "dotprod", "fp16", "i8mm"), 160, None)
    ],
    "ampere-one-x-banshee-8": [
        (
            "arm64",
            "Ampere",
            "AmpereOne AC04",
            ("asimd", "bf16", "dotprod", "fp16", "i8mm"),
            192,
            None,
        )
    ],
    "asus-ux301l": [
        ("amd64", "GenuineIntel", "Intel(R) Core(TM) i7-4558U CPU @ 2.80GHz", "x86-64-v3", 4, 2)
    ],
    "dummy-machine": [
        ("amd64", "GenuineIntel", "12th Gen Intel(R) Core(TM) i7-12850HX", None, 1, 1)
    ],
    "hp-pavilion-15-cs-3037nl": [
        ("amd64", "GenuineIntel", "Intel(R) Core(TM) i7-1065G7 CPU @ 1.30GHz", "x86-64-v4", 8, 4)
    ],
    "hp-proliant-rl300-gen11-altra": [
        ("arm64", "ARM", "Neoverse-N1", ("asimd", "dotprod", "fp16"), 128, None)
    ],
    "hp-zbook-i712850HX+RadeonPROW6600M": [
        ("amd64", "GenuineIntel", "12th Gen Intel(R) Core(TM) i7-12850HX", "x86-64-v3", 24, 16)
    ],
    "hp-zbook-power-16-inch-g11": [
        ("amd64", "GenuineIntel", "Intel(R) Core(TM) Ultra 7 165H", "x86-64-v3", 22, 16)
    ],
    "i7-10510U": [
        ("amd64", "GenuineIntel", "Intel(R) Core(TM) i7-10510U CPU @ 1.80GHz", "x86-64-v3", 8, 4)
    ],
    "i7-1165G7": [
        (
            "amd64",
            "GenuineIntel",
            "11th Gen Intel(R) Core(TM) i7-1165G7 @ 2.80GHz",
            "x86-64-v4",
            8,
            4,
        )
    ],
    "i7-2600k+arc-a580": [
        ("amd64", "GenuineIntel", "Intel(R) Core(TM) i7-2600K CPU @ 3.40GHz", "x86-64-v2", 8, 4)
    ],
    "intel-core-ultra-7-256v": [
        ("amd64", "GenuineIntel", "Intel(R) Core(TM) Ultra 7 256V", "x86-64-v3", 8, 8)
    ],
    "raspberry-pi-5": [("arm64", "ARM", "Cortex-A76", ("asimd", "dotprod", "fp16"), 4, None)],
    "sifive-p550-premier": [
        ("riscv64", "SiFive", None, "rv64imafdch_zicsr_zifencei_zba_zbb_sscofpmf", 4, None)
    ],
    "xps13-7390": [
        ("amd64", "GenuineIntel", "Intel(R) Core(TM) i7-10510U CPU @ 1.80GHz", "x86-64-v3", 8, 4)
    ],
}

# (vendor, slot, integrated, vram, shared memory, compute capability, gfx)
INTEL_IGPU = ("intel", "0000:00:02.0", True, None, None, None, None)
NVIDIA_UNKNOWN_VRAM = (False, None, None, None, None)
GPUS: dict[str, list[tuple[object, ...]]] = {
    "ampere-one-siryn": [],
    "ampere-one-x-banshee-8": [],
    "asus-ux301l": [INTEL_IGPU],
    "dummy-machine": [],
    "hp-pavilion-15-cs-3037nl": [INTEL_IGPU, ("nvidia", "0000:06:00.0", *NVIDIA_UNKNOWN_VRAM)],
    "hp-proliant-rl300-gen11-altra": [],
    "hp-zbook-i712850HX+RadeonPROW6600M": [
        INTEL_IGPU,
        ("amd", "0000:03:00.0", False, 8573157376, None, None, "gfx1032"),
    ],
    "hp-zbook-power-16-inch-g11": [INTEL_IGPU, ("nvidia", "0000:01:00.0", *NVIDIA_UNKNOWN_VRAM)],
    "i7-10510U": [INTEL_IGPU],
    "i7-1165G7": [INTEL_IGPU],
    "i7-2600k+arc-a580": [("intel", "0000:03:00.0", False, 8096681984, None, None, None)],
    "intel-core-ultra-7-256v": [INTEL_IGPU],
    "raspberry-pi-5": [],
    "sifive-p550-premier": [],
    "xps13-7390": [("intel", "0000:00:02.0", True, None, 14477950976, None, None)],
}

# (vendor, slot, driver, driver loaded, runtimes, llm capable)
INTEL_NPU = ("intel", "0000:00:0b.0", "intel_vpu", None, ("openvino-npu",), True)
NPUS: dict[str, list[tuple[object, ...]]] = {
    "hp-zbook-power-16-inch-g11": [INTEL_NPU],
    "intel-core-ultra-7-256v": [INTEL_NPU],
}

# (vendor, slot)
DISPLAYS: dict[str, list[tuple[object, ...]]] = {
    "ampere-one-x-banshee-8": [("aspeed", "0004:03:00.0")],
    "hp-proliant-rl300-gen11-altra": [("matrox", "0006:01:00.1")],
}

# warning sources, in order
WARNINGS: dict[str, list[str]] = {
    "dummy-machine": ["cpu"],
    "hp-pavilion-15-cs-3037nl": ["nvml"],
    "hp-zbook-power-16-inch-g11": ["nvml", "npu"],
    "intel-core-ultra-7-256v": ["npu"],
}

CASES = {
    "ampere-one-siryn": "arm64-ampereone-i8mm-bf16-no-gpu",
    "ampere-one-x-banshee-8": "arm64-ampereone-aspeed-bmc-is-display-not-gpu",
    "asus-ux301l": "haswell-v3-intel-igpu",
    "dummy-machine": "truncated-flags-level-unknown-no-gpu",
    "hp-pavilion-15-cs-3037nl": "icelake-v4-igpu-plus-mx250-vram-unknown",
    "hp-proliant-rl300-gen11-altra": "neoverse-n1-matrox-bmc-is-display-not-gpu",
    "hp-zbook-i712850HX+RadeonPROW6600M": "alderlake-igpu-plus-w6600m-gfx1032-8gib",
    "hp-zbook-power-16-inch-g11": "meteorlake-igpu-rtx2000ada-vram-unknown-npu",
    "i7-10510U": "cometlake-v3-igpu",
    "i7-1165G7": "tigerlake-v4-igpu",
    "i7-2600k+arc-a580": "avx-only-v2-with-discrete-arc-a580-7gib",
    "intel-core-ultra-7-256v": "lunarlake-igpu-npu-driver-unknown",
    "raspberry-pi-5": "cortex-a76-dotprod-no-gpu",
    "sifive-p550-premier": "riscv64-rv64gch-no-gpu",
    "xps13-7390": "cometlake-igpu-shares-14gib-ram-per-opencl",
}


def _isa(cpu: object) -> object:
    from hwprobe.profile import CpuFacts

    assert isinstance(cpu, CpuFacts)
    if cpu.architecture == "amd64":
        return cpu.x86_64_level
    if cpu.architecture == "arm64":
        return cpu.arm64_features
    return cpu.riscv_isa


def probe_machine(machines_dir: Path, name: str) -> HostProfile:
    return hwprobe.probe(str(machines_dir / name / "machine-root"))


@pytest.mark.parametrize("name", sorted(CASES), ids=[CASES[n] for n in sorted(CASES)])
def test_shared_machine_devices(machines_dir: Path, name: str) -> None:
    profile = probe_machine(machines_dir, name)
    cpus = [
        (c.architecture, c.vendor, c.model_name, _isa(c), c.threads, c.cores) for c in profile.cpus
    ]
    gpus = [
        (
            g.vendor,
            g.pci.slot if g.pci else None,
            g.integrated,
            g.vram,
            g.shared_memory,
            g.compute_capability,
            g.gfx,
        )
        for g in profile.gpus
    ]
    npus = [
        (
            n.vendor,
            n.pci.slot if n.pci else None,
            n.driver,
            n.driver_loaded,
            n.runtimes,
            n.llm_capable,
        )
        for n in profile.npus
    ]
    displays = [(d.vendor, d.pci.slot if d.pci else None) for d in profile.displays]
    assert cpus == CPUS[name]
    assert gpus == GPUS[name]
    assert npus == NPUS.get(name, [])
    assert displays == DISPLAYS.get(name, [])
    assert [w.source for w in profile.warnings] == WARNINGS.get(name, [])
    assert all(g.unified_memory == bool(g.integrated) for g in profile.gpus)


@pytest.mark.parametrize("name", sorted(CASES), ids=[CASES[n] for n in sorted(CASES)])
def test_shared_machine_matches_golden_profile(machines_dir: Path, name: str) -> None:
    profile = probe_machine(machines_dir, name)
    root = str(machines_dir / name / "machine-root")
    # Warnings name absolute paths; the golden file holds them relative to the machine root.
    text = profile.to_json().replace(root, "<root>")
    golden = machines_dir / name / "expected.json"
    if os.environ.get("SNAPBUILD_UPDATE_GOLDEN") == "1":
        golden.write_text(text + "\n")
    assert json.loads(text) == json.loads(golden.read_text())
    # The strict reader takes back exactly what the prober built (tuples, nested dataclasses).
    assert HostProfile.from_json(profile.to_json()) == profile


def test_nvidia_machines_warn_that_vram_is_unknown_and_how_to_record_it(machines_dir: Path) -> None:
    profile = probe_machine(machines_dir, "hp-pavilion-15-cs-3037nl")
    (warning,) = profile.warnings
    assert warning.source == "nvml"
    assert "no NVML answers for the NVIDIA GPU at 0000:06:00.0" in warning.message
    assert warning.resolution == (
        "record the machine with `hwprobe capture DIR` while the NVIDIA driver is loaded"
    )


def test_memory_in_bytes_or_kb_and_disk_from_recording(machines_dir: Path) -> None:
    bytes_machine = probe_machine(machines_dir, "i7-10510U")
    kb_machine = probe_machine(machines_dir, "xps13-7390")
    assert bytes_machine.memory.total == 15908761600
    assert kb_machine.memory.total == 15535900 * 1024
    assert kb_machine.disk is not None
    assert (kb_machine.disk.path, kb_machine.disk.total, kb_machine.disk.free) == (
        "/var/lib/snapd/snaps",
        1003736440832,
        732343107584,
    )


def test_profile_round_trips_through_json(machines_dir: Path) -> None:
    profile = probe_machine(machines_dir, "hp-zbook-power-16-inch-g11")
    assert HostProfile.from_json(profile.to_json()) == profile
    assert HostProfile.from_data(json.loads(profile.to_json())) == profile


def test_reading_a_profile_is_strict(machines_dir: Path) -> None:
    data = probe_machine(machines_dir, "hp-zbook-power-16-inch-g11").to_data()
    data["gpus"][0]["pci"]["vram"] = 1
    data["memory"]["total"] = "lots"
    data["cpus"] = data["cpus"][0]
    with pytest.raises(ValidationError) as info:
        HostProfile.from_json(json.dumps(data))
    assert [(e["loc"], error_message(e)) for e in info.value.errors()] == [
        (("cpus",), "Input should be a valid array"),
        (
            ("memory", "total"),
            "Input should be a valid integer, unable to parse string as an integer",
        ),
        (("gpus", 0, "pci", "vram"), "Extra inputs are not permitted"),
    ]


def test_json_schema_has_the_kebab_keys_and_rejects_others() -> None:
    schema = HostProfile.json_schema()
    assert list(schema["properties"]) == [
        "schema-version",
        "hostname",
        "cpus",
        "memory",
        "disk",
        "gpus",
        "npus",
        "displays",
        "vulkan",
        "runtimes",
        "warnings",
    ]
    assert schema["additionalProperties"] is False
    assert "model-name" in schema["$defs"]["CpuFacts"]["properties"]
