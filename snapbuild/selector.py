"""The selector: manifest + HostProfile -> Decision. A pure function of its arguments.

Every engine is judged against the host: the requirements written in the manifest, the ones
implied by its runtime (a CUDA engine needs an NVIDIA GPU even when the manifest forgot to
say so), and whether the model fits the memory that device uses at a context that is still
useful. Each verdict, passed or failed, becomes a reason string, so ``why-not`` and the
install log explain themselves. Compatible engines are ranked by a declared precedence
(:data:`PRECEDENCE`) whose last key, manifest order, is the only tie-break.

Unknown facts are handled deliberately (see docs/selection.md):
- a GPU whose memory is unknown is accepted when its device is in the nominal-VRAM table
  (the fit is checked against that figure) and otherwise accepted *with a warning*, ranked
  after engines whose fit was verified in the same accelerator class;
- an NPU whose driver state is unknown is rejected, as are CPU flags or a gfx target that
  could not be read: guessing wrong there crashes the engine (SIGILL, no device), and a
  CPU engine is always there to fall back to.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from hwprobe.profile import GpuFacts, HostProfile, NpuFacts, ProbeWarning
from runtimes.catalog import RuntimeEntry, load_catalog
from snapbuild.batching import plan_batching
from snapbuild.decision import Candidate, Decision, DeviceClass, MemoryEstimate, Selected
from snapbuild.estimate import (
    ModelShape,
    _data,
    host_overhead,
    quantization_bits,
    shape_from_facts,
    with_headroom,
)
from snapbuild.estimate_llama import Pool, device_overhead, plan_memory, runtime_device
from snapbuild.manifest import Condition, Engine, GpuRequirement, Manifest
from snapbuild.serving import plan
from snapbuild.vision import missing_inputs, projector_bytes, vision_compute_bytes
from snapcommon.errors import UsageError
from snapcommon.sizes import memory as gib

PRECEDENCE: tuple[str, ...] = (
    "serves every input the model takes (a vision model: images too) before text only",
    "accelerator class (discrete GPU > integrated GPU > NPU > CPU)",
    "memory fit verified before fit unknown",
    "estimated decode tokens/s (bandwidth x runtime efficiency / weight bytes), "
    "capped at the sufficient speed",
    "better quantization (more bits per weight); smaller footprint when the fit is unverified",
    "uncapped decode tokens/s (e.g. CUDA before Vulkan on one GPU)",
    "manifest order",
)

ACCEL_LABELS = {
    "gpu-discrete": "discrete GPU",
    "gpu-integrated": "integrated GPU",
    "npu": "NPU",
    "cpu": "CPU",
}


@cache
def hardware_table() -> dict[str, Any]:
    """``snapbuild/data/hardware.yaml``."""
    return _data("hardware.yaml")


# --------------------------------------------------------------------------- verdicts


@dataclass
class Verdicts:
    """Reasons gathered for one engine; a failed one also lands in ``blockers``."""

    reasons: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def ok(self, reason: str) -> None:
        self.reasons.append(reason)

    def fail(self, reason: str) -> None:
        self.reasons.append(reason)
        self.blockers.append(reason)

    def check(self, passed: bool, reason: str) -> None:
        (self.ok if passed else self.fail)(reason)


def _vendor_name(vendor: str | None) -> str:
    names: dict[str, str] = hardware_table()["vendor-names"]
    return names.get(vendor or "", vendor or "unknown")


SIMD_LADDER = ("avx512f", "avx2", "avx", "sse4_2", "sse4_1", "ssse3", "sse3", "sse2")
ARM_LADDER = ("sve2", "sve", "i8mm", "asimddp", "asimd")


def _best_simd(flags: frozenset[str], ladder: Sequence[str]) -> str:
    best = next((f for f in ladder if f in flags), None)
    return best.upper() if best else "none of " + ", ".join(f.upper() for f in ladder[:3])


def _check_flags(
    v: Verdicts, wanted: Sequence[str], have: frozenset[str], ladder: Sequence[str], what: str
) -> None:
    names = ", ".join(f.upper() for f in wanted)
    if not have:
        v.fail(f"needs {names}: {what} flags unknown (no CPU facts); not risking SIGILL")
        return
    missing = [f for f in wanted if f not in have]
    if missing:
        lacking = ", ".join(f.upper() for f in missing)
        v.fail(f"needs {lacking}: CPU has {_best_simd(have, ladder)} only")
    else:
        v.ok(f"CPU has {names}")


def _cc(value: str) -> tuple[int, ...]:
    return tuple(int(p) for p in value.split(".") if p.isdigit())


def _gpu_label(gpu: GpuFacts) -> str:
    name = gpu.name or "GPU"
    slot = f" at {gpu.pci.slot}" if gpu.pci else ""
    return f"{_vendor_name(gpu.vendor)} {name}{slot}"


def _gpu_key(gpu: GpuFacts) -> str | None:
    return f"{gpu.pci.vendor_id}:{gpu.pci.device_id}".lower() if gpu.pci else None


def _is_integrated(gpu: GpuFacts) -> bool:
    return bool(gpu.integrated) or gpu.unified_memory


def _gpu_problems(gpu: GpuFacts, req: GpuRequirement, vendors: Sequence[str]) -> list[str]:
    """Why ``gpu`` cannot serve ``req`` (empty: it can). Unknown facts count as problems
    only where a wrong guess fails at run time (gfx target)."""
    out: list[str] = []
    if vendors and gpu.vendor not in vendors:
        return [f"is {_vendor_name(gpu.vendor)}, not {'/'.join(map(_vendor_name, vendors))}"]
    if req.vendor and gpu.vendor != req.vendor:
        return [f"is {_vendor_name(gpu.vendor)}, not {_vendor_name(req.vendor)}"]
    too_old = _unsupported(gpu)
    if too_old:
        return [f"is too old for GPU runtimes: {too_old}"]
    if req.device_ids:
        dev = gpu.pci.device_id.lower() if gpu.pci else None
        if dev not in {d.lower() for d in req.device_ids}:
            out.append(f"device {dev or 'unknown'} is not among {', '.join(req.device_ids)}")
    if req.integrated is not None and _is_integrated(gpu) != req.integrated:
        out.append("is integrated" if _is_integrated(gpu) else "is discrete")
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
        vram = _vram(gpu)[0]
        if vram is not None and vram < req.min_vram:
            out.append(f"has {gib(vram)} VRAM < {gib(req.min_vram)} the engine requires")
    return out


def _unsupported(gpu: GpuFacts) -> str | None:
    table: dict[str, list[dict[str, str]]] = hardware_table()["unsupported-gpus"]
    dev = gpu.pci.device_id.lower() if gpu.pci else ""
    for entry in table.get(gpu.vendor, []):
        if dev.startswith(entry["prefix"]):
            return entry["reason"]
    return None


def _vram(gpu: GpuFacts) -> tuple[int | None, str]:
    """(bytes, where the figure came from) for a GPU's own memory."""
    if gpu.vram_free is not None:
        return gpu.vram_free, "free"
    if gpu.vram is not None:
        return gpu.vram, ""
    key = _gpu_key(gpu)
    nominal: dict[str, int] = hardware_table()["nominal-vram"]
    if key in nominal:
        return int(
            nominal[key]
        ), f"nominal for device {key.split(':')[1]}, not read from the driver"
    return None, ""


