"""Every verdict for one engine on one host, and the estimate of its decode speed.

The order of the checks is the order of the reasons a user reads: experimental, architecture,
written conditions, device, memory; a failed check does not stop the ones after it, so
``why-not`` lists everything that would have to change, not just the first problem.

Every table is read from the :class:`~snapbuild.selection.tables.SelectionTables` passed in (the
packaged ones by default), never from a loader, so a selection under another catalog or hardware
table is the same pure function of different arguments.
"""

from __future__ import annotations

from typing import Any

from hwprobe.profile import HostProfile
from runtimes.catalog import RuntimeEntry
from snapbuild.estimate.shape import model_shape
from snapbuild.manifest.model import Artifact, Engine, Manifest
from snapbuild.selection.conditions import check_architecture, judge_any_of, judge_condition
from snapbuild.selection.decision import Candidate, DeviceClass, Serving
from snapbuild.selection.devices import Device, cpu_device, gpu_key, pick_gpu, pick_npu
from snapbuild.selection.hardware import HardwareTable
from snapbuild.selection.memory_fit import fit_memory
from snapbuild.selection.ranking import Judged, Rung
from snapbuild.selection.tables import SelectionTables, packaged_tables
from snapbuild.selection.verdicts import Verdicts
from snapbuild.selection.vision import missing_inputs
from snapbuild.serving.batching import plan_batching
from snapbuild.serving.plan import ServingTable, plan


def _bandwidth(device: Device, host: HostProfile, hw: HardwareTable) -> float:
    """Bytes/s the engine's device reads its weights at: a discrete GPU's own memory (the known
    device, else its vendor's typical figure), otherwise the system's."""
    bw = hw.bandwidth
    if device.accel == "gpu-discrete" and device.gpu is not None:
        key = gpu_key(device.gpu)
        if key in bw.gpu_by_device:
            return bw.gpu_by_device[key]
        return bw.gpu_by_vendor.get(device.vendor or "other", bw.gpu_by_vendor["other"])
    return _system_bandwidth(host, hw)


def _system_bandwidth(host: HostProfile, hw: HardwareTable) -> float:
    bw = hw.bandwidth
    if host.cpus and host.cpus[0].arm64_implementer and host.cpus[0].arm64_part:
        key = f"{host.cpus[0].arm64_implementer}:{host.cpus[0].arm64_part}".lower()
        if key in bw.cpu_by_arm64_part:
            return bw.cpu_by_arm64_part[key]
    return bw.cpu_by_architecture.get(host.architecture or "", 10.0e9)


def _tokens_per_second(
    entry: RuntimeEntry, device: Device, host: HostProfile, weights: int, hw: HardwareTable
) -> float:
    """Estimated decode speed: decode is bandwidth-bound, so bandwidth x the runtime's
    efficiency on this vendor / the bytes read per token."""
    per_vendor = hw.runtime_efficiency.get(entry.id, {"default": 0.5})
    eff = per_vendor.get(device.vendor or "", per_vendor["default"])
    return round(_bandwidth(device, host, hw) * eff / max(weights, 1), 1)


