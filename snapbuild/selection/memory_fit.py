"""Whether the model fits the memory its device draws from, and at which context.

The selector plans for the peak (a prompt that fills the whole context) plus headroom, because a
model that fits at steady state and is OOM-killed by the first long prompt is worse than a
smaller context. When the default context does not fit it steps down, on a 256-token grid, to
the largest that does, never below the manifest's minimum. An image encoder that does not fit
beside the model is dropped (the engine serves text only) before the engine is rejected.
Unknown memory is accepted with a warning and marked unverified, which the ranking uses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from hwprobe.profile import HostProfile
from runtimes.catalog import RuntimeEntry
from snapbuild.estimate.common import host_overhead, with_headroom
from snapbuild.estimate.llama import device_overhead, runtime_device
from snapbuild.estimate.memory import Pool, plan_memory
from snapbuild.estimate.shape import ModelShape, model_shape
from snapbuild.manifest.model import Engine, Manifest
from snapbuild.selection.decision import MemoryEstimate
from snapbuild.selection.devices import Device, vram
from snapbuild.selection.hardware import HardwareTable
from snapbuild.selection.verdicts import Verdicts, gib
from snapbuild.selection.vision import projector_bytes, vision_compute_bytes


def _pool(
    device: Device, host: HostProfile, hw: HardwareTable
) -> tuple[str, int | None, str, bool]:
    """(pool, available bytes, label, exact) of the memory the engine draws from. ``exact`` is
    False when the figure is an upper bound (total RAM because available was not reported)."""
    if device.vulkan is not None:  # a software Vulkan device (forced only): what it reports
        return "vram", device.vulkan.memory, f"{device.vulkan.name} device memory", True
    if device.accel == "gpu-discrete" and device.gpu is not None:
        have, source = vram(device.gpu, hw)
        label = f"{hw.vendor_name(device.vendor)} VRAM"
        if source:
            label += f" ({source})"
        return "vram", have, label, True
    if host.memory.available is None and host.memory.total is not None:
        return "ram", host.memory.total, "RAM total (available not reported)", False
    return "ram", host.memory.available, "RAM available", True


@dataclass(frozen=True)
class Fit:
    """What the memory check found: the estimate at the chosen context, and how sure it is."""

    memory: MemoryEstimate | None
    context: int | None
    verified: bool
    text_only: bool = False  # the image encoder did not fit beside the model: images dropped


def _contexts(manifest: Manifest, engine: Engine) -> tuple[int, int]:
    top = engine.context_size or manifest.default_context_size
    if manifest.model.context_length:
        top = min(top, manifest.model.context_length)
    low = min(engine.min_context_size or manifest.min_context_size, top)
    return top, low


@lru_cache(maxsize=8192)
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
    ``extra_compute``: an image encoder's working set (snapbuild.selection.vision). A pure
    function of the model, never of the host, so it is cached: a fleet plan asks the same
    questions of every host and of every what-if (a ladder's five sizes many times over)."""
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


def fit_memory(
    v: Verdicts,
    manifest: Manifest,
    engine: Engine,
    entry: RuntimeEntry,
    device: Device,
    host: HostProfile,
    hw: HardwareTable,
) -> Fit:
    """The estimate at the largest useful context that fits ``device``'s memory on ``host``
    (``hw``: nominal VRAM and vendor names), with every step said in ``v``."""
    shape = model_shape(manifest, engine)
    projector = projector_bytes(manifest, engine)
    weights = manifest.weights(engine).size + projector
    vision = vision_compute_bytes(manifest, engine)
    top, low = _contexts(manifest, engine)
    pool, available, label, exact = _pool(device, host, hw)

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
            f"{hw.vendor_name(device.vendor) + ' ' if pool == 'vram' else ''}{what} unknown "
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
