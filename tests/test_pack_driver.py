"""The driver's contract (snapbuild/pack/driver.py): it runs in snapcraft's virtualenv, so it may
import only the standard library, snapcraft and craft_parts, and it answers every request with
one JSON object on stdout, errors included (brief, details, resolution, exit code).

Most checks run the driver with this venv's Python, where snapcraft is absent: they check the
request handling and the errors that come before snapcraft is imported. With snapcraft's venv
(tests/support/oracle.py), the probe reports its versions and python-apt's."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import oracle

from snapbuild.pack import driver
from snapbuild.pack.host import APT_DIR

DRIVER = Path(driver.__file__)


def _run(request: Any, python: str = sys.executable) -> tuple[int, dict[str, Any]]:
    text = request if isinstance(request, str) else json.dumps(request)
    done = subprocess.run(
        [python, "-I", str(DRIVER)], input=text, capture_output=True, text=True, timeout=120
    )
    return done.returncode, json.loads(done.stdout)  # stdout holds the answer and nothing else


def test_the_driver_imports_only_the_stdlib_snapcraft_and_craft_parts() -> None:
    tree = ast.parse(DRIVER.read_text())
    tops = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import would need snapbuild's package"
            tops.add((node.module or "").split(".")[0])
    allowed = {"snapcraft", "craft_parts", "craft_cli", "__future__"}
    assert {t for t in tops if t not in sys.stdlib_module_names} <= allowed
    # craft_cli is snapcraft's own dependency (its emitter), installed with it


@pytest.mark.parametrize(
    ("request_text", "message"),
    [
        ("not json", "the request is not JSON"),
        (json.dumps({"schema": 99, "action": "pack"}), "needs schema 1"),
        (json.dumps({"schema": 1, "action": "explode"}), "an action of probe, plan, pack"),
        (json.dumps({"schema": 1, "action": "pack", "apt_dir": "/x"}), "lacks project_dir"),
    ],
)
def test_a_bad_request_is_answered_with_exit_2(request_text: str, message: str) -> None:
    code, answer = _run(request_text)
    assert code == 2
    assert answer["ok"] is False
    assert message in answer["error"]["brief"]
    assert answer["error"]["exit_code"] == 2


def test_without_python_apt_the_answer_names_the_package(tmp_path: Path) -> None:
    code, answer = _run(
        {"schema": 1, "action": "probe", "apt_dir": str(tmp_path), "work_dir": str(tmp_path)}
    )
    assert code == 0
    assert answer["ok"] is False
    error = answer["error"]
    assert "python-apt" in error["brief"] and "python3-apt" in error["brief"]
    assert error["resolution"].startswith("apt-get install python3-apt")
    assert error["exit_code"] == 1


@pytest.mark.skipif(
    not any(APT_DIR.glob(f"apt_pkg.cpython-{sys.version_info[0]}{sys.version_info[1]}-*.so")),
    reason=f"Debian's python3-apt for Python {sys.version_info[0]}.{sys.version_info[1]} "
    "is not installed (apt-get install python3-apt)",
)
def test_without_snapcraft_the_answer_says_which_python_lacks_it(tmp_path: Path) -> None:
    code, answer = _run(
        {"schema": 1, "action": "probe", "apt_dir": str(APT_DIR), "work_dir": str(tmp_path)}
    )
    assert code == 0 and answer["ok"] is False
    assert answer["error"]["brief"].startswith(f"snapcraft is not importable by {sys.executable}")
    assert "--snapcraft" in answer["error"]["resolution"]


def test_snapcrafts_probe_reports_its_versions(tmp_path: Path) -> None:
    python = oracle.require() / "bin" / "python"
    code, answer = _run(
        {"schema": 1, "action": "probe", "apt_dir": str(APT_DIR), "work_dir": str(tmp_path)},
        python=str(python),
    )
    assert code == 0
    if not answer["ok"] and "python-apt" in answer["error"]["brief"]:
        pytest.skip(answer["error"]["brief"])
    assert answer["ok"], answer
    assert answer["versions"]["snapcraft"] == "9.0.1"
    assert answer["versions"]["craft-parts"] == "2.37.2"


def test_installed_versions_splits_installed_from_missing() -> None:
    found, missing = driver.installed_versions(["dpkg", "dpkg:amd64", "no-such-package-xyz=1"])
    assert set(found) == {"dpkg"} and found["dpkg"]
    assert missing == ["no-such-package-xyz"]


def test_a_missing_build_package_is_named_with_the_command_that_installs_it() -> None:
    with pytest.raises(driver.DriverError) as raised:
        driver.check_build_packages(None, ["dpkg", "no-such-package-xyz"])
    assert raised.value.data["brief"] == (
        "build-packages not installed on this machine: no-such-package-xyz"
    )
    assert raised.value.data["resolution"] == "apt-get install no-such-package-xyz"
    assert driver.check_build_packages(None, ["dpkg"])[0].startswith("dpkg=")


def test_the_base_stand_in_holds_libc_and_not_what_parts_stage() -> None:
    base = driver.host_base_packages()
    assert {"libc6", "dpkg", "base-files"} <= base
    assert "libgomp1" not in base  # the llama.cpp component stages it


def test_a_fingerprint_follows_files_and_metadata_bytes_not_directory_times(
    tmp_path: Path,
) -> None:
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "snap.yaml").write_text("name: a\n")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "tool").write_text("x")
    first = driver.fingerprint(tmp_path)
    (tmp_path / "meta" / "snap.yaml").unlink()
    (tmp_path / "meta" / "snap.yaml").write_text("name: a\n")  # rewritten, same bytes
    assert driver.fingerprint(tmp_path) == first
    (tmp_path / "meta" / "snap.yaml").write_text("name: b\n")
    assert driver.fingerprint(tmp_path) != first
