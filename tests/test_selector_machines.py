"""Every recorded machine x every shipped manifest -> the full ranked Decision, as golden JSON.

Goldens live in tests/data/selection/<machine>/<manifest>.json. Regenerate them with
``SNAPBUILD_UPDATE_GOLDEN=1 pytest tests/test_selector_machines.py`` and review the diff: the
picks table below states, machine by machine, what a person should expect. ``gemma3`` is the
shipped model ladder (270M to 27B); ``gemma3-4b`` the single 4B model it was before, whose
goldens are the ones recorded before ladders existed (unchanged).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.manifests import GEMMA3_4B

import hwprobe
from snapbuild.manifest.loader import load_manifest
from snapbuild.selection.decision import Decision
from snapbuild.selection.selector import select

MACHINES = Path(__file__).parent / "data" / "machines"
GOLDEN = Path(__file__).parent / "data" / "selection"
UPDATE = os.environ.get("SNAPBUILD_UPDATE_GOLDEN") == "1"
# golden name -> manifest (a shipped name or a path)
MANIFESTS = {"gemma3": "gemma3", "gemma3-4b": GEMMA3_4B, "smollm2": "smollm2", "minilm": "minilm"}
MACHINE_NAMES = sorted(p.name for p in MACHINES.iterdir() if (p / "machine-root").is_dir())

# machine -> the gemma3 ladder's option/engine: small machines get a small size, laptops 4b,
# servers 27b; each line says why the next larger size does not run there
LADDER: dict[str, str | None] = {
    # AmpereOne: 27b on the CPU at ~11-15 tokens/s (no MemAvailable: checked against total RAM)
    "ampere-one-siryn": "27b/cpu-arm64",
    "ampere-one-x-banshee-8": "27b/cpu-arm64",
    # 3.3 GiB free: 12b needs 9.7 GiB even at 2048 tokens
    "asus-ux301l": "4b/cpu-avx2",
    # baseline x86-64 CPU: 12b would decode ~3.7 tokens/s, under the 5 tokens/s floor
    "dummy-machine": "4b/cpu-x86-64",
    # EPYC KVM guest with lavapipe (a CPU, never a GPU): 12b would decode ~3.7 tokens/s here
    "epyc-kvm+lavapipe": "4b/cpu-avx2",
    # MX250 (2 GiB) fits none but the smallest; the iGPU runs 4b, 12b on the CPU is too slow
    "hp-pavilion-15-cs-3037nl": "4b/openvino-gpu",
    # Altra: 27b fits its RAM and decodes ~7 tokens/s
    "hp-proliant-rl300-gen11-altra": "27b/cpu-arm64",
    # 8 GiB W6600M: 12b needs 10.7 GiB of VRAM; on the CPU it would crawl
    "hp-zbook-i712850HX+RadeonPROW6600M": "4b/vulkan",
    # RTX 2000 Ada (6 GiB nominal): 12b needs 10.7 GiB
    "hp-zbook-power-16-inch-g11": "4b/cuda",
    "i7-10510U": "4b/openvino-gpu",
    "i7-1165G7": "4b/openvino-gpu",
    # Arc A580 7.5 GiB: 12b does not fit it, the AVX-only CPU is too slow for it
    "i7-2600k+arc-a580": "4b/vulkan",
    "intel-core-ultra-7-256v": "4b/openvino-gpu",
    # Pi 5: 4b would decode ~4 tokens/s, under the floor: 1b
    "raspberry-pi-5": "1b/cpu-arm64",
    "sifive-p550-premier": None,
    # 5.1 GiB free: 12b does not fit
    "xps13-7390": "4b/cpu-avx2",
}

# machine -> (gemma3-4b, smollm2, minilm) selected engine; None: no compatible engine.
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
    assert sorted(PICKS) == sorted(LADDER) == MACHINE_NAMES


def _pick(decision: Decision) -> str | None:
    sel = decision.selected
    return None if sel is None else f"{sel.option}/{sel.engine}" if sel.option else sel.engine


@pytest.mark.parametrize("machine", MACHINE_NAMES)
def test_picks(machine: str, hosts: dict[str, hwprobe.HostProfile]) -> None:
    got = tuple(_pick(select(load_manifest(MANIFESTS[m]), hosts[machine])) for m in MANIFESTS)
    assert got == (LADDER[machine], *PICKS[machine])


def test_the_ladder_gives_small_mid_and_large_machines_different_sizes(
    hosts: dict[str, hwprobe.HostProfile],
) -> None:
    """A Pi gets 1b, a laptop 4b, a server 27b; each says why the next larger size lost."""
    ladder = load_manifest("gemma3")
    whys = {}
    for machine in ("raspberry-pi-5", "xps13-7390", "hp-proliant-rl300-gen11-altra"):
        sel = select(ladder, hosts[machine]).selected
        assert sel is not None
        whys[machine] = sel.why
    assert whys == {
        "raspberry-pi-5": "1b: the best option that fits and decodes at least 5 tokens/s here "
        "(the next larger, 4b: on cpu-arm64 ~4.1 tokens/s here, below the 5 tokens/s floor); "
        "cpu-arm64 decodes ~12.7 tokens/s, runner-up cpu-arm64-q8 ~9.5 (same accelerator class)",
        "xps13-7390": "4b: the best option that fits and decodes at least 5 tokens/s here (the "
        "next larger, 12b: cpu-avx2: RAM available 5.1 GiB < 9.7 GiB needed even at the minimum "
        "context 2048 (10.4 GiB at 8192)); cpu-avx2 ties with runner-up cpu-x86-64 on class, "
        "fit, speed and quantization; it comes first in the manifest",
        "hp-proliant-rl300-gen11-altra": "27b: the best option that fits and decodes at least 5 "
        "tokens/s here; cpu-arm64 is the only compatible engine (8 rejected)",
    }


@pytest.mark.parametrize("manifest", MANIFESTS)
@pytest.mark.parametrize("machine", MACHINE_NAMES)
def test_full_decision_matches_golden(
    machine: str, manifest: str, hosts: dict[str, hwprobe.HostProfile]
) -> None:
    decision = select(load_manifest(MANIFESTS[manifest]), hosts[machine])
    # probe warnings name the capture's absolute path: keep goldens independent of checkouts
    got = decision.to_json(indent=2).replace(str(MACHINES), "<machines>") + "\n"
    path = GOLDEN / machine / f"{manifest}.json"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got, encoding="utf-8")
    assert json.loads(got) == json.loads(path.read_text(encoding="utf-8"))


def test_avx_only_cpu_never_gets_an_avx2_engine(hosts: dict[str, hwprobe.HostProfile]) -> None:
    decision = select(load_manifest(GEMMA3_4B), hosts["i7-2600k+arc-a580"])
    avx2 = [c for c in decision.candidates if c.engine.startswith("cpu-avx2")]
    assert [(c.engine, c.compatible, c.blockers) for c in avx2] == [
        ("cpu-avx2", False, ("needs AVX2, FMA, F16C: CPU has AVX only",)),
        ("cpu-avx2-q8", False, ("needs AVX2, FMA, F16C: CPU has AVX only",)),
    ]


def test_bmc_only_servers_get_a_cpu_engine(hosts: dict[str, hwprobe.HostProfile]) -> None:
    for machine in ("ampere-one-x-banshee-8", "hp-proliant-rl300-gen11-altra"):
        decision = select(load_manifest(GEMMA3_4B), hosts[machine])
        assert decision.selected is not None and decision.selected.device == "cpu"
        cuda = decision.candidate("cuda")
        assert cuda is not None and "is not a compute GPU" in cuda.blockers[-1]


def test_npu_without_known_driver_is_not_selected(hosts: dict[str, hwprobe.HostProfile]) -> None:
    decision = select(load_manifest(GEMMA3_4B), hosts["intel-core-ultra-7-256v"])
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
