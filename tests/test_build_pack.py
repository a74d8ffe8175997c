"""`snap pack` (snapd's own packer, Debian's snapd 2.57) makes the real `.snap` of every shipped
manifest's CPU variant, from the prime tree `snapbuild try` assembles (snapbuild.trial), and the
file is inspected with `unsquashfs -l` and `snap info --verbose FILE`.

What this does and does not check: snapd validates the snap's metadata as it packs (name,
version, licence as an SPDX expression, apps, hooks, plugs, links) and squashes the tree with
the project's `compression: lzo`. The prime tree holds the snap's metadata, hooks, data and
licence notice; the parts snapcraft would build (Python venv, llama.cpp) are not built here and
`bin/inference-snap` is the trial's launcher. snapd 2.57 cannot pack components (`snap pack`
learnt `.comp` files later), so the runtime and weight components are not packed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from snapbuild.manifest.loader import load_manifest
from snapbuild.paths import manifests_dir
from snapbuild.project.builder import make
from snapbuild.project.snapyaml import snap_yaml
from snapbuild.trial.prime import assemble_prime
from snapbuild.trial.sandbox import Trial

SHIPPED = sorted(p.stem for p in manifests_dir().glob("*.yaml"))
pytestmark = pytest.mark.skipif(
    shutil.which("snap") is None or shutil.which("unsquashfs") is None,
    reason="snap pack needs snapd and squashfs-tools: apt-get install snapd squashfs-tools",
)


def _pack(name: str, work: Path) -> tuple[Trial, Path]:
    trial = Trial(work=work / name, name=name)
    make(name, trial.project, variant="cpu")
    assemble_prime(trial, "amd64")
    proc = subprocess.run(
        ["snap", "pack", "--compression=lzo", str(trial.prime), str(work)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    version = load_manifest(name).version
    snap = work / f"{name}_{version}_amd64.snap"
    assert proc.stdout.strip() == f"built: {snap}"
    return trial, snap


@pytest.mark.parametrize("name", SHIPPED)
def test_snap_pack_makes_the_cpu_snap(name: str, tmp_path: Path) -> None:
    _, snap = _pack(name, tmp_path)
    listing = subprocess.run(
        ["unsquashfs", "-l", str(snap)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert listing == [
        "squashfs-root",
        *(
            f"squashfs-root/{p}"
            for p in [
                "bin",
                "bin/inference-snap",
                "meta",
                "meta/hooks",
                "meta/hooks/configure",
                "meta/hooks/install",
                "meta/hooks/post-refresh",
                "meta/snap.yaml",
                "snapbuild",
                "snapbuild/components.yaml",
                "snapbuild/manifest.yaml",
                "usr",
                "usr/share",
                "usr/share/doc",
                f"usr/share/doc/{name}",
                f"usr/share/doc/{name}/copyright",
            ]
        ),
    ]
    manifest = load_manifest(name)
    info = subprocess.run(
        ["snap", "info", "--verbose", str(snap)], capture_output=True, text=True, check=True
    ).stdout
    fields = _fields(info)
    assert fields["name"] == name
    assert fields["summary"] == manifest.summary
    assert fields["version"] == f"{manifest.version} -"
    assert fields["contact"] == manifest.contact
    # snapd knows only SPDX expressions: Gemma's terms are not one, so the snap declares none
    assert fields["license"] == ("unset" if name == "gemma3" else manifest.license)
    assert fields["base"] == "core24"
    assert f"  {name}.server: simple, disabled, inactive" in info.splitlines()
    assert f"  - {name}" in info.splitlines()  # the CLI app, named after the snap
    assert re.search(r"^  confinement:\s+strict$", info, re.M)
    # the metadata inside the file is what the builder's translation gives (itself tested
    # against snapcraft's own snap.yaml in test_build_snapcraft)
    packed = subprocess.run(
        ["unsquashfs", "-cat", str(snap), "meta/snap.yaml"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    expected = snap_yaml(make(name, tmp_path / "again", variant="cpu").project, "amd64")
    assert yaml.safe_load(packed) == expected


def _fields(info: str) -> dict[str, str]:
    """`snap info` top-level fields; a value wrapped onto indented lines is joined back."""
    fields: dict[str, str] = {}
    key = ""
    for line in info.splitlines():
        if line and not line.startswith(" ") and ":" in line:
            key, value = line.split(":", 1)
            fields[key] = value.strip()
        elif key == "summary" and line.startswith(" "):
            fields[key] += " " + line.strip()
    return fields


def test_snapd_refuses_a_licence_that_is_not_spdx(tmp_path: Path) -> None:
    """Why gemma3's `license:` is left out: with it, snapd will not pack the snap."""
    trial, _ = _pack("gemma3", tmp_path)
    meta = trial.prime / "meta" / "snap.yaml"
    data = yaml.safe_load(meta.read_text())
    meta.write_text(yaml.safe_dump({**data, "license": "Gemma"}))
    proc = subprocess.run(
        ["snap", "pack", str(trial.prime), str(tmp_path / "again")], capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert 'cannot validate license "Gemma": unknown license' in proc.stderr
