"""The snapcraft.yaml of a plan, as plain Python data.

Building the project as data (and serializing it with ``yaml.safe_dump``) is what makes a
hostile manifest harmless: a title holding a newline, a colon or ``---`` is one YAML string, it
cannot add or remove a key. The fixed parts come from ``templates/snap/skeleton.yaml``; the
runtime parts come from the catalog's ``build`` recipes.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from runtimes.catalog import NativeBuild, PythonBuild, RuntimeCatalog
from snapbuild.manifest.model import Manifest
from snapbuild.manifest.spdx import license_problem
from snapbuild.paths import templates_dir
from snapbuild.project.packing import ComponentPlan, Piece, download_name
from snapbuild.project.plan import BuildPlan
from snapbuild.project.requirements import serve_requirements
from snapcommon.errors import UsageError

# core24's python3; the python plugin installs packages into this venv directory.
PYTHON_SITE_PACKAGES = "lib/python3.12/site-packages"
# Where an installed runtime component keeps its Python packages (the snaps side reads this).
COMPONENT_SITE_PACKAGES = "lib/python3/site-packages"
SUMMARY_LIMIT = 78
GRADES = ("stable", "devel")
# The local source of the python parts that only install pinned python-packages: snapcraft's
# python plugin requires a `source`, and this directory (written by make) holds no project.
RUNTIME_SOURCE_DIR = "snapbuild-runtime"
DOC_SOURCE_DIR = "snapbuild-doc"
LINKS = ("website", "source-code", "issues", "contact")
# snapd loads the intel-npu-driver snap's user-mode driver from the npu-libs content target.
NPU_LIBRARY_PATH = "$SNAP/usr/lib/npu-libs-2404"
# What a runtime component must not ship (`prime: [-...]` of its parts): the cmake install's
# development files (headers, CMake and pkg-config files: nothing is built against a
# component), and what creating the python part's venv leaves besides its site-packages (the
# interpreter link, pip and its scripts, activate scripts, pyvenv.cfg, the empty
# lib/python3.12 the site-packages were organized out of). The loader reads usr/bin,
# usr/lib and the site-packages (runtimes/component_tree.py, snapbuild/components.yaml).
NATIVE_LEFTOVERS = ("usr/include", "usr/lib/cmake", "usr/lib/pkgconfig")
VENV_LEFTOVERS = (
    "bin",
    "include",
    "lib64",
    "lib/python3.12",
    "pyvenv.cfg",
    f"{COMPONENT_SITE_PACKAGES}/pip",
    f"{COMPONENT_SITE_PACKAGES}/pip-*.dist-info",
)


def snap_license(text: str) -> str | None:
    """``text`` when snapd accepts it as a licence (an SPDX expression of the identifiers in
    its list, snapbuild/data/snapd_licenses.yaml), else None: the key is left out.

    snapd refuses to pack a snap whose licence it does not know ("Gemma"); such terms go to
    usr/share/doc/<snap>/ instead, as Canonical's snaps do.
    """
    return text if license_problem(text) is None else None


@cache
def skeleton(path: Path) -> dict[str, Any]:
    """The fixed parts of every project (cached; callers get a deep copy)."""
    with path.open(encoding="utf-8") as fh:
        data: dict[str, Any] = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return data


def project_data(
    manifest: Manifest,
    plan: BuildPlan,
    catalog: RuntimeCatalog,
    *,
    source: str,
    grade: str | None = None,
    sideload: bool = False,
) -> dict[str, Any]:
    """snapcraft.yaml for ``plan`` as data, ready for ``yaml.safe_dump``."""
    if manifest.base != "core24":
        raise UsageError(
            f"{manifest.name!r} asks for base {manifest.base}, but the builder emits core24 "
            "projects (components and the GPU/NPU content interfaces need it)",
            resolution="set `base: core24` in the manifest",
        )
    fixed = copy.deepcopy(skeleton(templates_dir() / "snap" / "skeleton.yaml"))
    data: dict[str, Any] = {
        "name": manifest.name,
        "title": manifest.title,
        "version": manifest.version,
        "summary": manifest.summary,
        "description": manifest.description,
    }
    licence = snap_license(manifest.license)
    if licence is not None:
        data["license"] = licence
    data.update({link: getattr(manifest, link.replace("-", "_")) for link in LINKS})
    data = {k: v for k, v in data.items() if v is not None}
    data.update(
        {
            "base": fixed.pop("base"),
            "confinement": fixed.pop("confinement"),
            "grade": _grade(manifest, plan, grade),
            "compression": fixed.pop("compression"),
            "assumes": fixed.pop("assumes"),
            "platforms": {a: {"build-on": [a], "build-for": [a]} for a in plan.architectures},
        }
    )
    repositories = _package_repositories(plan, catalog)
    if repositories:
        data["package-repositories"] = repositories
    data["environment"] = fixed.pop("environment")
    device_plugs = _device_plugs(plan)
    plug_defs = {
        p: dict(catalog.plug_definitions[p]) for p in device_plugs if p in catalog.plug_definitions
    }
    if plug_defs:
        data["plugs"] = plug_defs
    data["slots"] = fixed.pop("slots")  # the discovery document, for consumer snaps
    extensions = _extensions(plan, catalog)
    data["apps"] = _apps(manifest.name, fixed["apps"], device_plugs, extensions, sideload)
    data["hooks"] = _hooks(fixed["hooks"], device_plugs)
    data["components"] = {c.name: _component(manifest, plan, c) for c in plan.components}
    data["parts"] = _parts(manifest.name, plan, catalog, fixed["parts"], source)
    return data


def _package_repositories(plan: BuildPlan, catalog: RuntimeCatalog) -> list[dict[str, Any]]:
    """The extra apt repositories the kept runtimes' packages come from (each listed once)."""
    out: list[dict[str, Any]] = []
    for comp in plan.components:
        entry = catalog.get(comp.runtimes[0]) if comp.kind == "runtime" else None
        native = entry.build.native if entry and entry.build else None
        for repo in native.package_repositories if native else ():
            if repo not in out:
                out.append(copy.deepcopy(repo))
    return out


