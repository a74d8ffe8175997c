"""snapcraft 9.0.1 itself judges every project `snapbuild make` renders.

Every shipped manifest x every build variant x every architecture set (the manifest's own and
each architecture alone) is written to disk and handed to snapcraft's own code in its venv
(tests/support/oracle.py): each build of the project's build plan rendered by snapcraft's
project service into its ``Project`` model, the body of ``snapcraft expand-extensions``, and,
for each manifest's full project, the real ``snapcraft expand-extensions`` command.
The snap.yaml snapcraft would write is compared with the builder's own translation, which
``snapbuild try`` and the ``snap pack`` test use.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import oracle
from support.build import CASES, case_names

from runtimes.catalog import load_catalog
from snapbuild.manifest.loader import load_manifest
from snapbuild.paths import manifests_dir
from snapbuild.project.builder import build_project, make
from snapbuild.project.snapcraft_yaml import snap_license
from snapbuild.project.snapyaml import snap_yaml
from snapcommon.errors import UsageError

SHIPPED = sorted(p.stem for p in manifests_dir().glob("*.yaml"))
VARIANTS = ["all", *(v.name for v in load_catalog().variants)]


def _combinations() -> list[tuple[str, str, tuple[str, ...]]]:
    """(manifest, variant, architectures) for every project the builder agrees to render."""
    out = []
    for name in SHIPPED:
        manifest = load_manifest(name)
        for variant in VARIANTS:
            for arches in [tuple(manifest.architectures), *((a,) for a in manifest.architectures)]:
                try:
                    build_project(manifest, variant=variant, architectures=arches)
                except UsageError:
                    continue  # no engine of that variant builds for that architecture set
                out.append((name, variant, arches))
    return out


COMBINATIONS = _combinations()
DEFAULT_SETS = [c for c in COMBINATIONS if c[2] == tuple(load_manifest(c[0]).architectures)]


def _id(combo: tuple[str, str, tuple[str, ...]]) -> str:
    return f"{combo[0]}-{combo[1]}-{'+'.join(combo[2])}"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every combination written by `make`, exactly as a user gets it."""
    oracle.require()
    root = tmp_path_factory.mktemp("snapcraft-projects")
    out = {}
    for combo in COMBINATIONS:
        name, variant, arches = combo
        out[_id(combo)] = make(name, root / _id(combo), variant=variant, architectures=arches).out
    return {k: v for k, v in out.items() if v is not None}


