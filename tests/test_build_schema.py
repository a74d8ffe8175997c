"""Every rendered snapcraft.yaml against snapcraft's own JSON Schema and snapd's naming rules.

Covers each shipped manifest in every build variant, per architecture and combined, plus the
golden cases. The schema is snapcraft's file (GPL-3.0, tests/data/snapcraft.schema.NOTICE).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from support.build import SCHEMA, case_manifest, case_names, case_options, core24_schema

from runtimes.catalog import load_catalog
from snapbuild.manifest.loader import load_manifest
from snapbuild.paths import manifests_dir
from snapbuild.project.builder import build_project
from snapbuild.project.naming import name_problems
from snapbuild.project.snapyaml import snap_yaml
from snapcommon.errors import UsageError

pytestmark = pytest.mark.skipif(not SCHEMA.is_file(), reason=f"{SCHEMA} is absent")

SHIPPED = sorted(p.stem for p in manifests_dir().glob("*.yaml"))
VARIANTS = [None, *(v.name for v in load_catalog().variants)]


def _validate(project: dict) -> None:
    errors = sorted(jsonschema.Draft202012Validator(core24_schema()).iter_errors(project), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    assert name_problems(project) == []


def _projects(name: str):
    manifest = load_manifest(name)
    for variant in VARIANTS:
        for arches in [(), *((a,) for a in manifest.architectures)]:
            try:
                built = build_project(manifest, variant=variant, architectures=arches)
            except UsageError:
                continue  # no engine of that variant for that architecture
            yield variant, arches, built


def test_shipped_manifests_exist() -> None:
    assert SHIPPED, "no manifests in manifests/: nothing would be validated"


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_manifest_projects_validate(name: str) -> None:
    seen = 0
    for _variant, _arches, built in _projects(name):
        _validate(built.project)
        # the text written to disk is the same data
        text = built.files["snap/snapcraft.yaml"]
        assert yaml.safe_load(text) == built.project
        seen += 1
    assert seen >= 2, f"{name}: expected the full snap and at least one variant"


@pytest.mark.parametrize("case", case_names())
def test_golden_case_projects_validate(case: str) -> None:
    _validate(build_project(case_manifest(case), **case_options(case)).project)


def test_schema_check_can_fail() -> None:
    """The validator rejects what snapcraft rejects (so the tests above can fail)."""
    project = build_project(load_manifest(SHIPPED[0])).project
    broken = {**project, "confinement": "loose", "compression": "zstd"}
    errors = list(jsonschema.Draft202012Validator(core24_schema()).iter_errors(broken))
    assert sorted(e.absolute_path[0] for e in errors) == ["compression", "confinement"]


def test_naming_rules_beyond_the_schema() -> None:
    """Names the schema accepts but snapd refuses are reported one by one."""
    project = build_project(load_manifest(SHIPPED[0])).project
    app = {"command": "bin/inference-snap"}
    comp = {"type": "standard", "summary": "s", "description": "d"}
    bad = {
        **project,
        "name": "Tiny_LLM!",
        "apps": {"ok-app": app, "bad--app": app},
        "components": {"fine": comp, "-bad": comp, "x" * 40 + "y": comp},
        "hooks": {"install": {}, "pre-install": {}},
    }
    too_long = "x" * 40 + "y"  # the schema itself limits component names to 40
    schema_view = {
        **bad,
        "name": "ok-name",
        "components": {k: v for k, v in bad["components"].items() if k != too_long},
    }
    jsonschema.Draft202012Validator(core24_schema()).validate(schema_view)
    assert name_problems(bad) == [
        "snap name 'Tiny_LLM!' is not valid",
        "app name 'bad--app' is not valid",
        "component name '-bad' is not valid",
        f"component name '{'x' * 40 + 'y'}' is not valid",
        "hook 'pre-install' is not a hook snapd runs",
    ]


@pytest.mark.skipif(
    subprocess.run(["which", "snap"], capture_output=True).returncode != 0,
    reason="snap (Debian's snapd package) is not installed: apt-get install snapd",
)
@pytest.mark.parametrize("case", case_names())
def test_snap_pack_check_skeleton(case: str, tmp_path: Path) -> None:
    """A prime tree built from the rendered metadata passes `snap pack --check-skeleton`."""
    built = build_project(case_manifest(case), **case_options(case))
    prime = _prime_tree(built.project, built.files, tmp_path / "prime")
    result = subprocess.run(
        ["snap", "pack", "--check-skeleton", str(prime)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    # and the check is real: an app name snapd refuses fails it
    meta = yaml.safe_load((prime / "meta" / "snap.yaml").read_text())
    meta["apps"]["bad_app!"] = meta["apps"].pop("server")
    (prime / "meta" / "snap.yaml").write_text(yaml.safe_dump(meta))
    bad = subprocess.run(
        ["snap", "pack", "--check-skeleton", str(prime)], capture_output=True, text=True
    )
    assert bad.returncode != 0 and "bad_app!" in bad.stderr


def _prime_tree(project: dict, files: dict[str, str], prime: Path) -> Path:
    """meta/snap.yaml and meta/hooks as snapcraft writes them, plus the command's file."""
    (prime / "meta" / "hooks").mkdir(parents=True)
    arch = next(iter(project["platforms"]))
    (prime / "meta" / "snap.yaml").write_text(yaml.safe_dump(snap_yaml(project, arch)))
    for rel, text in files.items():
        if rel.startswith("snap/hooks/"):
            hook = prime / "meta" / "hooks" / rel.rsplit("/", 1)[1]
            hook.write_text(text)
            hook.chmod(0o755)
    command = prime / "bin" / "inference-snap"
    command.parent.mkdir()
    command.write_text("#!/bin/sh\nexit 0\n")
    command.chmod(0o755)
    return prime
