"""The components the stand-in installs from, staged as the Store would deliver them.

Runtime components link the Python packages (and llama.cpp's built tree) installed here;
artifact components hold the weights found in the cache or a local package, laid out as the
builder's packed engine data (``components.yaml``) says, pieces and all, so the snap's daemon
joins and verifies them as on a real install.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from runtimes.catalog import load_catalog
from snapbuild.manifest.ladder import view_for
from snapbuild.manifest.model import Manifest
from snapbuild.project.engine_data import ENGINE_DATA_FILE, artifact_layout, read_engine_data
from snapbuild.trial.sandbox import Trial, TrialError

# Python packages that make up each runtime family's component (what the snap's part stages).
RUNTIME_PACKAGES: dict[str, tuple[str, ...]] = {
    "llama.cpp": ("llama_cpp",),
    "openvino": ("openvino", "openvino_genai", "openvino_tokenizers"),
    "onnxruntime": ("onnxruntime",),
}
COPY_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class Unstaged:
    """A component (or artifact) ``engine`` (running ladder option ``option``) needs that could
    not be staged here, and why."""

    engine: str
    text: str
    option: str | None = None

    def __str__(self) -> str:
        return self.text


def stage_components(
    trial: Trial,
    manifest: Manifest,
    engines: list[tuple[str, str | None]],
    snapcraft: dict[str, Any],
) -> list[Unstaged]:
    """Stage, where the stand-in installs from, every component of ``engines`` available here:
    (engine, ladder option) pairs, the option None for a single model. What is staged is only
    offered: the stand-in installs what the snap's hooks and commands ask for.

    Runtime components link the Python packages installed here; artifact components link the
    weights found in the cache or a local package. Returns what could not be staged.
    """
    from snapbuild.fetch.artifacts import locate

    catalog = load_catalog()
    unavailable: list[Unstaged] = []
    for name, option in engines:
        view = view_for(manifest, option)
        engine = view.engine(name)
        assert engine is not None
        runtime = catalog.get(engine.runtime)
        assert runtime is not None
        site: dict[str, Path] = {}
        for package in RUNTIME_PACKAGES[runtime.family]:
            spec = importlib.util.find_spec(package)
            if spec and spec.submodule_search_locations:
                site[package] = Path(next(iter(spec.submodule_search_locations)))
        native = _native_tree(runtime.family, runtime.component)
        if not site or native is False:
            why = f"{runtime.component} (no {runtime.family} installed here)"
            unavailable.append(Unstaged(name, why, option))
        else:
            comp = _component_dir(trial, runtime.component, snapcraft)
            lib = comp / "lib" / "python3" / "site-packages"
            lib.mkdir(parents=True, exist_ok=True)
            for package, path in site.items():
                _link(lib / package, path)
            if isinstance(native, Path):  # the cmake part's files, where the component has them
                _link(comp / "usr", native / "usr")
        for artifact in view.engine_artifacts(engine):  # the weights and any projector
            found = locate(view, artifact)
            if found is None:
                why = f"{artifact.name} (not in the cache: `snapbuild fetch`)"
                unavailable.append(Unstaged(name, why, option))
                continue
            stage_artifact(trial, view, artifact.name, found, snapcraft)
    return unavailable


def _native_tree(family: str, component: str) -> Path | bool:
    """The built tree of a runtime's cmake part (llama.cpp), True when it has none, False when
    it needs one that this machine has not built (``make install`` builds the CPU one).

    A GPU build that this machine built and linked (``python -m snapbuild.recipes.native
    llama.cpp-vulkan``) is staged as itself on this machine. A trial of a recorded machine
    (SNAPBUILD_HOST_ROOT or SNAPBUILD_HOST_PROFILE) stages the CPU build in a GPU component's
    place, since the recorded GPU is not here: the runtime then says it runs on the CPU.
    """
    if family != "llama.cpp":
        return True
    from hwprobe.replay import HOST_PROFILE_VAR, HOST_ROOT_VAR
    from runtimes.component_tree import ComponentTree, component_root

    replayed = bool(os.environ.get(HOST_ROOT_VAR) or os.environ.get(HOST_PROFILE_VAR))
    root = (None if replayed else component_root(component)) or component_root()
    if root is None or ComponentTree(root).problems():
        return False
    return root


def stage_artifact(
    trial: Trial, manifest: Manifest, artifact: str, found: Path, snapcraft: dict[str, Any]
) -> None:
    """Stage an artifact exactly as the builder's ``components.yaml`` lays it out.

    A file stored whole is linked into its component (GGUF splits land in several); a file the
    builder stores in pieces is cut into ``<file>.part-NN`` at the manifest's shard sizes, each
    in its own component, so the daemon joins and verifies them as on a real install.
    """
    # the primed copy of the project's snapbuild-data/, where the snap reads it ($SNAP/snapbuild)
    data = read_engine_data(trial.prime / "snapbuild" / ENGINE_DATA_FILE)
    lay = artifact_layout(data, manifest, artifact)
    for file in lay.files:
        source = found if found.is_file() else found / file.path
        if not file.joined:
            assert file.component is not None
            _link(_component_dir(trial, file.component, snapcraft) / file.path, source)
            continue
        declared = next(f for f in manifest.artifact(artifact).files if f.path == file.path)
        sizes = [s.size for s in declared.shards]
        if len(sizes) != len(file.pieces) or sum(sizes) != source.stat().st_size:
            raise TrialError(
                f"cannot cut {source} into the pieces the snap stores",
                details=f"{len(file.pieces)} pieces in components.yaml, {len(sizes)} shards of "
                f"{sum(sizes)} bytes in the manifest, the file has {source.stat().st_size}",
                resolution="Fix the manifest's shards (or re-fetch the file), then try again.",
            )
        with source.open("rb") as src:
            for piece, size in zip(file.pieces, sizes, strict=True):
                dest = _component_dir(trial, piece.component, snapcraft) / piece.path
                _copy_bytes(src, dest, size)


def _copy_bytes(src: BinaryIO, dest: Path, size: int) -> None:
    """The next ``size`` bytes of ``src`` into ``dest`` (a piece of a split file)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    left = size
    with dest.open("wb") as out:
        while left > 0:
            chunk = src.read(min(left, COPY_CHUNK))
            if not chunk:
                raise TrialError(f"{src.name} ended {left} bytes short of the piece {dest.name}")
            out.write(chunk)
            left -= len(chunk)


def _component_dir(trial: Trial, name: str, snapcraft: dict[str, Any]) -> Path:
    """A staged component with its meta/component.yaml, as snapcraft would pack it."""
    from snapbuild.project.builder import component_yaml

    comp = trial.staged / name
    meta = comp / "meta" / "component.yaml"
    if not meta.exists():
        meta.parent.mkdir(parents=True, exist_ok=True)
        if name in (snapcraft.get("components") or {}):
            meta.write_text(yaml.safe_dump(component_yaml(snapcraft, name), sort_keys=False))
    return comp


def _link(target: Path, source: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        target.symlink_to(source.resolve())
