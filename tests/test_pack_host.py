"""What ``snapbuild pack`` needs from the machine (snapbuild/pack/host.py), and how it refuses
when something is missing: which tool, why, and the command that fixes it; never a traceback.
The CLI gives bad input exit 2 before it looks at the machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from snapbuild.cli import cli, run_cli
from snapbuild.pack import host
from snapbuild.pack.host import HostError


@pytest.fixture
def tools(monkeypatch: pytest.MonkeyPatch) -> None:
    """The system tools present, whatever this machine has, so one missing piece is tested."""
    monkeypatch.setattr(host.shutil, "which", lambda name: f"/usr/bin/{name}")


def test_a_missing_snapcraft_names_where_it_looked_and_how_to_install_it(
    tmp_path: Path, tools: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "apt_pkg.cpython-311-x86_64-linux-gnu.so").touch()  # python-apt "installed"
    monkeypatch.setattr(host, "APT_DIR", tmp_path)
    with pytest.raises(HostError) as raised:
        host.find_host(snapcraft=tmp_path / "no-snapcraft")
    assert raised.value.brief.startswith("snapcraft 9.0.1 (in its own virtualenv) is not installed")
    assert str(tmp_path / "no-snapcraft") in (raised.value.details or "")
    assert "--snapcraft" in (raised.value.resolution or "")
    assert raised.value.exit_code == 1


def test_without_python_apt_the_package_is_named(
    tmp_path: Path, tools: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host, "APT_DIR", tmp_path)
    with pytest.raises(HostError, match="python-apt") as raised:
        host.find_host()
    assert raised.value.resolution == "apt-get install python3-apt"


def test_a_missing_tool_is_named_with_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host.shutil, "which", lambda name: None if name == "mksquashfs" else name)
    with pytest.raises(HostError, match="needs `mksquashfs`") as raised:
        host.find_host()
    assert raised.value.resolution == "apt-get install squashfs-tools"


def test_without_python_3_12_it_says_so(tmp_path: Path) -> None:
    with pytest.raises(HostError, match="needs Python 3.12") as raised:
        host.find_python312(tmp_path / "python3.12")
    assert "--python3.12" in (raised.value.resolution or "")
    fake = tmp_path / "python3.12"
    fake.symlink_to(sys.executable)  # runs, but it is this venv's version
    if sys.version_info[:2] != (3, 12):
        with pytest.raises(HostError):
            host.find_python312(fake)


def test_python_3_12_is_found_and_resolved_to_the_real_executable() -> None:
    try:
        found = host.find_python312()
    except HostError as exc:
        pytest.skip(str(exc))
    assert host.python_version(found) == (3, 12)
    assert found == Path(os.path.realpath(found))  # a link to it works from any directory


def test_the_namespace_needs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host.os, "geteuid", lambda: 1000)
    with pytest.raises(HostError, match="needs root") as raised:
        host._check_namespace_possible(Path(sys.executable))
    assert "private mount namespace" in raised.value.brief


def test_snapcraft_through_usr_bin_python3_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host.os, "geteuid", lambda: 0)
    venv_python = tmp_path / "python"
    venv_python.symlink_to("/usr/bin/python3")
    with pytest.raises(HostError, match="runs through /usr/bin/python3"):
        host._check_namespace_possible(venv_python)


def test_a_console_script_names_its_interpreter(tmp_path: Path) -> None:
    script = tmp_path / "snapcraft"
    script.write_text(f"#!{sys.executable}\nimport sys\n")
    script.chmod(0o755)
    assert host._interpreter_of(script) == Path(sys.executable)
    other = tmp_path / "tool"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    assert host._interpreter_of(other) is None


def test_the_namespace_wrapper_makes_python3_the_given_python(tmp_path: Path) -> None:
    argv = host.namespace_wrapper(Path("/opt/py/bin/python3.12"), tmp_path)
    assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    assert argv[-2:] == [str(tmp_path), "/opt/py/bin/python3.12"]
    script = argv[7]
    assert "lowerdir=/usr/bin" in script and 'ln -s python3.12 "$1/upper/python3"' in script
    if os.geteuid() == 0 and host.shutil.which("unshare"):
        real = host.find_python312() if _has_312() else None
        if real is None:
            return
        done = subprocess.run(
            [*host.namespace_wrapper(real, tmp_path), "/usr/bin/python3", "--version"],
            capture_output=True,
            text=True,
        )
        if done.returncode == 125:
            pytest.skip(f"no mount namespace here: {done.stderr.strip()}")
        assert done.stdout.startswith("Python 3.12"), done.stderr


def _has_312() -> bool:
    try:
        host.find_python312()
    except HostError:
        return False
    return True


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["pack", "no-such-model"], "no-such-model"),
        (["pack", "smollm2", "--variant", "bogus"], "bogus"),
        (["pack", "smollm2", "--engines", "cpu-avx2,"], "empty name"),
    ],
)
def test_bad_input_exits_2_before_the_machine_is_examined(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    def examined(*_: object) -> None:
        raise AssertionError("the machine was examined before the input was checked")

    monkeypatch.setattr("snapbuild.pack.packer.find_host", examined)
    assert run_cli(cli, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and message in err


def test_a_gpu_variant_needs_snapcrafts_extension_data(tmp_path: Path) -> None:
    """The gpu extension's parts are built from snapcraft's own data files, which a
    pip-installed snapcraft lacks: the snap cannot be packed, and the message says why."""
    from snapbuild.manifest.loader import load_manifest
    from snapbuild.pack.packer import _refuse_extensions
    from snapbuild.project.builder import build_project

    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    tools = host.Host(snapcraft_python=python, python312=python, needs_namespace=False)
    gpu = build_project(load_manifest("smollm2"), variant="nvidia", architectures=("amd64",))
    with pytest.raises(HostError, match="uses snapcraft's gpu extension") as raised:
        _refuse_extensions(gpu, tools)
    assert "--variant cpu" in (raised.value.resolution or "")
    (tmp_path / "venv" / "share" / "snapcraft" / "extensions" / "gpu").mkdir(parents=True)
    _refuse_extensions(gpu, tools)  # a snapcraft that carries them (the snap) may try
    cpu = build_project(load_manifest("smollm2"), variant="cpu", architectures=("amd64",))
    _refuse_extensions(cpu, host.Host(python, python, False))
