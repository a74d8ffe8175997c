"""Build a runtime's native part exactly as its snapcraft recipe says, outside snapcraft.

The recipe in ``runtimes/catalog.yaml`` is what the snap ships, so development machines and CI
build that same recipe instead of a look-alike: same source tree at the pinned commit, same cmake
parameters, and the three steps snapcraft's cmake plugin runs (configure out of tree with the
part's generator, ``cmake --build . -- -jN``, ``DESTDIR=<install> cmake --build . --target
install``). The install directory is then the component's tree, as the part's
``organize: {"*": (component/NAME)/}`` makes it, so the loader can be tested against the real
layout (``usr/lib`` for libraries, ``usr/bin`` for llama-server and the GGML backend modules).

The source comes from the sdist of the llama-cpp-python release the catalog pins: it vendors
llama.cpp at exactly the recipe's ``source-commit`` (a test ties them together), and PyPI is
reachable where git hosts are not. Builds are cached under a key made of the recipe, the source
archive's digest and the machine, so a second ``make install`` or CI run finds the tree ready;
the venv then links to it (``<venv>/lib/snapbuild-native/<component>``), which is where
:func:`runtimes.component_tree.dev_component_root` looks.

Where this machine's apt lacks a recipe's build-package (Debian 12 here: Vulkan headers too old
for the pinned llama.cpp, no CUDA toolkit), :mod:`snapbuild.recipes.toolkits` fetches the stand-in
its table names; ``--define NAME=VALUE`` adds a cmake definition of the build machine's (one CUDA
architecture, say). Both join the cache key and the stamp; the recipe itself is never changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from runtimes.catalog import NativeBuild, RuntimeCatalog, load_catalog
from runtimes.component_tree import LINK_DIR, ComponentTree
from snapbuild.paths import cache_dir
from snapbuild.recipes.keys import (  # tests and callers import these from here too
    GENERATOR,
    STAMP,
    NativeSource,
    build_key,
    built_before,
    built_from,
    machine_inputs,
)
from snapbuild.recipes.toolkits import Prepared, Toolkit, needed, prepare, toolkit_for
from snapcommon.errors import SnapbuildError, UsageError


@dataclass(frozen=True)
class BuildStep:
    """One command of the build, run in the build directory, with the variables it adds."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


def build_steps(
    recipe: NativeBuild, source: Path, install: Path, jobs: int, extra: Sequence[str] = ()
) -> list[BuildStep]:
    """The commands snapcraft's cmake plugin (craft-parts ``CMakePlugin.get_build_commands``)
    writes for the recipe's part: configure ``source`` out of tree with the part's generator and
    ``cmake-parameters``, build with ``jobs`` jobs, install with ``DESTDIR``. A test compares
    them with the plugin's own commands for the rendered part, so the two cannot drift.
    ``extra``: this build machine's own parameters after the recipe's (a toolkit stand-in's,
    ``--define``); none in the snap's build."""
    return [
        BuildStep(("cmake", str(source), "-G", GENERATOR, *recipe.cmake_parameters, *extra)),
        BuildStep(("cmake", "--build", ".", "--", f"-j{jobs}")),
        BuildStep(("cmake", "--build", ".", "--target", "install"), (("DESTDIR", str(install)),)),
    ]


def native_cache() -> Path:
    """$SNAPBUILD_NATIVE_CACHE, else <snapbuild cache>/native."""
    override = os.environ.get("SNAPBUILD_NATIVE_CACHE")
    return Path(override) if override else cache_dir() / "native"


def recipe_for(catalog: RuntimeCatalog, runtime_id: str) -> tuple[str, NativeBuild, str]:
    """(component, native recipe, source archive requirement) of a runtime with a cmake part."""
    entry = catalog.get(runtime_id)
    if entry is None or entry.build is None or entry.build.native is None:
        raise UsageError(
            f"runtime {runtime_id!r} has no native build recipe in the runtime catalog",
            resolution=f"choose one of: {', '.join(_native_ids(catalog))}",
        )
    if not entry.build.native.vendored_by:
        raise UsageError(
            f"runtime {runtime_id!r}: its native recipe names no `vendored-by` source archive, "
            "so the source at the recipe's commit cannot be fetched without git",
            resolution="add `vendored-by: PACKAGE==VERSION` (a PyPI sdist vendoring that commit)",
        )
    return entry.component, entry.build.native, entry.build.native.vendored_by


def _native_ids(catalog: RuntimeCatalog) -> list[str]:
    return [r.id for r in catalog.runtimes if r.build is not None and r.build.native is not None]