def judge(
    manifest: Manifest,
    engine: Engine,
    index: int,
    host: HostProfile,
    include_experimental: bool,
    tables: SelectionTables | None = None,
    rung: Rung | None = None,
) -> Judged:
    """Every verdict for one engine on one host, under ``tables`` (None: the packaged ones).

    ``manifest`` is a single model (a ladder's option view); ``rung`` places that option in its
    ladder (None for a single model), whose serving and batching plans are left to
    :func:`with_plans` (they decide nothing in the ranking, and a ladder plans only the size it
    runs)."""
    tables = tables or packaged_tables()
    hw = tables.hardware
    entry = tables.catalog.get(engine.runtime)
    artifact = manifest.weights(engine)
    v = Verdicts()
    if entry is None:  # the loader rejects this; a hand-built Manifest or catalog may not
        v.fail(f"runtime {engine.runtime!r} is not in the runtime catalog")
        return _rejected(engine, artifact, engine.runtime, "cpu", v, index, hw, rung)
    if engine.experimental and not include_experimental:
        v.fail("experimental: considered only with --experimental")
    check_architecture(
        v,
        host.architecture,
        manifest.architectures,
        unknown="architecture unknown (no CPU facts)",
        passed=f"snap built for {host.architecture}",
        failed=f"snap not built for {host.architecture} (only {', '.join(manifest.architectures)})",
    )
    for cond in engine.requires.all_of:
        if cond.gpu is None and cond.npu is None:
            judge_condition(v, cond, host, hw)
    judge_any_of(v, engine.requires.any_of, host, hw)
    device = _device(host, engine, entry, v, hw)
    if device is None:
        return _rejected(engine, artifact, entry.id, entry.device, v, index, hw, rung)
    fit = fit_memory(v, manifest, engine, entry, device, host, hw)
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
    tps = _tokens_per_second(entry, device, host, artifact.size, hw)
    compatible = not v.blockers
    cand = _candidate(
        engine,
        artifact,
        v,
        entry.id,
        device.cls,
        vendor=device.vendor,
        memory=fit.memory,
        context_size=fit.context if compatible else None,
        estimated_tokens_per_second=tps,
        slot=device.slot,
        inputs=served or ("text",),
        option=rung.name if rung else None,
    )
    if rung is None:
        cand = with_plans(manifest, cand, tables)
    return Judged.under(hw, cand, device.accel, fit.verified, index, v.warnings, missing, rung)


def with_plans(manifest: Manifest, cand: Candidate, tables: SelectionTables) -> Candidate:
    """A compatible candidate with how it serves: llama-server's slots and KV type, or the
    batching plan, in the memory its fit saw (unchanged when incompatible)."""
    engine = manifest.engine(cand.engine)
    entry = tables.catalog.get(cand.runtime)
    if not cand.compatible or engine is None or entry is None:
        return cand
    serving = _serving(manifest, engine, entry, cand, tables.serving)
    batching = plan_batching(entry.id, cand.memory, cand.context_size, tables.batching)
    return cand.model_copy(update={"serving": serving, "batching": batching})


def _device(
    host: HostProfile, engine: Engine, entry: RuntimeEntry, v: Verdicts, hw: HardwareTable
) -> Device | None:
    """The device of the runtime's class the engine would run on (None: none, ``v`` says why)."""
    if entry.device == "gpu":
        return pick_gpu(host, engine, entry, v, hw)
    if entry.device == "npu":
        return pick_npu(host, engine, entry, v, hw)
    return cpu_device(host)


def _serving(
    manifest: Manifest, engine: Engine, entry: RuntimeEntry, cand: Candidate, table: ServingTable
) -> Serving | None:
    """llama-server's slots and KV type in the memory the fit saw (None: another runtime, or
    no shape facts or context to plan with)."""
    shape = model_shape(manifest, engine)
    if entry.serving != "llama-server" or shape is None or not cand.context_size:
        return None
    return plan(
        shape,
        cand.context_size,
        runtime=entry.id,
        device=cand.device,
        available=cand.memory.available if cand.memory else None,
        pool=cand.memory.pool if cand.memory else "ram",
        table=table,
    )


def _candidate(
    engine: Engine, artifact: Artifact, v: Verdicts, runtime: str, device: DeviceClass, **facts: Any
) -> Candidate:
    """The engine's identity and verdicts; ``facts``: what judging found out beyond them."""
    return Candidate(
        engine=engine.name,
        runtime=runtime,
        device=device,
        quantization=artifact.quantization,
        artifact=artifact.name,
        experimental=engine.experimental,
        compatible=not v.blockers,
        reasons=tuple(v.reasons),
        blockers=tuple(v.blockers),
        **facts,
    )


def _rejected(
    engine: Engine,
    artifact: Artifact,
    runtime: str,
    device: str,
    v: Verdicts,
    index: int,
    hw: HardwareTable,
    rung: Rung | None,
) -> Judged:
    """An engine rejected before its memory could be judged (no runtime, no device)."""
    cls: DeviceClass = device if device in ("gpu", "npu") else "cpu"  # type: ignore[assignment]
    cand = _candidate(engine, artifact, v, runtime, cls, option=rung.name if rung else None)
    return Judged.under(hw, cand, "cpu", False, index, v.warnings, (), rung)
