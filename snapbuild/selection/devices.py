"""Which device an engine would run on: a GPU or NPU its runtime can use, or the CPU.

The runtime's device class comes from the catalog, so a CUDA engine needs an NVIDIA GPU even
when its manifest forgot to say so. GPU conditions must hold for one and the same GPU; of the
usable ones the engine gets the discrete GPU with the most memory, so the choice does not depend
on probe order. Unknown facts reject only where a wrong guess fails at run time (a gfx target,
an NPU driver), because a CPU engine is always there to fall back to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hwprobe.profile import GpuFacts, HostProfile, NpuFacts, VulkanDeviceFacts
from runtimes.catalog import RuntimeEntry
from snapbuild.manifest.model import Engine, GpuRequirement
from snapbuild.selection.decision import DeviceClass
from snapbuild.selection.hardware import Accel, HardwareTable
from snapbuild.selection.software import software_reason, software_vulkan
from snapbuild.selection.verdicts import Verdicts, gib


@dataclass(frozen=True)
class Device:
    """The device an engine would run on."""

    cls: DeviceClass
    accel: Accel
    vendor: str | None
    slot: str | None = None
    gpu: GpuFacts | None = None
    npu: NpuFacts | None = None
    vulkan: VulkanDeviceFacts | None = None  # a software Vulkan device: only ever forced


def _cc(value: str) -> tuple[int, ...]:
    return tuple(int(p) for p in value.split(".") if p.isdigit())


def _gpu_label(gpu: GpuFacts, hw: HardwareTable) -> str:
    name = gpu.name or "GPU"
    slot = f" at {gpu.pci.slot}" if gpu.pci else ""
    return f"{hw.vendor_name(gpu.vendor)} {name}{slot}"


def gpu_key(gpu: GpuFacts) -> str | None:
    return f"{gpu.pci.vendor_id}:{gpu.pci.device_id}".lower() if gpu.pci else None


def is_integrated(gpu: GpuFacts) -> bool:
    return bool(gpu.integrated) or gpu.unified_memory


def gpu_problems(
    gpu: GpuFacts, req: GpuRequirement, vendors: Sequence[str], hw: HardwareTable
) -> list[str]:
    """Why ``gpu`` cannot serve ``req`` (empty: it can). Unknown facts count as problems
    only where a wrong guess fails at run time (gfx target)."""
    out: list[str] = []
    name = hw.vendor_name
    if vendors and gpu.vendor not in vendors:
        return [f"is {name(gpu.vendor)}, not {'/'.join(map(name, vendors))}"]
    if req.vendor and gpu.vendor != req.vendor:
        return [f"is {name(gpu.vendor)}, not {name(req.vendor)}"]
    too_old = _unsupported(gpu, hw)
    if too_old:
        return [f"is too old for GPU runtimes: {too_old}"]
    if req.device_ids:
        dev = gpu.pci.device_id.lower() if gpu.pci else None
        if dev not in {d.lower() for d in req.device_ids}:
            out.append(f"device {dev or 'unknown'} is not among {', '.join(req.device_ids)}")
    if req.integrated is not None and is_integrated(gpu) != req.integrated:
        out.append("is integrated" if is_integrated(gpu) else "is discrete")
    if req.gfx_targets:
        if gpu.gfx is None:
            out.append(f"gfx target unknown (needs one of {', '.join(req.gfx_targets)})")
        elif gpu.gfx not in req.gfx_targets:
            out.append(f"is {gpu.gfx}, not one of {', '.join(req.gfx_targets)}")
    if (
        req.min_compute_capability
        and gpu.compute_capability
        and _cc(gpu.compute_capability) < _cc(req.min_compute_capability)
    ):
        out.append(
            f"has compute capability {gpu.compute_capability} < {req.min_compute_capability} needed"
        )
    if req.min_vram:
        have = vram(gpu, hw)[0]
        if have is not None and have < req.min_vram:
            out.append(f"has {gib(have)} VRAM < {gib(req.min_vram)} the engine requires")
    return out


def _unsupported(gpu: GpuFacts, hw: HardwareTable) -> str | None:
    dev = gpu.pci.device_id.lower() if gpu.pci else ""
    for entry in hw.unsupported_gpus.get(gpu.vendor, ()):
        if dev.startswith(entry.prefix):
            return entry.reason
    return None


def vram(gpu: GpuFacts, hw: HardwareTable) -> tuple[int | None, str]:
    """(bytes, where the figure came from) for a GPU's own memory; ``hw`` knows the nominal
    memory of devices whose driver does not report it."""
    if gpu.vram_free is not None:
        return gpu.vram_free, "free"
    if gpu.vram is not None:
        return gpu.vram, ""
    key = gpu_key(gpu)
    nominal = hw.nominal_vram
    if key in nominal:
        return int(
            nominal[key]
        ), f"nominal for device {key.split(':')[1]}, not read from the driver"
    return None, ""


def _gpu_requirements(engine: Engine) -> list[GpuRequirement]:
    return [c.gpu for c in engine.requires.all_of if c.gpu is not None]


def pick_gpu(
    host: HostProfile, engine: Engine, entry: RuntimeEntry, v: Verdicts, hw: HardwareTable
) -> Device | None:
    """The GPU ``engine`` would run on (None: none can, and ``v`` says why for each)."""
    reqs = _gpu_requirements(engine) or [GpuRequirement()]
    vendors = entry.gpu_vendors
    wanted = "/".join(hw.vendor_name(x) for x in vendors) if vendors else "a"
    if not host.gpus:
        extra = "".join(
            f"; {hw.vendor_name(d.vendor)} {d.name or 'display'} is not a compute GPU ({d.reason})"
            for d in host.displays
        )
        software = software_vulkan(host, entry)  # rejected, but kept for a forced run's plan
        extra += software_reason(software, engine.name) if software else ""
        v.fail(f"needs an {wanted} GPU ({entry.id}): none found{extra}")
        return Device(cls="gpu", accel="cpu", vendor=None, vulkan=software) if software else None
    usable: list[GpuFacts] = []
    rejected: list[str] = []
    for gpu in host.gpus:
        problems = [p for r in reqs for p in gpu_problems(gpu, r, vendors, hw)]
        if problems:
            rejected.append(f"{_gpu_label(gpu, hw)} {'; '.join(dict.fromkeys(problems))}")
        else:
            usable.append(gpu)
    if not usable:
        v.fail(f"needs an {wanted} GPU ({entry.id}): " + "; ".join(rejected))
        return None
    # discrete before integrated, then the most memory, then PCI slot for determinism
    gpu = sorted(
        usable,
        key=lambda g: (is_integrated(g), -(vram(g, hw)[0] or 0), g.pci.slot if g.pci else ""),
    )[0]
    v.ok(f"{_gpu_label(gpu, hw)} ({'integrated' if is_integrated(gpu) else 'discrete'})")
    for req in reqs:
        if req.min_compute_capability:
            if gpu.compute_capability:
                v.ok(f"compute capability {gpu.compute_capability} ≥ {req.min_compute_capability}")
            else:
                v.ok(
                    f"compute capability unknown (NVML unavailable): assumed "
                    f"≥ {req.min_compute_capability}"
                )
                v.warnings.append(
                    f"{engine.name}: compute capability of {_gpu_label(gpu, hw)} unknown"
                )
        if req.gfx_targets:
            v.ok(f"gfx target {gpu.gfx} is supported")
    return Device(
        cls="gpu",
        accel="gpu-integrated" if is_integrated(gpu) else "gpu-discrete",
        vendor=gpu.vendor,
        slot=gpu.pci.slot if gpu.pci else None,
        gpu=gpu,
    )


def pick_npu(
    host: HostProfile, engine: Engine, entry: RuntimeEntry, v: Verdicts, hw: HardwareTable
) -> Device | None:
    """The first NPU of the runtime's vendors that runs LLMs with its driver loaded."""
    reqs = [c.npu for c in engine.requires.all_of if c.npu is not None]
    vendors = set(entry.npu_vendors) | {r.vendor for r in reqs}
    wanted = "/".join(sorted(hw.vendor_name(x) for x in vendors)) or "an"
    candidates = [n for n in host.npus if not vendors or n.vendor in vendors]
    if not candidates:
        v.fail(f"needs an {wanted} NPU ({entry.id}): none found")
        return None
    hints = hw.npu_driver_hints
    problems: list[str] = []
    for npu in candidates:
        label = npu.name or f"{hw.vendor_name(npu.vendor)} NPU"
        label += f" at {npu.pci.slot}" if npu.pci else ""
        hint = hints.get(npu.vendor, "install the NPU's kernel driver")
        if not npu.llm_capable:
            problems.append(f"{label} runs no LLMs{f' ({npu.note})' if npu.note else ''}")
        elif npu.driver_loaded is False:
            problems.append(f"NPU driver not loaded ({label}): {hint}")
        elif npu.driver_loaded is None and not npu.device_nodes:
            problems.append(f"NPU driver state unknown ({label}, no /dev/accel node seen): {hint}")
        else:
            driver = f", driver {npu.driver} loaded" if npu.driver else ", driver loaded"
            v.ok(f"{label}{driver}")
            return Device(
                cls="npu",
                accel="npu",
                vendor=npu.vendor,
                slot=npu.pci.slot if npu.pci else None,
                npu=npu,
            )
    for p in problems:
        v.fail(p)
    return None


def cpu_device(host: HostProfile) -> Device:
    """The CPU: every machine has one, so a CPU engine never lacks its device."""
    vendor = host.cpus[0].vendor if host.cpus else None
    return Device(cls="cpu", accel="cpu", vendor=vendor)
