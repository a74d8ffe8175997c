"""Per-silicon build matrices and the GitHub Actions workflow that consumes them.

One matrix entry is one snap build: an architecture, a build variant (the catalog's
``variants``) and one model artifact, with the engines of that variant using that artifact (a
ladder's artifact belongs to one model option, which the entry names for ``make --options``). The
workflow's first job prints the matrix with ``snapbuild matrix --format github``; the build job
fans out over it, renders each project with ``snapbuild make`` and packs it with snapcraft's
official action, so the matrix is computed by the same code that renders the projects.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from runtimes.catalog import RuntimeCatalog, load_catalog
from snapbuild.manifest.model import Manifest
from snapbuild.project.plan import BuildPlan, plan_build
from snapbuild.project.render import render
from snapcommon.errors import UsageError

# GitHub-hosted runners per snap architecture; others build through Launchpad (remote-build).
RUNNERS = {"amd64": "ubuntu-24.04", "arm64": "ubuntu-24.04-arm"}
REMOTE_RUNNER = "ubuntu-24.04"
FORMATS = ("github", "json")


def matrix_entries(
    manifest: Manifest,
    catalog: RuntimeCatalog | None = None,
    *,
    architectures: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Every (architecture, variant, artifact) build of ``manifest``, in a stable order."""
    catalog = catalog or load_catalog()
    arches = architectures or manifest.architectures
    entries: list[dict[str, Any]] = []
    for arch in arches:
        for variant in catalog.variants:
            plan = _plan_or_none(manifest, catalog, variant.name, arch)
            if plan is not None:
                entries.extend(_entries(plan, arch))
    return entries


def _plan_or_none(
    manifest: Manifest, catalog: RuntimeCatalog, variant: str, arch: str
) -> BuildPlan | None:
    try:
        return plan_build(manifest, catalog, variant=variant, architectures=[arch])
    except UsageError:
        return None  # no engine of this variant builds for this architecture


def _entries(plan: BuildPlan, arch: str) -> list[dict[str, Any]]:
    out = []
    for artifact in dict.fromkeys(e.artifact for e in plan.engines):
        engines = [e for e in plan.engines if e.artifact == artifact]
        components = list(dict.fromkeys(c for e in engines for c in e.components))
        option = {"options": engines[0].option} if engines[0].option else {}
        out.append(
            {
                "id": f"{plan.model}-{plan.variant}-{artifact}-{arch}",
                "model": plan.model,
                "architecture": arch,
                "variant": plan.variant,
                "artifact": artifact,
                **option,
                "engines": ",".join(e.name for e in engines),
                "runtimes": ",".join(dict.fromkeys(e.runtime for e in engines)),
                "components": components,
                "runs-on": RUNNERS.get(arch, REMOTE_RUNNER),
                "remote-build": arch not in RUNNERS,
            }
        )
    return out


def format_matrix(entries: list[dict[str, Any]], fmt: str) -> str:
    """``github``: one line for ``strategy.matrix`` (``{"include": [...]}``); ``json``: pretty."""
    if fmt == "github":
        return json.dumps({"include": entries}, separators=(",", ":"))
    if fmt == "json":
        return json.dumps(entries, indent=2)
    raise UsageError(f"unknown matrix format {fmt!r}", resolution=f"use one of {FORMATS}")


def _setup_steps(install: str) -> list[dict[str, Any]]:
    return [
        {"uses": "actions/checkout@v7"},
        {"uses": "actions/setup-python@v7", "with": {"python-version": "3.12"}},
        {"name": "Install snapbuild", "run": install},
    ]


def workflow_data(
    manifest: Manifest, *, install: str = "python -m pip install ."
) -> dict[str, Any]:
    """The workflow as data. Values reach shell steps through ``env``, never spliced into them."""
    model = manifest.name
    matrix_step = {
        "id": "matrix",
        "name": "Compute the build matrix",
        "env": {"MODEL": model},
        "run": 'echo "matrix=$(snapbuild matrix "$MODEL" --format github)" >> "$GITHUB_OUTPUT"',
    }
    env = {
        "MODEL": model,
        "VARIANT": "${{ matrix.variant }}",
        "ENGINES": "${{ matrix.engines }}",
        "ARCH": "${{ matrix.architecture }}",
    }
    run = 'snapbuild make "$MODEL" --variant "$VARIANT" --engines "$ENGINES" --arch "$ARCH"'
    if manifest.is_ladder:  # one model option's artifact per build
        env["OPTIONS"] = "${{ matrix.options }}"
        run += ' --options "$OPTIONS"'
    make_step = {"name": "Render the snapcraft project", "env": env, "run": run + " -o build/snap"}
    pack_step = {
        "name": "Pack the snap and its components",
        "if": "${{ !matrix.remote-build }}",
        "uses": "snapcore/action-build@v1",
        "with": {"path": "build/snap"},
    }
    remote_step = {
        "name": "Pack on Launchpad (no hosted runner for this architecture)",
        "if": "${{ matrix.remote-build }}",
        "working-directory": "build/snap",
        "env": {
            "ARCH": "${{ matrix.architecture }}",
            "LP_CREDENTIALS": "${{ secrets.LAUNCHPAD_CREDENTIALS }}",
        },
        "run": "sudo snap install snapcraft --classic\n"
        "mkdir -p ~/.local/share/snapcraft\n"
        'printf "%s" "$LP_CREDENTIALS" > ~/.local/share/snapcraft/launchpad-credentials\n'
        'snapcraft remote-build --launchpad-accept-public-upload --build-for "$ARCH"\n',
    }
    upload_step = {
        "name": "Upload the snap and components",
        "uses": "actions/upload-artifact@v7",
        "with": {
            "name": "${{ matrix.id }}",
            "path": "build/snap/*.snap\nbuild/snap/*.comp\n",
            "if-no-files-found": "error",
        },
    }
    return {
        "name": f"Build the {model} inference snap",
        "on": {
            "workflow_dispatch": {},
            "push": {"paths": [f"manifests/{model}.yaml", "runtimes/catalog.yaml"]},
        },
        "permissions": {"contents": "read"},
        "jobs": {
            "matrix": {
                "runs-on": REMOTE_RUNNER,
                "outputs": {"matrix": "${{ steps.matrix.outputs.matrix }}"},
                "steps": [*_setup_steps(install), matrix_step],
            },
            "build": {
                "needs": "matrix",
                "name": "${{ matrix.id }}",
                "runs-on": "${{ matrix.runs-on }}",
                "strategy": {
                    "fail-fast": False,
                    "matrix": "${{ fromJSON(needs.matrix.outputs.matrix) }}",
                },
                "steps": [*_setup_steps(install), make_step, pack_step, remote_step, upload_step],
            },
        },
    }


def workflow_text(manifest: Manifest, *, install: str = "python -m pip install .") -> str:
    """The workflow file (``.github/workflows/<model>.yaml``)."""
    return render(
        "ci/workflow.yaml.j2",
        model=manifest.name,
        workflow=workflow_data(manifest, install=install),
    )
