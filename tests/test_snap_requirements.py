"""Everything the snap's code imports is declared where the snap installs it from.

The ``snapbuild`` python part installs snapbuild's source (its core ``dependencies``) plus its
``python-packages``, which are pyproject.toml's ``serve`` extra (snapbuild/project/requirements.py);
each runtime component installs its catalog recipe's pinned packages. A third-party module that
the shipped packages import and none of these provides (with their dependencies) would be missing
in the installed snap, as httpx and httptools were (issue 20), unless it is toolkit-only: listed
below with what needs it. The packed snap itself is checked by tests/test_pack_snap.py."""

from __future__ import annotations

import ast
import importlib.metadata
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from runtimes.catalog import load_catalog
from snapbuild.manifest.loader import load_manifest
from snapbuild.paths import manifests_dir
from snapbuild.project.builder import build_project
from snapbuild.project.render import SOURCE_ITEMS, TOOLKIT_ONLY
from snapbuild.project.requirements import serve_requirements

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# imported by shipped modules, needed only by toolkit commands the snap does not offer
TOOLKIT_IMPORTS = {
    "tqdm": "snapbuild fetch's progress bars (the fetch extra)",
    "gguf": "snapbuild new and validate read GGUF files (the new extra)",
    "tomli": "tomllib's backport, imported on Python 3.10 only (the snap's Python is 3.12)",
}
SNAP_PYTHON = {"extra": "", "python_version": "3.12", "python_full_version": "3.12.3"}
SHIPPED = [item for item in SOURCE_ITEMS if (ROOT / item).is_dir()]


@pytest.mark.parametrize("model", sorted(p.stem for p in manifests_dir().glob("*.yaml")))
def test_the_snapbuild_part_installs_the_serve_extra(model: str) -> None:
    built = build_project(load_manifest(model), variant="cpu")
    extra = PYPROJECT["project"]["optional-dependencies"]["serve"]
    assert built.project["parts"]["snapbuild"]["python-packages"] == extra
    assert list(serve_requirements()) == extra
    for name in ("httpx", "httptools", "orjson", "uvloop", "fastapi", "uvicorn", "pillow"):
        assert any(Requirement(r).name == name for r in extra), name


def _names(requirements: list[str]) -> set[str]:
    """The distributions ``requirements`` install, with their dependencies as installed here
    (markers evaluated for this machine with core24's Python 3.12, extras not followed)."""
    todo = [Requirement(r) for r in requirements]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate(SNAP_PYTHON):
            continue
        name = req.name.lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            todo += [Requirement(r) for r in importlib.metadata.requires(req.name) or ()]
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed in this venv: its own name still counts
    return seen


def _third_party_imports() -> dict[str, set[str]]:
    """Top-level module -> the shipped files importing it (at the top or lazily)."""
    skip = {ROOT / path for path in TOOLKIT_ONLY}
    found: dict[str, set[str]] = {}
    for package in SHIPPED:
        for py in (ROOT / package).rglob("*.py"):
            if any(parent in skip for parent in py.parents):
                continue
            for node in ast.walk(ast.parse(py.read_text(encoding="utf-8"))):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    top = name.split(".")[0]
                    if top not in SHIPPED and top not in sys.stdlib_module_names:
                        found.setdefault(top, set()).add(str(py.relative_to(ROOT)))
    found.pop("__future__", None)
    return found


def test_every_import_of_the_shipped_code_is_declared_for_the_snap() -> None:
    part = (
        PYPROJECT["project"]["dependencies"]
        + PYPROJECT["project"]["optional-dependencies"]["serve"]
    )
    components = [
        req
        for entry in load_catalog().runtimes
        if entry.build and entry.build.python
        for req in entry.build.python.python_packages
    ]
    declared = _names(part) | _names(components)
    providers = importlib.metadata.packages_distributions()
    missing = {}
    for module, files in sorted(_third_party_imports().items()):
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [module])}
        if not dists & declared and module not in TOOLKIT_IMPORTS:
            missing[module] = sorted(files)
    assert missing == {}, "imported by the snap's code but installed by none of its parts"


def test_the_wheel_table_has_a_row_for_every_package_the_parts_declare() -> None:
    """docs/building.md's table (tests/support/wheel_table.py's output) is not stale: a package
    added to a part's requirements, or a new part, must be resolved again."""
    from support.wheel_table import part_requirements

    text = (ROOT / "docs" / "building.md").read_text()
    section = text.split("## Wheels for core24's Python 3.12", 1)[1]
    rows = {
        line.split("|")[1].strip().lower().replace("_", "-")
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| Package")
    }
    for part, requirements in part_requirements().items():
        for text_req in requirements:
            req = Requirement(text_req)
            if req.marker is None or req.marker.evaluate(SNAP_PYTHON):
                assert req.name.lower().replace("_", "-") in rows, f"{part}: {req.name}"
