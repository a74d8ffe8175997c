"""The base snap's Python: a venv made as snapcraft makes it on core24 runs read-only in the snap.

A core24 snap's venv has ``bin/python3 -> /usr/bin/python3`` (or ``python3.12``) and
``home = /usr/bin``: it runs on the base's interpreter and stdlib. The harness lays a host
Python 3.12 out there (:mod:`snapbuild.trial.snapd.base`); these tests pack such a venv with
``snap pack`` and run it mounted read-only, with the host's Python tree itself out of sight.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.snapd import build_pyvenv, skip_reason

from snapbuild.trial.snapd import HarnessError, HostPython, SnapRun, find_host_python
from snapbuild.trial.snapd import base as base_module


def _host_python() -> tuple[HostPython | None, str]:
    try:
        return find_host_python(), ""
    except HarnessError as exc:
        return None, exc.brief


PYTHON, NO_PYTHON = _host_python()
SKIP = skip_reason()
needs_harness = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")
needs_python = pytest.mark.skipif(PYTHON is None, reason=NO_PYTHON)


@needs_harness
@needs_python
def test_a_core24_venv_runs_on_the_base_python_with_its_own_packages(tmp_path: Path) -> None:
    assert PYTHON is not None
    snap = build_pyvenv(tmp_path, PYTHON)
    with SnapRun(snap, tmp_path / "work", base_python=PYTHON) as run:
        result = run.run_app("show")
        venv = run.inside("/snap/pyvenv/x1/venv")
        config = (venv / "pyvenv.cfg").read_text().splitlines()
        links = {name: os.readlink(venv / "bin" / name) for name in ("python", "python3")}
        usr = {
            "python3": os.readlink(run.inside("/usr/bin/python3")),
            "site-packages": os.listdir(run.inside("/usr/lib/python3.12/site-packages")),
            "os.py": run.inside("/usr/lib/python3.12/os.py").is_file(),
            "lib-dynload": run.inside("/usr/lib/python3.12/lib-dynload").is_dir(),
        }
    site = "/snap/pyvenv/x1/venv/lib/python3.12/site-packages"
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.split() == [
        "/snap/pyvenv/x1/venv",  # sys.prefix
        "/usr",  # sys.base_prefix: core24's place, not the host's Python tree
        "/snap/pyvenv/x1/venv/bin/python3",
        f"{site}/hello/__init__.py",
        "False",  # /root/.pyenv is not there
    ]
    assert config[0] == "home = /usr/bin"
    assert links == {"python": "python3", "python3": "/usr/bin/python3"}
    assert usr == {"python3": "python3.12", "site-packages": [], "os.py": True, "lib-dynload": True}


@needs_harness
@needs_python
def test_the_base_python_is_read_only_and_leaves_the_host_alone(tmp_path: Path) -> None:
    assert PYTHON is not None
    if PYTHON.native:
        pytest.skip("the host's /usr already has Python 3.12 where core24 has it")
    probe = "open('/usr/lib/python3.12/os.py', 'a')"
    done = PYTHON.run(["/usr/bin/python3", "-c", probe], capture_output=True, text=True)
    assert (done.returncode, done.stderr.splitlines()[-1]) == (
        1,
        "OSError: [Errno 30] Read-only file system: '/usr/lib/python3.12/os.py'",
    )
    assert not os.path.exists("/usr/bin/python3.12")  # nothing reached the host's /usr


def test_a_wrong_override_and_no_python_say_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(base_module.OVERRIDE_VAR, "/bin/true")
    with pytest.raises(HarnessError, match="SNAPBUILD_BASE_PYTHON=/bin/true is not a Python 3.12"):
        find_host_python.__wrapped__()
    monkeypatch.delenv(base_module.OVERRIDE_VAR)
    monkeypatch.setattr(base_module, "_candidates", list)
    with pytest.raises(HarnessError) as caught:
        find_host_python.__wrapped__()
    assert caught.value.format() == (
        "Error: no Python 3.12 on this host for the base snap (core24) to stand in for\n"
        "  looked at: nothing found; a core24 snap's venv runs /usr/bin/python3.12\n"
        "Fix: install Python 3.12 (pyenv install 3.12, or use Ubuntu 24.04), or set "
        "SNAPBUILD_BASE_PYTHON to one; or run without the base Python (base_python=None, "
        "--no-base-python)"
    )
