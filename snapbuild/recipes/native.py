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
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runtimes.catalog import NativeBuild, RuntimeCatalog, load_catalog
from runtimes.component_tree import LINK_DIR, ComponentTree
from snapbuild.paths import cache_dir
from snapcommon.errors import SnapbuildError, UsageError

GENERATOR = "Unix Makefiles"  # snapcraft's cmake plugin default (cmake-generator unset)
STAMP = "snapbuild-native.json"


@dataclass(frozen=True)
class NativeSource:
    """An unpacked source tree and the digest of the archive it came from."""

    tree: Path
    digest: str


@dataclass(frozen=True)
class BuildStep:
    """One command of the build, run in the build directory, with the variables it adds."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


def build_steps(recipe: NativeBuild, source: Path, install: Path, jobs: int) -> list[BuildStep]:
    """The commands snapcraft's cmake plugin (craft-parts ``CMakePlugin.get_build_commands``)
    writes for the recipe's part: configure ``source`` out of tree with the part's generator and
    ``cmake-parameters``, build with ``jobs`` jobs, install with ``DESTDIR``. A test compares
    them with the plugin's own commands for the rendered part, so the two cannot drift."""
    return [
        BuildStep(("cmake", str(source), "-G", GENERATOR, *recipe.cmake_parameters)),
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


def built_from(recipe: NativeBuild) -> dict[str, object]:
    """The part of a recipe that decides what cmake builds (package lists do not: the machine
    provides them here, snapcraft stages them in a real build)."""
    fields = {"source", "source_commit", "cmake_parameters", "remove_after_install"}
    return recipe.model_dump(mode="json", include=fields)


def build_key(recipe: NativeBuild, source: NativeSource) -> str:
    """What a cached tree depends on: the recipe's build inputs, the source archive, the machine."""
    facts = {
        "recipe": built_from(recipe),
        "source": source.digest,
        "generator": GENERATOR,
        "machine": platform.machine(),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def built_before(
    components: Path, component: str, recipe: NativeBuild, source: NativeSource
) -> Path | None:
    """A finished tree of the same build stored under another key: same source archive, same
    build inputs, the commit written abbreviated in its stamp (``0c1e57098``) where the recipe
    now gives it in full. One commit, one archive digest: the same tree, so lengthening a pin
    does not recompile llama.cpp (tens of minutes)."""
    wanted = built_from(recipe)
    for stamp in sorted(components.glob(f"{component}-*/{STAMP}")):
        try:
            record = json.loads(stamp.read_text(encoding="utf-8"))
            built = dict(record["recipe"])
            commit = str(built.pop("source_commit"))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        rest = {k: v for k, v in wanted.items() if k != "source_commit"}
        if (
            record.get("source") == source.digest
            and built == rest
            and len(commit) >= 7
            and recipe.source_commit.startswith(commit)
        ):
            return stamp.parent
    return None


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
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    tree = cache / "src" / digest[:16] / "llama.cpp"
    if not (tree / "CMakeLists.txt").is_file():
        _unpack_vendored(archive, tree)
    return NativeSource(tree, digest)


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


def built_component(runtime_id: str, *, cache: Path | None = None) -> Path | None:
    """The cached tree of ``runtime_id``'s recipe, or None when it was never built."""
    cache = cache or native_cache()
    component, recipe, requirement = recipe_for(load_catalog(), runtime_id)
    source = fetch_source(requirement, cache)
    root = cache / "components" / f"{component}-{build_key(recipe, source)}"
    if (root / STAMP).is_file():
        return root
    return built_before(cache / "components", component, recipe, source)


def build_component(
    runtime_id: str = "llama.cpp-cpu",
    *,
    cache: Path | None = None,
    jobs: int | None = None,
    log: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """The component tree of ``runtime_id`` built per its recipe; cached, built at most once."""
    cache = cache or native_cache()
    found = built_component(runtime_id, cache=cache)
    if found is not None:
        return found
    component, recipe, requirement = recipe_for(load_catalog(), runtime_id)
    source = fetch_source(requirement, cache)
    root = cache / "components" / f"{component}-{build_key(recipe, source)}"
    work = cache / "work" / root.name
    if progress:
        progress(f"building {component} as its recipe says into {root} (log: {work}/build.log)")
    shutil.rmtree(work, ignore_errors=True)
    build, install = work / "build", work / "install"
    build.mkdir(parents=True)
    log = log or work / "build.log"
    for step in build_steps(recipe, source.tree, install, jobs or os.cpu_count() or 1):
        _run(
            list(step.argv),
            what=f"build {component} ({' '.join(step.argv[:3])}...)",
            cwd=build,
            env={**os.environ, **dict(step.env)},
            log=log,
        )
    for path in recipe.remove_after_install:  # the part's override-build does the same
        (install / path).unlink(missing_ok=True)
    missing = ComponentTree(install).problems() if component.startswith("llamacpp") else []
    if missing:
        raise SnapbuildError(
            f"{component} built, but not laid out as the loader expects "
            "(runtimes/component_tree.py)",
            details="missing: " + "; ".join(missing) + f"\ninstalled tree kept at {install}",
            resolution="fix the recipe's install directories (cmake-parameters) and rebuild",
        )
    stamp = {
        "runtime": runtime_id,
        "recipe": built_from(recipe),
        "source": source.digest,
    }
    (install / STAMP).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    root.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(root, ignore_errors=True)
    os.replace(install, root)
    shutil.rmtree(work, ignore_errors=True)
    return root


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
    args = parser.parse_args(argv)
    try:
        root = build_component(args.runtime, jobs=args.jobs, progress=_note)
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