# --------------------------------------------------------------------------- device choice


@dataclass
class Device:
    """The device an engine would run on."""

    cls: DeviceClass
    accel: str  # gpu-discrete, gpu-integrated, npu, cpu
    vendor: str | None
    slot: str | None = None
    gpu: GpuFacts | None = None
    npu: NpuFacts | None = None


def _gpu_requirements(engine: Engine) -> list[GpuRequirement]:
    return [c.gpu for c in engine.requires.all_of if c.gpu is not None]


def _pick_gpu(host: HostProfile, engine: Engine, entry: RuntimeEntry, v: Verdicts) -> Device | None:
    reqs = _gpu_requirements(engine) or [GpuRequirement()]
    vendors = entry.gpu_vendors
    wanted = "/".join(_vendor_name(x) for x in vendors) if vendors else "a"
    if not host.gpus:
        extra = "".join(
            f"; {_vendor_name(d.vendor)} {d.name or 'display'} is not a compute GPU ({d.reason})"
            for d in host.displays
        )
        v.fail(f"needs an {wanted} GPU ({entry.id}): none found{extra}")
        return None
    usable: list[GpuFacts] = []
    rejected: list[str] = []
    for gpu in host.gpus:
        problems = [p for r in reqs for p in _gpu_problems(gpu, r, vendors)]
        if problems:
            rejected.append(f"{_gpu_label(gpu)} {'; '.join(dict.fromkeys(problems))}")
        else:
            usable.append(gpu)
    if not usable:
        v.fail(f"needs an {wanted} GPU ({entry.id}): " + "; ".join(rejected))
        return None
    # discrete before integrated, then the most memory, then PCI slot for determinism
    gpu = sorted(
        usable,
        key=lambda g: (_is_integrated(g), -(_vram(g)[0] or 0), g.pci.slot if g.pci else ""),
    )[0]
    v.ok(f"{_gpu_label(gpu)} ({'integrated' if _is_integrated(gpu) else 'discrete'})")
    for req in reqs:
        if req.min_compute_capability:
            if gpu.compute_capability:
                v.ok(f"compute capability {gpu.compute_capability} ≥ {req.min_compute_capability}")
            else:
                v.ok(
                    f"compute capability unknown (NVML unavailable): assumed "
                    f"≥ {req.min_compute_capability}"
                )
                v.warnings.append(f"{engine.name}: compute capability of {_gpu_label(gpu)} unknown")
        if req.gfx_targets:
            v.ok(f"gfx target {gpu.gfx} is supported")
    return Device(
        cls="gpu",
        accel="gpu-integrated" if _is_integrated(gpu) else "gpu-discrete",
        vendor=gpu.vendor,
        slot=gpu.pci.slot if gpu.pci else None,
        gpu=gpu,
    )