def backend_problems(runtime_id: str, install: Path) -> list[str]:
    """What a GPU runtime's tree lacks: its GGML backend module beside llama-server."""
    entry = load_catalog().get(runtime_id)
    if entry is None or entry.offload is None:
        return []
    module = install / "usr" / "bin" / entry.offload.module
    return [] if module.is_file() else [f"{module} (the {entry.offload.backend} backend)"]


def fetch_source(requirement: str, cache: Path) -> NativeSource:
    """The llama.cpp tree that the pinned binding's sdist vendors, unpacked once."""
    sdists = cache / "sdist"
    sdists.mkdir(parents=True, exist_ok=True)
    name, _, version = requirement.partition("==")
    archive = sdists / f"{name.replace('-', '_')}-{version}.tar.gz"
    if not archive.is_file():
        _run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary=:all:",
             "-d", str(sdists), requirement],
            what=f"download the {requirement} source archive",
            fix="check that PyPI is reachable (pip config) and the pin exists",
        )  # fmt: skip
    digest = archive_digest(archive)
    tree = cache / "src" / digest[:16] / "llama.cpp"
    if not (tree / "CMakeLists.txt").is_file():
        _unpack_vendored(archive, tree)
    return NativeSource(tree, digest)


def archive_digest(archive: Path) -> str:
    """The sha256 of a source archive: the cache key's part for the source."""
    return hashlib.sha256(archive.read_bytes()).hexdigest()


def _unpack_vendored(archive: Path, tree: Path) -> None:
    """Extract only ``*/vendor/llama.cpp`` into ``tree``, through a staging folder beside it (same
    file system, so the final move is atomic and an interrupted unpack leaves no half tree)."""
    tree.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=tree.parent))
    try:
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
            tar.extractall(staging, members=members, filter="data")
        found = next(staging.glob("*/vendor/llama.cpp"), None)
        if found is None:
            raise UsageError(f"{archive.name} vendors no llama.cpp tree (vendor/llama.cpp)")
        os.replace(found, tree)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@dataclass(frozen=True)
class Planned:
    """Where a runtime's tree is (or will be) cached, and what building it takes."""

    runtime: str
    component: str
    recipe: NativeBuild
    source: NativeSource
    toolkit: Toolkit | None  # a stand-in for a build-package this machine lacks
    defines: tuple[str, ...]
    root: Path

    @property
    def built(self) -> bool:
        """Whether the cache holds the tree already."""
        return (self.root / STAMP).is_file()


def plan_build(
    runtime_id: str = "llama.cpp-cpu",
    *,
    cache: Path | None = None,
    defines: tuple[str, ...] = (),
    source: NativeSource | None = None,
) -> Planned:
    """The cached tree's place for ``runtime_id`` on this machine, without building anything
    (the source archive is fetched once; a toolkit stand-in only later, when it builds).
    ``source``: another archive of the same tree (a GPU host's bundle), keyed by its digest.
    Where the key's place is empty but the same build is stored under an older key
    (:func:`built_before`), that tree is the root."""
    cache = cache or native_cache()
    component, recipe, requirement = recipe_for(load_catalog(), runtime_id)
    source = source or fetch_source(requirement, cache)
    stand_in = toolkit_for(runtime_id)
    toolkit = stand_in if stand_in is not None and needed(stand_in) else None
    machine = machine_inputs(toolkit, defines)
    root = cache / "components" / f"{component}-{build_key(recipe, source, machine)}"
    if not (root / STAMP).is_file():
        root = built_before(root.parent, component, recipe, source, machine) or root
    return Planned(runtime_id, component, recipe, source, toolkit, defines, root)


def built_component(
    runtime_id: str, *, cache: Path | None = None, defines: tuple[str, ...] = ()
) -> Path | None:
    """The cached tree of ``runtime_id``'s recipe, or None when it was never built."""
    planned = plan_build(runtime_id, cache=cache, defines=defines)
    return planned.root if planned.built else None


def build_component(
    runtime_id: str = "llama.cpp-cpu",
    *,
    cache: Path | None = None,
    jobs: int | None = None,
    log: Path | None = None,
    progress: Callable[[str], None] | None = None,
    defines: tuple[str, ...] = (),
    source: NativeSource | None = None,
) -> Path:
    """The component tree of ``runtime_id`` built per its recipe; cached, built at most once.
    ``defines``: the build machine's own cmake definitions (``NAME=VALUE``), after the recipe's."""
    cache = cache or native_cache()
    planned = plan_build(runtime_id, cache=cache, defines=defines, source=source)
    if planned.built:
        return planned.root
    work = cache / "work" / planned.root.name
    if progress:
        progress(
            f"building {planned.component} as its recipe says into {planned.root} "
            f"(log: {work}/build.log)"
        )
    toolkit = prepare(planned.toolkit, cache) if planned.toolkit else None
    install = _build(planned, toolkit, work, jobs, log or work / "build.log")
    planned.root.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(planned.root, ignore_errors=True)
    os.replace(install, planned.root)
    shutil.rmtree(work, ignore_errors=True)
    return planned.root


