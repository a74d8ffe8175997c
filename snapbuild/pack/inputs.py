"""The parts' sources, offline: what can be built here, and from which local files.

A rendered project downloads two kinds of things besides Python packages and Debian packages:
the llama.cpp source (a git clone of GitHub) and the model's weights (Hugging Face). Neither is
reachable from every build machine, and both already exist here:

- the llama.cpp tree is the one :mod:`snapbuild.recipes.native` builds from the recipe: the same
  source (the tree the pinned binding vendors at the recipe's commit), the same cmake plugin
  commands (``build_steps``, compared with craft-parts' ``CMakePlugin`` by a test), the same
  ``override-build`` removal. The cmake part becomes a ``dump`` part of that tree, keeping its
  stage-packages, organize, override-build and prime filter. A private copy in the work dir is
  what the part reads: craft-parts links a local source's files into the part's trees, and an
  edit made there in place must never reach the shared cache (the copy is checked and renewed
  on every pack).
- a weight file's part keeps its URL and checksum exactly as rendered; craft-parts' own file
  cache is seeded with the local copy (the manifest's ``local:`` package file, or the copy
  ``snapbuild fetch`` verified), and craft-parts still checks the sha256 when it pulls.

What cannot be had here is left out, component by component, and said: a native runtime whose
build-packages this machine lacks (CUDA, ROCm), weights whose checksum is a placeholder or
which were never fetched, declared shards.
"""

from __future__ import annotations

import filecmp
import os
import shutil
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from runtimes.catalog import RuntimeCatalog
from snapbuild.fetch.artifacts import located_file
from snapbuild.manifest.model import Manifest
from snapbuild.pack.driver import installed_versions
from snapbuild.project.packing import ComponentPlan
from snapbuild.project.plan import BuildPlan
from snapbuild.recipes.native import STAMP, build_component, built_component

# part keys that say where the source comes from, or configure the cmake plugin
SOURCE_KEYS = frozenset(
    {"source", "source-type", "source-commit", "source-depth", "source-tag", "source-branch",
     "source-checksum", "source-submodules", "source-subdir"}
)  # fmt: skip


@dataclass(frozen=True)
class Skipped:
    """Something the project declares that this pack does not build, and why."""

    name: str  # a component, or an architecture
    kind: Literal["component", "architecture"]
    reason: str
    resolution: str | None = None

    def to_data(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "reason": self.reason,
            "resolution": self.resolution,
        }


@dataclass
class Inputs:
    """What the driver changes in the rendered parts, and what it leaves out."""

    replace_parts: dict[str, dict[str, Any]] = field(default_factory=dict)
    drop_parts: list[str] = field(default_factory=list)
    seed_files: list[dict[str, str]] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def parts_by_component(parts: Mapping[str, Any]) -> dict[str, list[str]]:
    """Component name -> the parts that organize files into it (``(component/<name>)/...``)."""
    found: dict[str, list[str]] = {}
    for name, part in parts.items():
        for target in (part.get("organize") or {}).values():
            if str(target).startswith("(component/"):
                component = str(target)[len("(component/") :].split(")", 1)[0]
                found.setdefault(component, [])
                if name not in found[component]:
                    found[component].append(name)
    return found


def prepare_inputs(
    manifest: Manifest,
    plan: BuildPlan,
    parts: Mapping[str, Any],
    catalog: RuntimeCatalog,
    inputs_dir: Path,
    progress: Callable[[str], None] | None = None,
    *,
    build_native: bool = True,
) -> Inputs:
    """Decide each component's fate and prepare the local sources of those built here;
    ``build_native`` False leaves out a native runtime whose recipe was never built."""
    inputs = Inputs()
    owners = parts_by_component(parts)
    for comp in plan.components:
        if comp.kind == "runtime":
            reason = _runtime_inputs(
                comp, catalog, parts, owners, inputs_dir, inputs, progress, build_native
            )
        else:
            reason = _artifact_inputs(manifest, plan, comp, inputs)
        if reason is not None:
            inputs.skipped.append(reason)
            inputs.drop_parts += owners.get(comp.name, [])
    return inputs


def _runtime_inputs(
    comp: ComponentPlan,
    catalog: RuntimeCatalog,
    parts: Mapping[str, Any],
    owners: Mapping[str, list[str]],
    inputs_dir: Path,
    inputs: Inputs,
    progress: Callable[[str], None] | None,
    build_native: bool,
) -> Skipped | None:
    entry = catalog.get(comp.runtimes[0])
    native = entry.build.native if entry and entry.build else None
    if native is None:
        return None  # Python packages only: pip fetches them as in any build
    _, missing = installed_versions(list(native.build_packages))
    if missing:
        where = " (from the recipe's package repositories)" if native.package_repositories else ""
        return Skipped(
            comp.name,
            "component",
            f"its native runtime cannot be built on this machine: build-packages "
            f"{', '.join(missing)} are not installed",
            f"install {' '.join(missing)}{where}, or build this variant with snapcraft on a "
            "machine that has them",
        )
    tree = built_component(comp.runtimes[0])
    if tree is None and not build_native:
        return Skipped(
            comp.name,
            "component",
            "its native runtime was never built here (a build takes tens of minutes)",
            f"python -m snapbuild.recipes.native {comp.runtimes[0]}, or pack without "
            "--no-native-build",
        )
    tree = tree or build_component(comp.runtimes[0], progress=progress)
    copy = inputs_dir / comp.name
    sync_tree(tree, copy, ignore={STAMP})
    for name in owners.get(comp.name, []):
        part = parts[name]
        if part.get("plugin") == "cmake":
            inputs.replace_parts[name] = served_from_tree(part, copy)
            inputs.notes.append(
                f"{name}: the cmake part is served from the recipe's build {tree.name} "
                f"(snapbuild.recipes.native; a private copy in {copy})"
            )
    return None