def _pick_npu(host: HostProfile, engine: Engine, entry: RuntimeEntry, v: Verdicts) -> Device | None:
    reqs = [c.npu for c in engine.requires.all_of if c.npu is not None]
    vendors = set(entry.npu_vendors) | {r.vendor for r in reqs}
    wanted = "/".join(sorted(_vendor_name(x) for x in vendors)) or "an"
    candidates = [n for n in host.npus if not vendors or n.vendor in vendors]
    if not candidates:
        v.fail(f"needs an {wanted} NPU ({entry.id}): none found")
        return None
    hints: dict[str, str] = hardware_table()["npu-driver-hints"]
    problems: list[str] = []
    for npu in candidates:
        label = npu.name or f"{_vendor_name(npu.vendor)} NPU"
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


def _cpu_device(host: HostProfile, v: Verdicts) -> Device:
    vendor = host.cpus[0].vendor if host.cpus else None
    return Device(cls="cpu", accel="cpu", vendor=vendor)


# --------------------------------------------------------------------------- conditions


def _condition(v: Verdicts, cond: Condition, host: HostProfile) -> bool:
    """Judge one non-device condition; True when it holds. GPU/NPU ones are judged by the
    device choice (they must hold for one and the same device)."""
    before = len(v.blockers)
    arch = host.architecture
    if cond.architecture is not None:
        allowed = ", ".join(cond.architecture)
        if arch is None:
            v.fail(f"needs {allowed}: architecture unknown (no CPU facts)")
        else:
            v.check(
                arch in cond.architecture,
                f"runs on {allowed}: machine is {arch}"
                if arch in cond.architecture
                else f"needs {allowed}: machine is {arch}",
            )
    elif cond.cpu_flags is not None:
        if arch is not None and arch not in ("amd64", "i386"):
            v.fail(
                f"needs x86 flags {', '.join(f.upper() for f in cond.cpu_flags)}: machine is {arch}"
            )
        else:
            _check_flags(v, cond.cpu_flags, host.cpu_flags, SIMD_LADDER, "CPU")
    elif cond.arm64_features is not None:
        have = frozenset(f for c in host.cpus for f in (*c.arm64_features, *c.flags))
        if arch is not None and arch != "arm64":
            v.fail(f"needs arm64 features {', '.join(cond.arm64_features)}: machine is {arch}")
        else:
            _check_flags(v, cond.arm64_features, have, ARM_LADDER, "arm64")
    elif cond.x86_64_level is not None:
        level = host.x86_64_level
        if level is None:
            v.fail(f"needs {cond.x86_64_level}: CPU level unknown; not risking SIGILL")
        else:
            v.check(
                level >= cond.x86_64_level,
                f"CPU is {level} ≥ {cond.x86_64_level}"
                if level >= cond.x86_64_level
                else f"needs {cond.x86_64_level}: CPU is {level}",
            )
    return len(v.blockers) == before