def _build(
    planned: Planned, toolkit: Prepared | None, work: Path, jobs: int | None, log: Path
) -> Path:
    """Configure, build and install into ``work/install`` as snapcraft's cmake plugin would,
    then check the layout and stamp it; the installed tree. A build of the same key that was cut
    short (a stopped session, a CI time-out) goes on where it stopped: the folder's name is the
    key, and make rebuilds what is out of date (an interrupted make deletes its half-written
    target)."""
    build, install = work / "build", work / "install"
    shutil.rmtree(install, ignore_errors=True)
    if not (build / "CMakeCache.txt").is_file():
        shutil.rmtree(work, ignore_errors=True)
    build.mkdir(parents=True, exist_ok=True)
    recipe, component = planned.recipe, planned.component
    extra = (*(toolkit.cmake_parameters if toolkit else ()), *(f"-D{d}" for d in planned.defines))
    env = {**os.environ, **(toolkit.environment if toolkit else {})}
    cpus = jobs or os.cpu_count() or 1
    for step in build_steps(recipe, planned.source.tree, install, cpus, extra):
        _run(
            list(step.argv),
            what=f"build {component} ({' '.join(step.argv[:3])}...)",
            cwd=build,
            env={**env, **dict(step.env)},
            log=log,
        )
    for path in recipe.remove_after_install:  # the part's override-build does the same
        (install / path).unlink(missing_ok=True)
    missing = ComponentTree(install).problems() if component.startswith("llamacpp") else []
    missing += backend_problems(planned.runtime, install)
    if missing:
        raise SnapbuildError(
            f"{component} built, but not laid out as the loader expects "
            "(runtimes/component_tree.py)",
            details="missing: " + "; ".join(missing) + f"\ninstalled tree kept at {install}",
            resolution="fix the recipe's install directories (cmake-parameters) and rebuild",
        )
    stamp = {
        "runtime": planned.runtime,
        "recipe": built_from(recipe),
        "source": planned.source.digest,
        **machine_inputs(planned.toolkit, planned.defines),
    }
    (install / STAMP).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    return install


def link_into_venv(component: str, root: Path, prefix: Path | None = None) -> Path:
    """Point ``<venv>/lib/snapbuild-native/<component>`` at a built tree (replacing any link)."""
    links = (prefix or Path(sys.prefix)) / LINK_DIR
    links.mkdir(parents=True, exist_ok=True)
    link = links / component
    tmp = links / f".{component}.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(root)
    os.replace(tmp, link)
    return link


def _run(
    argv: list[str],
    *,
    what: str,
    fix: str = "read the build log, fix the cause and run the build again",
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    log: Path | None = None,
) -> None:
    out = log.open("a", encoding="utf-8") if log else subprocess.DEVNULL
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    except FileNotFoundError as exc:
        raise SnapbuildError(
            f"cannot {what}: {exc.filename} is not installed",
            resolution="install cmake and a C/C++ compiler (apt-get install cmake build-essential)",
        ) from exc
    finally:
        if log:
            out.close()  # type: ignore[union-attr]
    if done.returncode != 0:
        raise SnapbuildError(
            f"cannot {what}: `{' '.join(argv)}` exited {done.returncode}",
            details=f"log: {log}" if log else None,
            resolution=fix,
        )


def _define(text: str) -> str:
    name, sep, _ = text.partition("=")
    if not sep or not name or not name.replace("_", "").isalnum():
        raise UsageError(
            f"--define {text!r} is not NAME=VALUE",
            resolution="e.g. --define CMAKE_CUDA_ARCHITECTURES=90-real",
        )
    return text


def _note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m snapbuild.recipes.native [RUNTIME]``: build (or find) and link; print the
    tree."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m snapbuild.recipes.native", description=__doc__)
    parser.add_argument("runtime", nargs="?", default="llama.cpp-cpu")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--no-link", action="store_true", help="do not link it into this venv")
    parser.add_argument(
        "--define",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a cmake definition of this build machine's, after the recipe's (cached apart)",
    )
    args = parser.parse_args(argv)
    try:
        defines = tuple(_define(d) for d in args.define)
        root = build_component(args.runtime, jobs=args.jobs, progress=_note, defines=defines)
        if not args.no_link:
            component, _, _ = recipe_for(load_catalog(), args.runtime)
            link_into_venv(component, root)
    except SnapbuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
