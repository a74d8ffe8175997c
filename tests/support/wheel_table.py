"""Which of the snap's Python packages have wheels for core24's Python 3.12 on amd64 and arm64?

    .venv/bin/python tests/support/wheel_table.py > /tmp/table.md   # needs PyPI (network)

Each python part of every project snapbuild renders is resolved by pip's own resolver for the
target, as the part's ``pip install`` would resolve it on a core24 builder of that architecture
(``pip install --dry-run --report`` with ``--python-version 3.12 --implementation cp --abi cp312
--platform manylinux_2_39_<machine> ... --only-binary=:all:``, every manylinux tag that glibc
2.39, core24's, runs: pip matches only the tags it is given). A package pip cannot resolve
without a source distribution is recorded as built from source; its own requirements (from the
metadata pip prepares from its sdist) are then resolved in its place, until the rest resolves to
wheels. Parts built for amd64 only (the catalog's ``architectures``) are not resolved for arm64.

Environment markers (uvloop's ``platform_machine``) are evaluated by pip for this machine, not
the target: both targets here are ones where they hold. The table printed is pasted into
docs/building.md ("Wheels for core24"); :func:`part_requirements` (no network) is what
tests/test_snap_requirements.py checks that table against.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from packaging.requirements import Requirement  # noqa: E402

from runtimes.catalog import load_catalog  # noqa: E402
from snapbuild.project.requirements import serve_requirements  # noqa: E402

MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}
LEGACY = {"x86_64": ["manylinux1", "manylinux2010", "manylinux2014"], "aarch64": ["manylinux2014"]}


def platforms(machine: str) -> list[str]:
    """Every manylinux tag glibc 2.39 (core24's) runs: pip takes only the tags it is given."""
    oldest = 5 if machine == "x86_64" else 17
    tags = [f"manylinux_2_{minor}" for minor in range(39, oldest - 1, -1)] + LEGACY[machine]
    return [f"{tag}_{machine}" for tag in tags]


NO_WHEEL = re.compile(r"(?:No matching distribution found for|satisfies the requirement) (\S+)")


def part_requirements() -> dict[str, list[str]]:
    """Part label -> what its pip installs: the ``snapbuild`` part (snapbuild's core
    dependencies, then the serve extra) and each runtime component's python part."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    parts = {"snapbuild": [*project["dependencies"], *serve_requirements(ROOT)]}
    for entry in load_catalog().runtimes:
        python = entry.build.python if entry.build else None
        if python is not None:
            parts.setdefault(f"runtime-{entry.component}-python", list(python.python_packages))
    return parts


def part_architectures() -> dict[str, tuple[str, ...]]:
    """Part label -> the architectures it is built for (the catalog's; all when unlisted)."""
    arches = {"snapbuild": tuple(MACHINES)}
    for entry in load_catalog().runtimes:
        arches.setdefault(
            f"runtime-{entry.component}-python", entry.architectures or tuple(MACHINES)
        )
    return arches


def resolve(requirements: list[str], machine: str) -> tuple[dict[str, str], dict[str, str]]:
    """({package: wheel file}, {package: version built from source}) for one target."""
    wanted = list(requirements)
    source: dict[str, str] = {}
    while True:
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.json"
            done = subprocess.run(
                [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                 "--quiet", "--report", str(report), "--target", str(Path(tmp) / "t"),
                 "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
                 "--abi", "abi3", "--abi", "none",
                 *(f"--platform={tag}" for tag in platforms(machine)),
                 "--only-binary=:all:", *wanted],
                capture_output=True, text=True,
            )  # fmt: skip
            if done.returncode == 0:
                items = json.loads(report.read_text())["install"]
                wheels = {
                    i["metadata"]["name"].lower(): i["download_info"]["url"].rsplit("/", 1)[-1]
                    for i in items
                }
                return wheels, source
        found = NO_WHEEL.search(done.stderr)
        if found is None:
            raise SystemExit(f"pip failed for {machine}:\n{done.stderr[-3000:]}")
        req = Requirement(found.group(1))
        version = _pinned(req)
        if version is None:
            raise SystemExit(f"{req}: only pinned packages are followed to their sdist")
        source[req.name.lower()] = version
        wanted = [w for w in wanted if Requirement(w).name.lower() != req.name.lower()]
        wanted += _requires(req.name, version)


def _pinned(req: Requirement) -> str | None:
    specs = list(req.specifier)
    return specs[0].version if len(specs) == 1 and specs[0].operator == "==" else None


def _report(args: list[str]) -> dict[str, Any]:
    """pip's installation report (``--dry-run --report``) for ``args``."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
             "--report", str(report), "--target", str(Path(tmp) / "t"), *args],
            capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"pip {' '.join(args)} failed:\n{done.stderr[-3000:]}")
        data: dict[str, Any] = json.loads(report.read_text())
        return data


def _requires(name: str, version: str) -> list[str]:
    """A source-only package's requirements at that version, from the metadata pip prepares
    from its sdist, markers evaluated for Python 3.12, extras left out."""
    (item,) = _report(["--no-deps", f"{name}=={version}"])["install"]
    out = []
    for text in item["metadata"].get("requires_dist") or ():
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": "", "python_version": "3.12"}):
            req.marker = None
            out.append(str(req))
    return out


def table() -> str:
    """The markdown table: one row per package, its wheel (version, ABI tag, platform tag) or
    **source** on each target, and the parts installing it. Where parts get different versions
    (numpy), each outcome names its parts."""
    built_for = part_architectures()
    outcomes: dict[str, dict[str, dict[str, list[str]]]] = {}  # name -> arch -> cell -> parts
    users: dict[str, list[str]] = {}
    for part, requirements in part_requirements().items():
        label = part.removeprefix("runtime-").removesuffix("-python")
        for arch, machine in MACHINES.items():
            if arch not in built_for[part]:
                continue
            wheels, source = resolve(requirements, machine)
            for name in [*wheels, *source]:
                cell = f"**source** {source[name]}" if name in source else _tag(wheels[name])
                outcomes.setdefault(name, {}).setdefault(arch, {}).setdefault(cell, [])
                if label not in outcomes[name][arch][cell]:
                    outcomes[name][arch][cell].append(label)
                if label not in users.setdefault(name, []):
                    users[name].append(label)
    lines = ["| Package | amd64 | arm64 | Parts |", "|---------|-------|-------|-------|"]
    for name in sorted(outcomes):
        cells = []
        for arch in MACHINES:
            found = outcomes[name].get(arch, {})
            if len(found) > 1:
                cells.append("; ".join(f"{cell} ({', '.join(p)})" for cell, p in found.items()))
            else:
                cells.append(next(iter(found), "(not built)"))
        lines.append(f"| {name} | {' | '.join(cells)} | {', '.join(users[name])} |")
    sources = sorted(n for n, by_arch in outcomes.items() if any(
        "source" in cell for cells in by_arch.values() for cell in cells))  # fmt: skip
    only = [p.removeprefix("runtime-").removesuffix("-python") for p, a in built_for.items()
            if "arm64" not in a]  # fmt: skip
    lines += [
        "",
        f"Built for amd64 only (the catalog's `architectures`): {', '.join(only)}.",
        "Built from source: " + (", ".join(sources) or "nothing") + ".",
    ]
    return "\n".join(lines)


def _tag(wheel: str) -> str:
    """``numpy-2.2.6-cp312-cp312-manylinux_2_17_x86_64.whl`` -> ``2.2.6 cp312 manylinux_2_17``."""
    if not wheel:
        return "-"
    parts = wheel.removesuffix(".whl").split("-")
    platform = parts[-1].split(".")[0].replace("_x86_64", "").replace("_aarch64", "")
    return f"{parts[1]} {parts[-2]} {platform}"


if __name__ == "__main__":
    print(table())