def _any_of(v: Verdicts, conds: Sequence[Condition], host: HostProfile) -> None:
    if not conds:
        return
    trial = Verdicts()
    for cond in conds:
        if cond.gpu is not None or cond.npu is not None:
            ok = _device_condition_holds(cond, host)
            trial.check(ok, f"{'a matching GPU' if cond.gpu else 'a matching NPU'}")
        else:
            _condition(trial, cond, host)
    if len(trial.blockers) < len(conds):
        v.ok("one of: " + "; ".join(r for r in trial.reasons if r not in trial.blockers))
    else:
        v.fail("needs one of: " + "; ".join(trial.blockers))


def _device_condition_holds(cond: Condition, host: HostProfile) -> bool:
    if cond.gpu is not None:
        return any(not _gpu_problems(g, cond.gpu, ()) for g in host.gpus)
    if cond.npu is not None:
        return any(n.vendor == cond.npu.vendor and n.driver_loaded for n in host.npus)
    return False


# --------------------------------------------------------------------------- memory


def _pool(device: Device, host: HostProfile) -> tuple[str, int | None, str, bool]:
    """(pool, available bytes, label, exact) of the memory the engine draws from. ``exact`` is
    False when the figure is an upper bound (total RAM because available was not reported)."""
    if device.accel == "gpu-discrete" and device.gpu is not None:
        vram, source = _vram(device.gpu)
        label = f"{_vendor_name(device.vendor)} VRAM"
        if source:
            label += f" ({source})"
        return "vram", vram, label, True
    if host.memory.available is None and host.memory.total is not None:
        return "ram", host.memory.total, "RAM total (available not reported)", False
    return "ram", host.memory.available, "RAM available", True


@dataclass
class Fit:
    memory: MemoryEstimate | None
    context: int | None
    verified: bool
    text_only: bool = False  # the image encoder did not fit beside the model: images dropped


def _shape(manifest: Manifest, engine: Engine) -> ModelShape | None:
    artifact = manifest.artifact(engine.artifact)
    return shape_from_facts(manifest.model, artifact.size)


def _contexts(manifest: Manifest, engine: Engine) -> tuple[int, int]:
    top = engine.context_size or manifest.default_context_size
    if manifest.model.context_length:
        top = min(top, manifest.model.context_length)
    low = min(engine.min_context_size or manifest.min_context_size, top)
    return top, low


