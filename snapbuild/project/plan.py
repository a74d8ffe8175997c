"""What goes into one snap: the engines kept, their components, and how big weights are split.

A plan is pure data derived from a manifest, the runtime catalog and the user's choices
(``--engines``, ``--variant``, ``--arch``, ``--options``). Rendering, the summary, the CI matrix
and the install-time engine data all read the same plan, so they cannot disagree about which
component holds what. A model ladder's engines are planned per option (one single-model view
each, :mod:`snapbuild.manifest.ladder`): each (option, engine) needs the runtime's component
and that option's weights in the engine's quantization, so the snap installs one size only.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from runtimes.catalog import RuntimeCatalog, RuntimeEntry, Variant
from snapbuild.manifest.ladder import views
from snapbuild.manifest.model import (
    Condition,
    Engine,
    Manifest,
)
from snapbuild.project.packing import ComponentPlan, JoinPlan, artifact_components, plan_joins
from snapcommon.errors import ManifestError, UsageError
from snapcommon.model import KebabModel

# one engine as it runs one option: the manifest it is resolved in (a ladder's option view, or
# the single model) and the engine with its artifact
Pair = tuple[Manifest, Engine]

ALL_VARIANT = "all"


class EnginePlan(KebabModel):
    """An engine kept in the snap and the components it needs installed to run."""

    name: str
    runtime: str
    device: str
    vendors: tuple[str, ...]
    artifact: str
    components: tuple[str, ...]
    interfaces: tuple[str, ...]
    needs: tuple[str, ...]  # its requirements, as sentences
    experimental: bool = False
    option: str | None = Field(default=None, exclude_if=lambda v: v is None)  # a ladder's size


class LeftOut(KebabModel):
    """An engine of the manifest that this snap does not carry, and why."""

    engine: str
    reason: str


class BuildPlan(KebabModel):
    """Everything the builder decided for one snap."""

    model: str
    version: str
    variant: str
    architectures: tuple[str, ...]
    engines: tuple[EnginePlan, ...]
    components: tuple[ComponentPlan, ...]
    joins: tuple[JoinPlan, ...] = ()
    left_out: tuple[LeftOut, ...] = ()
    notes: tuple[str, ...] = ()

    def component(self, name: str) -> ComponentPlan:
        """The component called ``name`` (every engine's components exist)."""
        return next(c for c in self.components if c.name == name)


def plan_build(
    manifest: Manifest,
    catalog: RuntimeCatalog,
    *,
    engines: Sequence[str] = (),
    variant: str | None = None,
    architectures: Sequence[str] = (),
    options: Sequence[str] = (),
) -> BuildPlan:
    """Decide the engines, components and shards of one snap (pure); ``options``: the ladder's
    model options to carry (none given: all)."""
    arches = _architectures(manifest, architectures)
    runtimes = {e.name: _runtime(catalog, e) for e in manifest.engines}
    chosen = _by_engines(manifest, engines)
    chosen = _by_variant(catalog, variant, chosen, runtimes, explicit=bool(engines))
    kept, left_out = _by_architecture(chosen, runtimes, arches, explicit=bool(engines))
    if not kept:
        raise UsageError(
            f"no engine of {manifest.name!r} is left to build",
            details="\n".join(f"{lo.engine}: {lo.reason}" for lo in left_out) or None,
            resolution="choose other --engines, --variant or --arch",
        )
    pairs = _pairs(manifest, {e.name for e in kept}, options)
    artifacts = artifact_components(pairs)
    runtime_components = _runtime_components(kept, runtimes, {c.name for c in artifacts})
    engine_plans = tuple(_engine_plan(v, e, runtimes[e.name], artifacts) for v, e in pairs)
    return BuildPlan(
        model=manifest.name,
        version=manifest.version,
        variant=variant or (ALL_VARIANT if not engines else "custom"),
        architectures=arches,
        engines=engine_plans,
        components=runtime_components + artifacts,
        joins=plan_joins(manifest, artifacts),
        left_out=tuple(left_out),
        notes=_notes(manifest, pairs),
    )


def _pairs(manifest: Manifest, kept: set[str], options: Sequence[str]) -> list[Pair]:
    """Each kept engine as it runs each carried option (a single model: as it is)."""
    names = [o.name for o in manifest.options]
    unknown = [o for o in options if o not in names]
    if unknown or (options and not manifest.is_ladder):
        raise UsageError(
            f"{manifest.name!r} has no model option {', '.join(map(repr, unknown or options))}",
            details=f"options: {', '.join(names)}" if names else "it holds one model",
            resolution="pass --options with names from that list (comma-separated)",
        )
    carried = [v for v in views(manifest) if not options or v.view_of in options]
    return [(v, e) for v in carried for e in v.engines if e.name in kept]


def _architectures(manifest: Manifest, requested: Sequence[str]) -> tuple[str, ...]:
    if not requested:
        return tuple(manifest.architectures)
    unknown = [a for a in requested if a not in manifest.architectures]
    if unknown:
        raise UsageError(
            f"architecture {', '.join(unknown)} is not one of {manifest.name!r}'s",
            details=f"the manifest lists: {', '.join(manifest.architectures)}",
            resolution="pass --arch with architectures from that list",
        )
    return tuple(dict.fromkeys(requested))


def _runtime(catalog: RuntimeCatalog, engine: Engine) -> RuntimeEntry:
    entry = catalog.get(engine.runtime)
    if entry is None:
        raise ManifestError(
            f"engine {engine.name!r} names runtime {engine.runtime!r}, which the catalog lacks",
            details=f"known runtimes: {', '.join(catalog.ids)}",
            resolution="use a runtime id from runtimes/catalog.yaml",
        )
    return entry


def _by_engines(manifest: Manifest, names: Sequence[str]) -> list[Engine]:
    if not names:
        return list(manifest.engines)
    unknown = [n for n in names if manifest.engine(n) is None]
    if unknown:
        raise UsageError(
            f"unknown engine {', '.join(map(repr, unknown))} for {manifest.name!r}",
            details=f"engines: {', '.join(e.name for e in manifest.engines)}",
            resolution="pass --engines with names from that list (comma-separated)",
        )
    return [e for e in manifest.engines if e.name in names]


def _by_variant(
    catalog: RuntimeCatalog,
    name: str | None,
    engines: list[Engine],
    runtimes: dict[str, RuntimeEntry],
    *,
    explicit: bool,
) -> list[Engine]:
    if name is None or name == ALL_VARIANT:
        return engines
    variant = catalog.variant(name)
    if variant is None:
        known = ", ".join([ALL_VARIANT, *(v.name for v in catalog.variants)])
        raise UsageError(
            f"unknown variant {name!r}",
            details=f"variants: {known}",
            resolution="pass --variant with a name from that list",
        )
    kept = [e for e in engines if in_variant(e, runtimes[e.name], variant)]
    if explicit and len(kept) != len(engines):
        outside = [e.name for e in engines if e not in kept]
        raise UsageError(
            f"engine {', '.join(outside)} is not part of variant {name!r}",
            resolution="drop --variant or choose engines of that variant",
        )
    return kept


def engine_vendors(engine: Engine, runtime: RuntimeEntry) -> tuple[str, ...]:
    """Vendors the engine can drive: its runtime's, narrowed by the engine's own GPU/NPU needs."""
    required = {
        (c.gpu.vendor if c.gpu else c.npu.vendor if c.npu else None)
        for c in (*engine.requires.all_of, *engine.requires.any_of)
    } - {None}
    vendors = runtime.vendors
    return tuple(v for v in vendors if not required or v in required)


def in_variant(engine: Engine, runtime: RuntimeEntry, variant: Variant) -> bool:
    """Whether ``engine`` belongs to ``variant`` (see the catalog's ``variants`` table)."""
    if runtime.device == "cpu":
        return "cpu" in variant.devices or variant.cpu_fallback
    if runtime.device not in variant.devices:
        return False
    return not variant.vendors or bool(set(engine_vendors(engine, runtime)) & set(variant.vendors))


def engine_architectures(engine: Engine) -> set[str] | None:
    """The architectures the engine's requirements allow, or None when they do not say."""
    allowed: set[str] | None = None
    for cond in engine.requires.all_of:
        if cond.architecture is not None:
            allowed = (
                set(cond.architecture) if allowed is None else allowed & set(cond.architecture)
            )
    return allowed


def architecture_problem(engine: Engine, runtime: RuntimeEntry, arches: Sequence[str]) -> str:
    """Why ``engine`` cannot be in a snap built for all of ``arches`` ("" when it can).

    A snapcraft project builds the same parts for every platform, so a runtime that does not
    build on one requested architecture keeps its engines out; an engine that only runs on other
    architectures is useless in this snap.
    """
    unbuildable = [a for a in arches if not runtime.supports(a)]
    if unbuildable:
        return (
            f"runtime {runtime.id} does not build for {', '.join(unbuildable)}; "
            f"build it separately with --arch {','.join(runtime.architectures)}"
        )
    allowed = engine_architectures(engine)
    if allowed is not None and not allowed & set(arches):
        return f"runs only on {', '.join(sorted(allowed))}"
    return ""


def _by_architecture(
    engines: list[Engine],
    runtimes: dict[str, RuntimeEntry],
    arches: tuple[str, ...],
    *,
    explicit: bool,
) -> tuple[list[Engine], list[LeftOut]]:
    kept: list[Engine] = []
    left: list[LeftOut] = []
    for engine in engines:
        reason = architecture_problem(engine, runtimes[engine.name], arches)
        if not reason:
            kept.append(engine)
        elif explicit:
            raise UsageError(f"engine {engine.name!r} cannot be built here: {reason}")
        else:
            left.append(LeftOut(engine=engine.name, reason=reason))
    return kept, left


def _runtime_components(
    engines: list[Engine], runtimes: dict[str, RuntimeEntry], artifact_names: set[str]
) -> tuple[ComponentPlan, ...]:
    by_component: dict[str, list[str]] = {}
    for engine in engines:
        entry = runtimes[engine.name]
        ids = by_component.setdefault(entry.component, [])
        if entry.id not in ids:
            ids.append(entry.id)
    clash = sorted(set(by_component) & artifact_names)
    if clash:
        raise ManifestError(
            f"artifact name {', '.join(clash)} is also a runtime component's name",
            resolution="rename the artifact: component names must be unique in a snap",
        )
    return tuple(
        ComponentPlan(name=name, kind="runtime", runtimes=tuple(ids))
        for name, ids in by_component.items()
    )


def _engine_plan(
    view: Manifest, engine: Engine, runtime: RuntimeEntry, artifacts: tuple[ComponentPlan, ...]
) -> EnginePlan:
    wanted = [a.name for a in view.engine_artifacts(engine)]  # the weights, then any projector
    weights = tuple(c.name for name in wanted for c in artifacts if c.artifact == name)
    return EnginePlan(
        name=engine.name,
        runtime=runtime.id,
        device=runtime.device,
        vendors=engine_vendors(engine, runtime),
        artifact=wanted[0],
        components=(runtime.component, *weights),
        interfaces=runtime.interfaces,
        needs=_needs(engine),
        experimental=engine.experimental,
        option=view.view_of,
    )


def _needs(engine: Engine) -> tuple[str, ...]:
    needs = [describe(c) for c in engine.requires.all_of]
    if engine.requires.any_of:
        needs.append("one of: " + "; ".join(describe(c) for c in engine.requires.any_of))
    return tuple(needs)


def describe(cond: Condition) -> str:
    """One requirement as a short phrase (for the summary)."""
    if cond.architecture is not None:
        return f"architecture {' or '.join(cond.architecture)}"
    if cond.cpu_flags is not None:
        return f"CPU flags {', '.join(cond.cpu_flags)}"
    if cond.x86_64_level is not None:
        return f"{cond.x86_64_level} or later"
    if cond.arm64_features is not None:
        return f"arm64 features {', '.join(cond.arm64_features)}"
    if cond.gpu is not None:
        gpu = cond.gpu
        words = [gpu.vendor or "any", "GPU"]
        if gpu.min_vram:
            words.append(f"with {gpu.min_vram / 1000**3:.1f} GB VRAM")
        if gpu.min_compute_capability:
            words.append(f"compute capability {gpu.min_compute_capability}+")
        if gpu.device_ids:
            words.append(f"({len(gpu.device_ids)} device ids)")
        if gpu.gfx_targets:
            words.append(f"({', '.join(gpu.gfx_targets)})")
        return " ".join(words)
    assert cond.npu is not None
    return f"{cond.npu.vendor} NPU" + (" with its driver loaded" if cond.npu.driver_loaded else "")


def _notes(manifest: Manifest, pairs: list[Pair]) -> tuple[str, ...]:
    notes = []
    for name in dict.fromkeys(a.name for v, e in pairs for a in v.engine_artifacts(e)):
        files = manifest.artifact(name).files
        placeholders = sum(f.placeholder for f in files)
        if placeholders:
            notes.append(
                f"{name}: {placeholders} of {len(files)} files are placeholders (checksums not "
                "verified upstream); the build fails to fetch them until "
                f"`snapbuild fetch {manifest.name} --record` records their size and sha256 "
                "(trust on first use) or they are filled in by hand"
            )
    return tuple(notes)
