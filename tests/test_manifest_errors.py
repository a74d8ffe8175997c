"""Bad manifests: each gives one ManifestError naming file, line and field, what was expected
and how to fix it (exit 2 through the CLI, no traceback).

Every file under tests/data/bad-manifests/ has its full expected message beside it
(``NAME.txt``); regenerate with ``SNAPBUILD_UPDATE_GOLDEN=1`` and review the diff by eye.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from snapbuild.cli import cli, run_cli
from snapbuild.manifest.loader import load_manifest
from snapcommon.errors import ManifestError

BAD = Path(__file__).parent / "data" / "bad-manifests"
CASES = sorted(p.stem for p in BAD.glob("*.yaml"))
SNAPBUILD = str(Path(sys.executable).parent / "snapbuild")
UPDATE = os.environ.get("SNAPBUILD_UPDATE_GOLDEN") == "1"


def message_for(name: str) -> str:
    path = BAD / f"{name}.yaml"
    with pytest.raises(ManifestError) as info:
        load_manifest(str(path))
    assert info.value.exit_code == 2
    return info.value.format().replace(str(BAD) + "/", "") + "\n"


def test_there_are_at_least_thirty_bad_manifests() -> None:
    assert len(CASES) >= 30
    assert sorted(p.stem for p in BAD.glob("*.txt")) == CASES


@pytest.mark.parametrize("name", CASES)
def test_bad_manifest_message(name: str) -> None:
    got = message_for(name)
    golden = BAD / f"{name}.txt"
    if UPDATE:
        golden.write_text(got, encoding="utf-8")
    assert got == golden.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", CASES)
def test_every_problem_names_a_line_and_a_fix(name: str) -> None:
    got = message_for(name)
    lines = got.splitlines()
    assert lines[0].startswith("Error: ")
    located = [line for line in lines if line.startswith(f"  {name}.yaml:")]
    assert located, got
    assert any(line.startswith("Fix: ") for line in lines), got


def test_validate_cli_exit_code_and_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    good = str(Path(__file__).parent.parent / "manifests" / "smollm2.yaml")
    bad = str(BAD / "unknown-runtime.yaml")
    assert run_cli(cli, ["validate", good, bad]) == 2
    out, err = capsys.readouterr()
    assert out == f"{good}: ok (smollm2, 4 engines)\n"
    assert err == (
        f"Error: {bad} is not a valid manifest (1 problem)\n"
        f"  {bad}:28: engines[0].runtime: unknown runtime 'llama.cpp-metal'\n"
        "    fix: did you mean 'llama.cpp-rocm'? use a runtime id of runtimes/catalog.yaml: "
        "llama.cpp-cpu, llama.cpp-cuda, "
        "llama.cpp-vulkan, llama.cpp-rocm, openvino-cpu, openvino-gpu, openvino-npu, "
        "onnxruntime-cpu, onnxruntime-cuda, onnxruntime-openvino\n"
        "Fix: did you mean 'llama.cpp-rocm'? use a runtime id of runtimes/catalog.yaml: "
        "llama.cpp-cpu, llama.cpp-cuda, "
        "llama.cpp-vulkan, llama.cpp-rocm, openvino-cpu, openvino-gpu, openvino-npu, "
        "onnxruntime-cpu, onnxruntime-cuda, onnxruntime-openvino\n"
        "Error: 1 of 2 manifests invalid\n"
        "Fix: fix the problems listed above\n"
    )


def test_select_with_a_bad_manifest_exits_2_without_traceback() -> None:
    proc = subprocess.run(
        [SNAPBUILD, "select", str(BAD / "yaml-unclosed-list.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"Error: {BAD}/yaml-unclosed-list.yaml is not valid YAML\n")