def _required(
    shape: ModelShape | None,
    weights: int,
    ctx: int,
    family: str,
    device: str = "cpu",
    pool: str = "ram",
    extra_compute: int = 0,
) -> MemoryEstimate:
    """The peak (a prompt that fills the context) on ``device``, plus the headroom;
    ``extra_compute``: an image encoder's working set (snapbuild.vision)."""
    if shape is None:  # facts too thin: weights and overhead only, said in the reasons
        host = host_overhead(None, family) if pool == "ram" else 0
        overhead = host + device_overhead(device)
        total, kv, compute = weights + overhead, 0, 0
    else:
        where: Pool = "vram" if pool == "vram" else "ram"
        b = plan_memory(shape, ctx, family, device=device, pool=where).peak
        total, kv, compute, overhead = b.total, b.kv_cache, b.compute, b.overhead
    total, compute = total + extra_compute, compute + extra_compute
    return MemoryEstimate(
        weights=weights,
        kv_cache=kv,
        compute=compute,
        overhead=overhead,
        required=with_headroom(total),
        available=None,
        pool="ram",
        context_size=ctx,
    )


def _fit(
    v: Verdicts,
    manifest: Manifest,
    engine: Engine,
    entry: RuntimeEntry,
    device: Device,
    host: HostProfile,
) -> Fit:
    shape = _shape(manifest, engine)
    projector = projector_bytes(manifest, engine)
    weights = manifest.artifact(engine.artifact).size + projector
    vision = vision_compute_bytes(manifest, engine)
    top, low = _contexts(manifest, engine)
    pool, available, label, exact = _pool(device, host)

    dev = runtime_device(entry.id)

    def need(ctx: int) -> MemoryEstimate:
        est = _required(shape, weights, ctx, entry.family, dev, pool, vision)
        return est.model_copy(update={"available": available, "pool": pool})

    text_only = False
    if (projector or vision) and available is not None and need(low).required > available:
        with_images = weights, vision
        weights, vision = weights - projector, 0
        if need(low).required <= available:  # the text model fits without the encoder
            v.ok(
                f"images: projector and image encoder ({gib(projector + with_images[1])}) do "
                f"not fit beside the model in {gib(available)}: serves text only"
            )
            text_only, projector = True, 0
        else:
            weights, vision = with_images
    if shape is None:
        v.ok("model facts lack layers/heads: KV cache not estimated (weights only)")
    if projector or vision:
        v.ok(
            f"images: projector {gib(projector)} counted in the weights, image encoder "
            f"{gib(vision)} in the compute"
        )
    best = need(top)
    if available is None:
        what = "VRAM" if pool == "vram" else "RAM"
        why = "NVML unavailable or no driver answer" if pool == "vram" else "meminfo unreadable"
        v.ok(
            f"{_vendor_name(device.vendor) + ' ' if pool == 'vram' else ''}{what} unknown "
            f"({why}): {gib(best.required)} needed at context {top}, fit not verified"
        )
        v.warnings.append(
            f"{engine.name}: {what} of the {device.cls.upper()} unknown; "
            f"{gib(best.required)} needed, fit not verified"
        )
        return Fit(best, top, verified=False, text_only=text_only)
    if best.required <= available:
        v.ok(
            f"{label} {gib(available)} ≥ {gib(best.required)} needed at context {top} "
            f"(full-context peak, margin {gib(available - best.required)})"
        )
        if not exact:
            v.warnings.append(
                f"{engine.name}: available RAM not reported; fit checked against total"
            )
        return Fit(best, top, verified=exact, text_only=text_only)
    floor = need(low)
    if floor.required > available:
        v.fail(
            f"{label} {gib(available)} < {gib(floor.required)} needed even at the minimum "
            f"context {low} ({gib(best.required)} at {top})"
        )
        return Fit(floor, None, verified=True)
    ctx = _largest_fitting(low, top, lambda c: need(c).required <= available)
    chosen = need(ctx)
    v.ok(
        f"{label} {gib(available)} ≥ {gib(chosen.required)} needed at context {ctx} "
        f"(full-context peak, margin {gib(available - chosen.required)}; "
        f"stepped down from {top}: {gib(best.required)} needed there)"
    )
    return Fit(chosen, ctx, verified=exact, text_only=text_only)


