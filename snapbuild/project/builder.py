"""``snapbuild make``: a manifest in, a complete snapcraft project out.

The public face of :mod:`snapbuild.project`. :func:`build_project` is pure (plan, snapcraft.yaml
data and file texts, nothing written) so tests, ``snapbuild try`` and the CI matrix can use it;
:func:`make` writes the result into a directory it is allowed to replace. :func:`snap_yaml`
turns snapcraft.yaml data into the ``meta/snap.yaml`` snapcraft would write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtimes.catalog import RuntimeCatalog, load_catalog
from snapbuild.fetch.local import stage_local_files
from snapbuild.manifest.loader import load_manifest, manifest_to_data
from snapbuild.manifest.model import Manifest
from snapbuild.paths import project_root
from snapbuild.project.naming import check_names
from snapbuild.project.plan import BuildPlan, plan_build
from snapbuild.project.render import (
    SOURCE_DIR,
    marker_text,
    prepare_output,
    project_files,
    vendor_source,
    write_output,
)
from snapbuild.project.snapcraft_yaml import project_data
from snapbuild.project.snapyaml import component_yaml, snap_yaml

__all__ = [
    "BuiltProject",
    "build_project",
    "component_yaml",
    "make",
    "snap_yaml",
    "summary_data",
    "summary_text",
]


@dataclass(frozen=True)
class BuiltProject:
    """A rendered project: what was decided, the snapcraft.yaml data, and every file's text."""

    manifest: Manifest
    plan: BuildPlan
    project: dict[str, Any]
    files: dict[str, str]
    vendored_source: bool
    out: Path | None = None


def build_project(
    manifest: Manifest,
    *,
    engines: Sequence[str] = (),
    variant: str | None = None,
    architectures: Sequence[str] = (),
    options: Sequence[str] = (),
    source: str | None = None,
    grade: str | None = None,
    sideload: bool = False,
    catalog: RuntimeCatalog | None = None,
) -> BuiltProject:
    """Render a project in memory. ``source`` None means: vendor this project's source."""
    catalog = catalog or load_catalog()
    plan = plan_build(
        manifest,
        catalog,
        engines=engines,
        variant=variant,
        architectures=architectures,
        options=options,
    )
    project = project_data(
        manifest, plan, catalog, source=source or SOURCE_DIR, grade=grade, sideload=sideload
    )
    check_names(project)
    files = project_files(plan, project, filtered_manifest(manifest, plan), catalog)
    return BuiltProject(manifest, plan, project, files, vendored_source=source is None)


def filtered_manifest(manifest: Manifest, plan: BuildPlan) -> dict[str, Any]:
    """The manifest as data, holding only the engines (and their artifacts, and a ladder's
    options) this snap carries."""
    data = manifest_to_data(manifest)
    kept = {e.name for e in plan.engines}
    used = {c.artifact for c in plan.components if c.artifact}  # weights and projectors
    data["engines"] = [e for e in data["engines"] if e["name"] in kept]
    data["artifacts"] = [a for a in data["artifacts"] if a["name"] in used]
    if "options" in data:
        carried = {e.option for e in plan.engines}
        data["options"] = [o for o in data["options"] if o["name"] in carried]
    return data


def make(
    model: str | Manifest,
    out: Path | None = None,
    *,
    force: bool = False,
    **options: Any,
) -> BuiltProject:
    """Render ``model`` (a manifest name, path or object) into ``out`` (default ``<name>-snap``)."""
    manifest = model if isinstance(model, Manifest) else load_manifest(model)
    built = build_project(manifest, **options)
    target = out if out is not None else Path(f"{manifest.name}-snap")
    prepare_output(target, force=force)
    write_output(target, built.files, marker_text(built.plan, built.files, built.vendored_source))
    if built.vendored_source:
        vendor_source(project_root(), target)
    stage_local_files(manifest, {c.artifact for c in built.plan.components if c.artifact}, target)
    return BuiltProject(
        built.manifest, built.plan, built.project, built.files, built.vendored_source, target
    )


def _size(n: int | None) -> str:
    return "built from source" if n is None else f"{n / 1000**3:.2f} GB"


def summary_data(built: BuiltProject) -> dict[str, Any]:
    """The summary as JSON-ready data (``snapbuild make --json``)."""
    plan = built.plan
    return {
        "model": plan.model,
        "version": plan.version,
        "variant": plan.variant,
        "output": str(built.out) if built.out else None,
        "architectures": list(plan.architectures),
        "grade": built.project["grade"],
        "engines": [e.to_data() for e in plan.engines],
        "components": [{"name": c.name, "kind": c.kind, "size": c.size} for c in plan.components],
        "left-out": [lo.to_data() for lo in plan.left_out],
        "notes": list(plan.notes),
    }


def summary_text(built: BuiltProject) -> str:
    """What ``snapbuild make`` prints: engines, components and sizes, what each engine needs."""
    plan = built.plan
    where = f" -> {built.out}" if built.out else ""
    lines = [
        f"{plan.model} {plan.version}{where}",
        f"  variant {plan.variant}, {', '.join(plan.architectures)}, grade "
        f"{built.project['grade']}",
        "Engines:",
    ]
    named = [(f"{e.option}/{e.name}" if e.option else e.name, e) for e in plan.engines]
    width = max(len(name) for name, _ in named)
    for name, e in named:
        needs = "; ".join([*e.needs, *(f"interface {i}" for i in e.interfaces)]) or "nothing"
        flag = " (experimental)" if e.experimental else ""
        lines.append(f"  {name:<{width}}  {e.runtime} + {e.artifact}{flag}")
        lines.append(f"  {'':<{width}}  needs: {needs}")
    lines.append("Components:")
    cwidth = max(len(c.name) for c in plan.components)
    for c in plan.components:
        lines.append(f"  {c.name:<{cwidth}}  {c.kind:<8}  {_size(c.size)}")
    if plan.joins:
        lines.append("Split files (joined at install time):")
        lines += [f"  {j.artifact}/{j.path}: {len(j.pieces)} pieces" for j in plan.joins]
    if plan.left_out:
        lines.append("Left out:")
        lines += [f"  {lo.engine}: {lo.reason}" for lo in plan.left_out]
    if plan.notes:
        lines.append("Notes:")
        lines += [f"  {n}" for n in plan.notes]
    return "\n".join(lines)