def served_from_tree(part: Mapping[str, Any], tree: Path) -> dict[str, Any]:
    """The cmake ``part`` as a ``dump`` of an already built install tree: every key but its
    source and the cmake plugin's options kept (stage-packages, organize, override-build,
    prime, build-packages)."""
    kept = {k: v for k, v in part.items() if k not in SOURCE_KEYS and not k.startswith("cmake-")}
    return {**kept, "plugin": "dump", "source": str(tree), "source-type": "local"}


def _artifact_inputs(
    manifest: Manifest, plan: BuildPlan, comp: ComponentPlan, inputs: Inputs
) -> Skipped | None:
    assert comp.artifact is not None
    artifact = manifest.artifact(comp.artifact)
    engine = next((e.name for e in plan.engines if comp.name in e.components), None)
    fetch = f"snapbuild fetch {manifest.name}" + (f" --engine {engine}" if engine else "")
    seeds = []
    for piece in comp.pieces:
        file = next(f for f in artifact.files if f.path == piece.file)
        label = f"{artifact.name}/{piece.file}"
        if piece.placeholder:
            return Skipped(
                comp.name,
                "component",
                f"{label}: its size and sha256 in the manifest are placeholders",
                f"{fetch} --record",
            )
        if piece.kind == "shard":
            return Skipped(
                comp.name,
                "component",
                f"{label} is declared in shards, which only the build downloads",
                "build it with snapcraft where the shards' URLs are reachable",
            )
        if file.url is None:
            continue  # local-only: `snapbuild make` copied it into the project
        found = located_file(manifest, artifact, file)
        if found is None:
            return Skipped(comp.name, "component", f"{label} is not on this machine", fetch)
        seeds.append({"checksum": f"sha256/{piece.sha256}", "file": str(found)})
    inputs.seed_files += seeds
    return None


def sync_tree(source: Path, dest: Path, ignore: Collection[str] = ()) -> int:
    """Make ``dest`` hold exactly ``source``'s files (``ignore``: names left out), touching
    only what differs (same size and bytes: kept as it is), so that craft-parts, which decides
    from modification times whether a local source changed, re-runs only the parts whose files
    did. Files are copied, never linked, and a written file gets the current time. Returns how
    many entries were written or removed."""
    changed = 0
    wanted: set[str] = set()
    for root, dirs, files in os.walk(source):
        dirs[:] = sorted(d for d in dirs if d not in ignore)
        rel_root = Path(root).relative_to(source)
        (dest / rel_root).mkdir(parents=True, exist_ok=True)
        for name in sorted(set(files) | {d for d in dirs if Path(root, d).is_symlink()}):
            if name in ignore:
                continue
            rel = rel_root / name
            wanted.add(rel.as_posix())
            changed += _sync_entry(source / rel, dest / rel)
        wanted.update((rel_root / d).as_posix() for d in dirs)
    for root, dirs, files in os.walk(dest, topdown=False):
        for name in files + dirs:
            path = Path(root, name)
            if path.relative_to(dest).as_posix() not in wanted:
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
                changed += 1
    return changed


def parts_to_clean(
    parts: Mapping[str, Mapping[str, Any]], project: Path, craft_parts_dir: Path
) -> list[str]:
    """The parts whose pulled copy of a local ``source`` holds a file the project's source no
    longer has. craft-parts' update of a local source copies new and newer files but never
    deletes, so a module removed from the checkout (or packed once from another checkout
    sharing this work dir) would stay installed in the snap beside the code that replaced it;
    such a part must be cleaned and pulled again."""
    out = []
    for name, part in parts.items():
        source = str(part.get("source") or "")
        pulled = craft_parts_dir / name / "src"
        if not source or "://" in source or not pulled.is_dir():
            continue
        origin = project / source
        if origin.is_dir() and _has_extra(pulled, origin):
            out.append(name)
    return sorted(out)


def _has_extra(pulled: Path, origin: Path) -> bool:
    for root, dirs, files in os.walk(pulled):
        rel = Path(root).relative_to(pulled)
        for name in files + [d for d in dirs if Path(root, d).is_symlink()]:
            if not os.path.lexists(origin / rel / name):
                return True
        dirs[:] = [d for d in dirs if d != "__pycache__"]
    return False


def _sync_entry(src: Path, dst: Path) -> int:
    if src.is_symlink():
        target = os.readlink(src)
        if dst.is_symlink() and os.readlink(dst) == target:
            return 0
        _remove(dst)
        dst.symlink_to(target)
        return 1
    if dst.is_file() and not dst.is_symlink():
        same_size = dst.stat().st_size == src.stat().st_size
        if same_size and (
            dst.stat().st_mtime_ns == src.stat().st_mtime_ns or filecmp.cmp(src, dst, shallow=False)
        ):
            return 0
    _remove(dst)
    shutil.copyfile(src, dst)  # a new file, written now: newer than any state of craft-parts
    shutil.copymode(src, dst)
    return 1


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