def _largest_fitting(low: int, high: int, fits: Callable[[int], bool]) -> int:
    """The largest context in [low, high] that fits, on a 256-token grid above ``low``."""
    step = 256
    lo, hi = 0, (high - low) // step  # fits(low + lo*step) is True
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(low + mid * step):
            lo = mid
        else:
            hi = mid - 1
    return low + lo * step


# --------------------------------------------------------------------------- speed


def _bandwidth(device: Device, host: HostProfile) -> float:
    bw = hardware_table()["bandwidth"]
    if device.accel == "gpu-discrete" and device.gpu is not None:
        key = _gpu_key(device.gpu)
        by_device: dict[str, float] = bw["gpu-by-device"]
        if key in by_device:
            return float(by_device[key])
        by_vendor: dict[str, float] = bw["gpu-by-vendor"]
        return float(by_vendor.get(device.vendor or "other", by_vendor["other"]))
    return _system_bandwidth(host)


def _system_bandwidth(host: HostProfile) -> float:
    bw = hardware_table()["bandwidth"]
    if host.cpus and host.cpus[0].arm64_implementer and host.cpus[0].arm64_part:
        key = f"{host.cpus[0].arm64_implementer}:{host.cpus[0].arm64_part}".lower()
        parts: dict[str, float] = bw["cpu-by-arm64-part"]
        if key in parts:
            return float(parts[key])
    by_arch: dict[str, float] = bw["cpu-by-architecture"]
    return float(by_arch.get(host.architecture or "", 10.0e9))


def _tokens_per_second(
    entry: RuntimeEntry, device: Device, host: HostProfile, weights: int
) -> float:
    table: dict[str, dict[str, float]] = hardware_table()["runtime-efficiency"]
    per_vendor = table.get(entry.id, {"default": 0.5})
    eff = per_vendor.get(device.vendor or "", per_vendor["default"])
    rate = _bandwidth(device, host) * float(eff) / max(weights, 1)
    return round(rate, 1)


# --------------------------------------------------------------------------- judging


@dataclass
class Judged:
    candidate: Candidate
    accel: str
    verified: bool
    index: int
    warnings: list[str]
    missing: tuple[str, ...] = ()  # inputs the model takes that this engine will not serve

    def key(self) -> tuple[Any, ...]:
        classes: list[str] = hardware_table()["accelerator-classes"]
        cap = float(hardware_table()["sufficient-tokens-per-second"])
        tps = min(self.candidate.estimated_tokens_per_second or 0.0, cap)
        return (
            len(self.missing),
            classes.index(self.accel),
            0 if self.verified else 1,
            -tps,
            # a verified fit lets quality win; an unverified one prefers the smaller footprint
            -quantization_bits(self.candidate.quantization)
            if self.verified
            else (self.candidate.memory.required if self.candidate.memory else 0),
            -(self.candidate.estimated_tokens_per_second or 0.0),
            self.index,
        )