@pytest.fixture(scope="module")
def verdicts(rendered: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """snapcraft's verdict on every rendered project, from one batch."""
    results = oracle.check(rendered.values())
    return {key: results[str(path.resolve())] for key, path in rendered.items()}


def test_every_variant_and_architecture_set_is_covered() -> None:
    """3 manifests x 5 variants, each with its default architecture set: the issue's 15."""
    assert len(DEFAULT_SETS) == len(SHIPPED) * len(VARIANTS) == 15
    assert len(COMBINATIONS) > len(DEFAULT_SETS)


@pytest.mark.parametrize("combo", COMBINATIONS, ids=_id)
def test_snapcraft_accepts_the_project(combo: tuple, verdicts: dict[str, dict]) -> None:
    verdict = verdicts[_id(combo)]
    assert oracle.problems(verdict) == []
    # one build per platform, each for its own architecture
    assert [(b["platform"], b["build-on"], b["build-for"]) for b in verdict["builds"]] == [
        (a, a, a) for a in combo[2]
    ]


def test_accepted_count(verdicts: dict[str, dict]) -> None:
    accepted = [k for k, v in verdicts.items() if not oracle.problems(v)]
    print(f"snapcraft 9.0.1 accepts {len(accepted)} of {len(verdicts)} rendered projects")
    assert sorted(accepted) == sorted(verdicts)


@pytest.mark.parametrize("combo", COMBINATIONS, ids=_id)
def test_snap_yaml_translation_matches_snapcraft(combo: tuple, verdicts: dict[str, dict]) -> None:
    """The builder's meta/snap.yaml (used by `snapbuild try` and `snap pack`) is snapcraft's."""
    name, variant, arches = combo
    project = build_project(load_manifest(name), variant=variant, architectures=arches).project
    for build in verdicts[_id(combo)]["builds"]:
        ours = json.loads(json.dumps(snap_yaml(project, build["build-for"])))
        theirs = build["snap-yaml"]
        assert ours == theirs, build["build-for"]


@pytest.mark.parametrize("combo", DEFAULT_SETS, ids=_id)
def test_expand_extensions_output(combo: tuple, verdicts: dict[str, dict]) -> None:
    """What `snapcraft expand-extensions` prints: GPU apps run through the gpu-2404 wrapper."""
    expanded = yaml.safe_load(verdicts[_id(combo)]["expand"]["yaml"])
    project = build_project(load_manifest(combo[0]), variant=combo[1]).project
    gpu = any("extensions" in app for app in project["apps"].values())
    for name, app in expanded["apps"].items():
        assert "extensions" not in app, name
        assert app.get("command-chain", []) == (
            ["snap/command-chain/gpu-2404-wrapper"] if gpu else []
        ), name
    assert ("gpu-2404" in expanded.get("plugs", {})) == gpu
    assert ("gpu/wrapper" in expanded["parts"]) == gpu
    assert set(expanded["parts"]) - {"gpu/wrapper", "gpu/cleanup"} == set(project["parts"])


def test_the_real_expand_extensions_command(
    rendered: dict[str, Path], verdicts: dict[str, dict]
) -> None:
    """`snapcraft expand-extensions`, the command itself, in each manifest's full project (the
    one with the most parts and apps), prints what the batch's in-process run of its body gave
    for that directory, so the batch judges every other project as the command would.
    Three runs only: each starts snapcraft (seconds on a loaded machine)."""
    keys = [_id((name, "all", tuple(load_manifest(name).architectures))) for name in SHIPPED]
    with ThreadPoolExecutor(max_workers=2) as pool:
        procs = list(pool.map(oracle.expand_extensions, [rendered[k] for k in keys]))
    assert {k: p.stderr[-2000:] for k, p in zip(keys, procs, strict=True) if p.returncode} == {}
    for key, proc in zip(keys, procs, strict=True):
        assert yaml.safe_load(proc.stdout) == yaml.safe_load(verdicts[key]["expand"]["yaml"])


def test_the_oracle_can_reject(tmp_path: Path) -> None:
    """A python part without `source` (the bug snapcraft found) and a bad licence file part
    are rejected, by both judgements, with snapcraft's own messages."""
    out = make("smollm2", tmp_path / "p", variant="cpu").out
    assert out is not None
    path = out / "snap" / "snapcraft.yaml"
    data = yaml.safe_load(path.read_text())
    data["parts"]["runtime-llamacpp-cpu-python"].pop("source")
    data["platforms"]["riscv64"] = {"build-on": ["amd64"], "build-for": ["riscv64", "arm64"]}
    path.write_text(yaml.safe_dump(data))
    verdict = oracle.check([out])[str(out.resolve())]
    text = "\n".join(oracle.problems(verdict))
    assert "runtime-llamacpp-cpu-python" in text and "source" in text
    assert "riscv64" in text
    assert "error" in verdict["expand"]


def test_snapcraft_accepts_the_golden_projects() -> None:
    """The golden directories (tests/data/build/*/expected) are projects snapcraft accepts."""
    expected = [CASES / case / "expected" for case in case_names()]
    verdicts = oracle.check(expected)
    assert {str(d): oracle.problems(verdicts[str(d.resolve())]) for d in expected} == {
        str(d): [] for d in expected
    }


@pytest.mark.parametrize(
    ("text", "declared"),
    [
        ("Apache-2.0", "Apache-2.0"),
        ("MIT OR Apache-2.0", "MIT OR Apache-2.0"),
        ("Gemma", None),
        ("apache-2.0", None),  # snapd compares identifiers exactly
        ("LicenseRef-Gemma", None),
        ("Apache-2.0 AND", None),
    ],
)
def test_only_spdx_licences_are_declared(text: str, declared: str | None) -> None:
    assert snap_license(text) == declared