def _extensions(plan: BuildPlan, catalog: RuntimeCatalog) -> list[str]:
    """snapcraft extensions the kept runtimes need (``gpu`` for GPU runtimes), in order."""
    found = (catalog.get(e.runtime) for e in plan.engines)
    return list(dict.fromkeys(x for entry in found if entry for x in entry.extensions))


def _grade(manifest: Manifest, plan: BuildPlan, grade: str | None) -> str:
    if grade is not None:
        if grade not in GRADES:
            raise UsageError(f"grade {grade!r} is not stable or devel")
        return grade
    placeholder = any(
        f.placeholder
        for a in manifest.artifacts
        for f in a.files
        if a.name in {c.artifact for c in plan.components if c.artifact}
    )
    experimental = any(e.experimental for e in plan.engines)
    return "devel" if placeholder or experimental else "stable"


def _device_plugs(plan: BuildPlan) -> list[str]:
    """Interfaces the kept engines' devices need, in first-use order."""
    return list(dict.fromkeys(i for e in plan.engines for i in e.interfaces))


def _apps(
    snap: str,
    fixed: dict[str, Any],
    device_plugs: list[str],
    extensions: list[str],
    sideload: bool,
) -> dict[str, Any]:
    cli = fixed["cli"]
    cli["plugs"] = cli["plugs"] + device_plugs + (["home"] if sideload else [])
    server = fixed["server"]
    server["plugs"] = server["plugs"] + [p for p in device_plugs if p not in server["plugs"]]
    for app in (cli, server):
        if extensions:
            app["extensions"] = list(extensions)
        if "npu-libs" in device_plugs:
            # the NPU user-mode driver comes from the npu-libs content snap
            app["environment"] = {"LD_LIBRARY_PATH": f"$LD_LIBRARY_PATH:{NPU_LIBRARY_PATH}"}
    return {snap: cli, "server": server}


def _hooks(fixed: dict[str, Any], device_plugs: list[str]) -> dict[str, Any]:
    hooks = {}
    for name, hook in fixed.items():
        if "plugs" in hook:
            hook = {**hook, "plugs": hook["plugs"] + device_plugs}
        hooks[name] = hook
    return hooks


def _fit(text: str, limit: int = SUMMARY_LIMIT) -> str:
    """One line of at most ``limit`` characters (summaries are single short lines)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3].rstrip() + "..."


def _component(manifest: Manifest, plan: BuildPlan, comp: ComponentPlan) -> dict[str, Any]:
    users = list(dict.fromkeys(e.name for e in plan.engines if comp.name in e.components))
    if comp.kind == "runtime":
        labels = ", ".join(comp.runtimes)
        summary = _fit(f"{labels} runtime")
        description = f"The {labels} runtime build. Used by engines: {', '.join(users)}."
    else:
        artifact = manifest.artifact(comp.artifact or "")
        siblings = [c.name for c in plan.components if c.artifact == comp.artifact]
        part = (
            f" (part {siblings.index(comp.name) + 1} of {len(siblings)})"
            if len(siblings) > 1
            else ""
        )
        what = "image encoder (projector)" if artifact.role == "projector" else "weights"
        option = manifest.option(artifact.option) if artifact.option else None
        title = (option.title or f"{manifest.title} {option.name}") if option else manifest.title
        summary = _fit(f"{artifact.format} {artifact.quantization} {what}{part} of {title}")
        description = (
            f"Model {what} {artifact.name} ({artifact.format}, {artifact.quantization}), "
            f"{comp.size} bytes. Used by engines: {', '.join(users)}."
        )
    return {"type": "standard", "summary": summary, "description": description}


def _parts(
    snap: str, plan: BuildPlan, catalog: RuntimeCatalog, fixed: dict[str, Any], source: str
) -> dict[str, Any]:
    parts: dict[str, Any] = {
        "snapbuild": {
            "source": source,
            **fixed["snapbuild"],
            "python-packages": list(serve_requirements()),
        }
    }
    parts["snapbuild-data"] = fixed["snapbuild-data"]
    parts["snapbuild-doc"] = {**fixed["snapbuild-doc"], "organize": {"*": doc_dir(snap) + "/"}}
    for comp in plan.components:
        if comp.kind == "runtime":
            parts.update(_runtime_parts(comp, catalog))
    parts.update(_artifact_parts(plan))
    return parts


def doc_dir(snap: str) -> str:
    """Where the snap's licence notice lands in the prime tree."""
    return f"usr/share/doc/{snap}"