def judge(
    manifest: Manifest, engine: Engine, index: int, host: HostProfile, include_experimental: bool
) -> Judged:
    """Every verdict for one engine on one host."""
    entry = load_catalog().get(engine.runtime)
    artifact = manifest.artifact(engine.artifact)
    v = Verdicts()
    if entry is None:  # the loader rejects this; a hand-built Manifest may still carry it
        v.fail(f"runtime {engine.runtime!r} is not in the runtime catalog")
        return _judged(engine, artifact.quantization, "cpu", None, v, index, None, 0.0)
    if engine.experimental and not include_experimental:
        v.fail("experimental: considered only with --experimental")
    arch = host.architecture
    if arch is None:
        v.fail("architecture unknown (no CPU facts)")
    else:
        v.check(
            arch in manifest.architectures,
            f"snap built for {arch}"
            if arch in manifest.architectures
            else f"snap not built for {arch} (only {', '.join(manifest.architectures)})",
        )
    for cond in engine.requires.all_of:
        if cond.gpu is None and cond.npu is None:
            _condition(v, cond, host)
    _any_of(v, engine.requires.any_of, host)
    if entry.device == "gpu":
        device = _pick_gpu(host, engine, entry, v)
    elif entry.device == "npu":
        device = _pick_npu(host, engine, entry, v)
    else:
        device = _cpu_device(host, v)
    if device is None:
        return _judged(engine, artifact.quantization, entry.device, None, v, index, entry, 0.0)
    fit = _fit(v, manifest, engine, entry, device, host)
    served = tuple(i for i in manifest.engine_inputs(engine) if i in entry.inputs)
    if fit.text_only:
        served = tuple(i for i in served if i != "vision")
    missing = missing_inputs(manifest, engine, served)
    if missing and not fit.text_only:
        v.ok(
            f"serves text only: {entry.id} here cannot read images"
            if "vision" in manifest.engine_inputs(engine)
            else "serves text only: this engine loads no image encoder"
        )
    tps = _tokens_per_second(entry, device, host, artifact.size)
    compatible = not v.blockers
    serving = None
    shape = _shape(manifest, engine)
    if compatible and entry.serving == "llama-server" and shape and fit.context:
        available = fit.memory.available if fit.memory else None
        pool = fit.memory.pool if fit.memory else "ram"
        serving = plan(
            shape,
            fit.context,
            runtime=entry.id,
            device=device.cls,
            available=available,
            pool=pool,
        )
    cand = Candidate(
        engine=engine.name,
        runtime=entry.id,
        device=device.cls,
        vendor=device.vendor,
        quantization=artifact.quantization,
        artifact=artifact.name,
        experimental=engine.experimental,
        compatible=compatible,
        reasons=tuple(v.reasons),
        blockers=tuple(v.blockers),
        memory=fit.memory,
        context_size=fit.context if compatible else None,
        estimated_tokens_per_second=tps,
        slot=device.slot,
        serving=serving,
        inputs=served or ("text",),
        batching=plan_batching(entry.id, fit.memory, fit.context) if compatible else None,
    )
    return Judged(cand, device.accel, fit.verified, index, v.warnings, missing)


def _judged(
    engine: Engine,
    quant: str,
    device: str,
    vendor: str | None,
    v: Verdicts,
    index: int,
    entry: RuntimeEntry | None,
    tps: float,
) -> Judged:
    cand = Candidate(
        engine=engine.name,
        runtime=entry.id if entry else engine.runtime,
        device=device if device in ("cpu", "gpu", "npu") else "cpu",  # type: ignore[arg-type]
        vendor=vendor,
        quantization=quant,
        artifact=engine.artifact,
        experimental=engine.experimental,
        compatible=False,
        reasons=tuple(v.reasons),
        blockers=tuple(v.blockers),
    )
    return Judged(cand, "cpu", False, index, v.warnings)


