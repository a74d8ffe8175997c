"""Every recorded machine x every shipped manifest -> the full ranked Decision, as golden JSON.

Goldens live in tests/data/selection/<machine>/<manifest>.json. Regenerate them with
``SNAPBUILD_UPDATE_GOLDEN=1 pytest tests/test_selector_machines.py`` and review the diff: the
picks table below states, machine by machine, what a person should expect.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import hwprobe
from snapbuild.manifest.loader import load_manifest
from snapbuild.selection.selector import select

MACHINES = Path(__file__).parent / "data" / "machines"
GOLDEN = Path(__file__).parent / "data" / "selection"
UPDATE = os.environ.get("SNAPBUILD_UPDATE_GOLDEN") == "1"
MANIFESTS = ("gemma3", "smollm2", "minilm")
MACHINE_NAMES = sorted(p.name for p in MACHINES.iterdir() if (p / "machine-root").is_dir())

# machine -> (gemma3, smollm2, minilm) selected engine; None: no compatible engine.
PICKS: dict[str, tuple[str | None, str | None, str | None]] = {
    # AmpereOne: no GPU (ASPEED BMC only); Q8_0 would be fast enough, but the capture has no
    # MemAvailable, so the fit is unverified and the smaller Q4_K_M wins
    "ampere-one-siryn": ("cpu-arm64", "cpu", "cpu"),
    "ampere-one-x-banshee-8": ("cpu-arm64", "cpu", "cpu"),
    # Haswell iGPU is too old for GPU runtimes: the AVX2 CPU engine (3.3 GiB free: text only,
    # gemma3's image encoder does not fit beside it)
    "asus-ux301l": ("cpu-avx2", "cpu-avx2", "cpu"),
    # a CPU without AVX2 flags: the baseline engine
    "dummy-machine": ("cpu-x86-64", "cpu", "cpu"),
    # no GPU; lavapipe is a software Vulkan device on the CPU, never a reason to pick Vulkan
    "epyc-kvm+lavapipe": ("cpu-avx2", "cpu-avx2", "cpu"),
    # GeForce MX250 (2 GiB): too small for Gemma 3, fine for SmolLM2 and MiniLM
    "hp-pavilion-15-cs-3037nl": ("openvino-gpu", "cuda", "cuda"),
    # Altra with a Matrox BMC: CPU; ~200 GB/s is not enough for Q8_0 to reach 40 tokens/s
    "hp-proliant-rl300-gen11-altra": ("cpu-arm64", "cpu", "cpu"),
    # Radeon PRO W6600M is gfx1032, not a ROCm target: Vulkan
    "hp-zbook-i712850HX+RadeonPROW6600M": ("vulkan", "vulkan", "cpu"),
    # RTX 2000 Ada laptop GPU (6 GiB nominal, NVML not recorded): CUDA
    "hp-zbook-power-16-inch-g11": ("cuda", "cuda", "cuda"),
    "i7-10510U": ("openvino-gpu", "vulkan", "cpu"),
    "i7-1165G7": ("openvino-gpu", "vulkan", "cpu"),
    # AVX-only i7-2600K beside an Arc A580: the GPU, never an AVX2 engine
    "i7-2600k+arc-a580": ("vulkan", "vulkan", "cpu"),
    # Lunar Lake: the NPU driver state is not recorded, so the NPU is not selected
    "intel-core-ultra-7-256v": ("openvino-gpu", "vulkan", "cpu"),
    "raspberry-pi-5": ("cpu-arm64", "cpu", "cpu"),
    # riscv64: no manifest targets it
    "sifive-p550-premier": (None, None, None),
    # UHD 620 with 5.1 GiB free: the iGPU engines fit gemma3 only without its image encoder, the
    # AVX2 CPU engine fits it with images, and serving every input ranks first
    "xps13-7390": ("cpu-avx2", "vulkan", "cpu"),
}


@pytest.fixture(scope="module")
def hosts() -> dict[str, hwprobe.HostProfile]:
    return {name: hwprobe.probe(str(MACHINES / name / "machine-root")) for name in MACHINE_NAMES}


def test_every_machine_has_expected_picks() -> None:
    assert sorted(PICKS) == MACHINE_NAMES


@pytest.mark.parametrize("machine", MACHINE_NAMES)
def test_picks(machine: str, hosts: dict[str, hwprobe.HostProfile]) -> None:
    got = tuple(
        (d.selected.engine if d.selected else None)
        for d in (select(load_manifest(m), hosts[machine]) for m in MANIFESTS)
    )
    assert got == PICKS[machine]


@pytest.mark.parametrize("manifest", MANIFESTS)
@pytest.mark.parametrize("machine", MACHINE_NAMES)
def test_full_decision_matches_golden(
    machine: str, manifest: str, hosts: dict[str, hwprobe.HostProfile]
) -> None:
    decision = select(load_manifest(manifest), hosts[machine])
    # probe warnings name the capture's absolute path: keep goldens independent of checkouts
    got = decision.to_json(indent=2).replace(str(MACHINES), "<machines>") + "\n"
    path = GOLDEN / machine / f"{manifest}.json"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got, encoding="utf-8")
    assert json.loads(got) == json.loads(path.read_text(encoding="utf-8"))


def test_avx_only_cpu_never_gets_an_avx2_engine(hosts: dict[str, hwprobe.HostProfile]) -> None:
    decision = select(load_manifest("gemma3"), hosts["i7-2600k+arc-a580"])
    avx2 = [c for c in decision.candidates if c.engine.startswith("cpu-avx2")]
    assert [(c.engine, c.compatible, c.blockers) for c in avx2] == [
        ("cpu-avx2", False, ("needs AVX2, FMA, F16C: CPU has AVX only",)),
        ("cpu-avx2-q8", False, ("needs AVX2, FMA, F16C: CPU has AVX only",)),
    ]


def test_bmc_only_servers_get_a_cpu_engine(hosts: dict[str, hwprobe.HostProfile]) -> None:
    for machine in ("ampere-one-x-banshee-8", "hp-proliant-rl300-gen11-altra"):
        decision = select(load_manifest("gemma3"), hosts[machine])
        assert decision.selected is not None and decision.selected.device == "cpu"
        cuda = decision.candidate("cuda")
        assert cuda is not None and "is not a compute GPU" in cuda.blockers[-1]


def test_npu_without_known_driver_is_not_selected(hosts: dict[str, hwprobe.HostProfile]) -> None:
    decision = select(load_manifest("gemma3"), hosts["intel-core-ultra-7-256v"])
    npu = decision.candidate("openvino-npu")
    assert npu is not None and not npu.compatible
    assert npu.blockers[0].startswith("NPU driver state unknown")
    assert npu.blockers[0].endswith(
        ": install intel-npu-driver (the snap or the linux-npu-driver packages) and reboot"
    )


def test_riscv64_gets_no_compatible_engine(hosts: dict[str, hwprobe.HostProfile]) -> None:
    decision = select(load_manifest("smollm2"), hosts["sifive-p550-premier"])
    assert decision.selected is None
    assert [c.blockers[0] for c in decision.candidates] == [
        "snap not built for riscv64 (only amd64, arm64)"
    ] * 4