def _into(component: str) -> str:
    return f"(component/{component})"


def _runtime_parts(comp: ComponentPlan, catalog: RuntimeCatalog) -> dict[str, Any]:
    entry = catalog.get(comp.runtimes[0])
    assert entry is not None
    recipe = entry.build
    if recipe is None or (recipe.native is None and recipe.python is None):
        raise UsageError(
            f"runtime {entry.id!r} has no build recipe in the runtime catalog",
            resolution="add a `build` entry for it to runtimes/catalog.yaml",
        )
    parts: dict[str, Any] = {}
    if recipe.native is not None:
        parts[f"runtime-{comp.name}"] = _native_part(comp.name, recipe.native)
    if recipe.python is not None:
        after = [f"runtime-{comp.name}"] if recipe.native is not None else []
        parts[f"runtime-{comp.name}-python"] = _python_part(comp.name, recipe.python, after)
    return parts


def _native_part(component: str, native: NativeBuild) -> dict[str, Any]:
    part: dict[str, Any] = {
        "plugin": "cmake",
        "source": native.source,
        "source-commit": native.source_commit,
        **({"source-depth": native.source_depth} if native.source_depth else {}),
        "cmake-parameters": list(native.cmake_parameters),
    }
    _packages(part, native.build_packages, native.stage_packages)
    if native.remove_after_install:
        removals = " ".join(f'"$CRAFT_PART_INSTALL/{path}"' for path in native.remove_after_install)
        part["override-build"] = f"craftctl default\nrm -f {removals}\n"
    part["organize"] = {"*": f"{_into(component)}/"}
    part["prime"] = _without(component, NATIVE_LEFTOVERS)
    return part


def _without(component: str, paths: tuple[str, ...]) -> list[str]:
    """A `prime` fileset keeping everything of the part but ``paths`` of ``component``."""
    return [f"-{_into(component)}/{path}" for path in paths]


def _python_part(component: str, python: PythonBuild, after: list[str]) -> dict[str, Any]:
    part: dict[str, Any] = {
        "plugin": "python",
        "source": RUNTIME_SOURCE_DIR,
        "python-packages": list(python.python_packages),
    }
    if python.build_environment:
        part["build-environment"] = [{k: v} for k, v in python.build_environment.items()]
    _packages(part, python.build_packages, python.stage_packages)
    if after:
        part["after"] = after
    # site-packages first (explicit keys are organized before globs), then the rest of the venv.
    part["organize"] = {
        PYTHON_SITE_PACKAGES: f"{_into(component)}/{COMPONENT_SITE_PACKAGES}",
        "*": f"{_into(component)}/",
    }
    part["prime"] = _without(component, VENV_LEFTOVERS)
    return part


def _packages(part: dict[str, Any], build: tuple[str, ...], stage: tuple[str, ...]) -> None:
    if build:
        part["build-packages"] = list(build)
    if stage:
        part["stage-packages"] = list(stage)


def _artifact_parts(plan: BuildPlan) -> dict[str, Any]:
    """One download part per whole file or declared shard, organized into its component."""
    return {
        _part_name(piece): _download_part(piece)
        for comp in plan.components
        for piece in comp.pieces
    }


def _part_name(piece: Piece) -> str:
    """``artifact-<artifact>-<file number>[-<shard number>]``: names never carry file paths."""
    suffix = f"-{piece.index:02d}" if piece.kind == "shard" else ""
    return f"artifact-{piece.artifact}-{piece.file_index}{suffix}"


def _download_part(piece: Piece) -> dict[str, Any]:
    name = download_name(piece.url, f"{piece.artifact}/{piece.path}")
    return {
        "plugin": "dump",
        "source": piece.url,
        "source-type": "file",
        "source-checksum": f"sha256/{piece.sha256}",
        "organize": {name: f"{_into(piece.component)}/{piece.path}"},
    }