def _why(winner: Judged, runner: Judged | None, rejected: int, forced: bool) -> str:
    w = winner.candidate
    if forced:
        return f"{w.engine} was asked for by name and is compatible"
    if runner is None:
        return f"{w.engine} is the only compatible engine ({rejected} rejected)"
    r = runner.candidate
    wk, rk = winner.key(), runner.key()
    if wk[0] != rk[0]:
        return (
            f"{w.engine} reads images, runner-up {r.engine} would serve this vision model text "
            "only: serving every input decides first"
        )
    wk, rk = wk[1:], rk[1:]
    cap = float(hardware_table()["sufficient-tokens-per-second"])
    if wk[0] != rk[0]:
        return (
            f"{w.engine} runs on the {ACCEL_LABELS[winner.accel]}, runner-up {r.engine} on the "
            f"{ACCEL_LABELS[runner.accel]}: accelerator class decides first"
        )
    if wk[1] != rk[1]:
        return f"{w.engine}'s memory fit is verified; runner-up {r.engine}'s is not"
    if wk[2] != rk[2]:
        return (
            f"{w.engine} decodes ~{w.estimated_tokens_per_second:g} tokens/s, runner-up "
            f"{r.engine} ~{r.estimated_tokens_per_second:g} (same accelerator class)"
        )
    if wk[3] != rk[3] and not winner.verified:
        return (
            f"{w.engine} and runner-up {r.engine} both reach the sufficient {cap:g} tokens/s "
            f"and their fit is unverified; {w.engine} needs less memory"
        )
    if wk[3] != rk[3]:
        return (
            f"{w.engine} and runner-up {r.engine} both reach the sufficient "
            f"{cap:g} tokens/s; {w.quantization} keeps more precision than {r.quantization}"
        )
    if wk[4] != rk[4]:
        return (
            f"{w.engine} and runner-up {r.engine} both exceed the sufficient {cap:g} tokens/s "
            f"with {w.quantization}; {w.engine} is faster still "
            f"(~{w.estimated_tokens_per_second:g} vs ~{r.estimated_tokens_per_second:g} tokens/s)"
        )
    return (
        f"{w.engine} ties with runner-up {r.engine} on class, fit, speed and quantization; "
        "it comes first in the manifest"
    )


def select(
    manifest: Manifest,
    host: HostProfile,
    *,
    include_experimental: bool = False,
    engine: str | None = None,
) -> Decision:
    """Judge every engine of ``manifest`` on ``host``, rank the compatible ones, pick one.

    ``engine`` forces that engine (it is selected only if compatible). Pure: reads nothing
    but its arguments and the packaged data tables.
    """
    if engine is not None and manifest.engine(engine) is None:
        raise UsageError(
            f"{manifest.name} has no engine named {engine!r}",
            resolution="use one of: " + ", ".join(e.name for e in manifest.engines),
        )
    judged = [
        judge(manifest, e, i, host, include_experimental or engine == e.name)
        for i, e in enumerate(manifest.engines)
    ]
    ranked = sorted((j for j in judged if j.candidate.compatible), key=Judged.key)
    rank_of = {j.candidate.engine: n for n, j in enumerate(ranked, start=1)}
    candidates = tuple(
        j.candidate.model_copy(update={"rank": rank_of.get(j.candidate.engine)})
        for j in sorted(judged, key=lambda j: (rank_of.get(j.candidate.engine, math.inf), j.index))
    )
    winner: Judged | None
    if engine is not None:
        winner = next((j for j in ranked if j.candidate.engine == engine), None)
        runner = None
    else:
        winner = ranked[0] if ranked else None
        runner = ranked[1] if len(ranked) > 1 else None
    selected = None
    warnings = list(host.warnings)
    if winner is not None:
        c = winner.candidate
        assert c.context_size is not None
        selected = Selected(
            engine=c.engine,
            runtime=c.runtime,
            device=c.device,
            vendor=c.vendor,
            context_size=c.context_size,
            artifact=c.artifact,
            quantization=c.quantization,
            slot=c.slot,
            batching=c.batching,
            why=_why(winner, runner, len(judged) - len(ranked), engine is not None),
            serving=c.serving,
            inputs=c.inputs,
        )
        warnings += [ProbeWarning(source="selector", message=m) for m in winner.warnings]
        if any(f.placeholder for f in manifest.artifact(c.artifact).files):
            warnings.append(
                ProbeWarning(
                    source="selector",
                    message=f"artifact {c.artifact} has placeholder URL, size or checksum",
                    resolution="run `snapbuild fetch` to record verified values in the manifest",
                )
            )
    return Decision(
        model=manifest.name,
        selected=selected,
        candidates=candidates,
        warnings=tuple(warnings),
        precedence=PRECEDENCE,
    )
