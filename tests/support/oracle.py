"""snapcraft 9.0.1 as the judge of rendered projects (the tests' side).

snapcraft lives in its own virtualenv (it pins its own pydantic, craft-* libraries and Python
packages that clash with ours): ``$SNAPBUILD_SNAPCRAFT_VENV``, or ``<repo>/.venv-snapcraft``,
installed by ``make install`` with ``bash ../shared/oracles/install-snapcraft.sh``. The tests
run snapcraft's own code there as subprocesses: ``snapcraft_check.py`` for a whole batch of
project directories at once, and the real ``snapcraft expand-extensions`` command.

Where ``../shared`` (the developer's and CI's shared data, which holds the installer) is absent
a test may skip; where it is present a missing venv is a failure that says how to install it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
SHARED = REPO.parent / "shared"
INSTALLER = SHARED / "oracles" / "install-snapcraft.sh"
VENV_VAR = "SNAPBUILD_SNAPCRAFT_VENV"
CHECK_SCRIPT = Path(__file__).with_name("snapcraft_check.py")


def venv() -> Path:
    """Where snapcraft's virtualenv is expected."""
    return Path(os.environ.get(VENV_VAR) or REPO / ".venv-snapcraft").resolve()


def require() -> Path:
    """The venv's directory; skip without ../shared, fail (saying how to fix) without the venv."""
    where = venv()
    if (where / "bin" / "snapcraft").is_file():
        return where
    if not SHARED.is_dir():
        pytest.skip(
            f"snapcraft 9.0.1 is not installed at {where} and {SHARED} (the shared data beside "
            "the checkout, which holds its installer) is absent"
        )
    pytest.fail(
        f"snapcraft 9.0.1 is not installed at {where}: run `make install`, or "
        f"`bash {INSTALLER} {where}` (or point ${VENV_VAR} at a venv holding it)",
        pytrace=False,
    )


def check(project_dirs: Iterable[Path]) -> dict[str, dict[str, Any]]:
    """snapcraft's verdict on each project directory (see snapcraft_check.py), in one process."""
    dirs = [str(Path(d).resolve()) for d in project_dirs]
    proc = subprocess.run(
        [str(require() / "bin" / "python"), str(CHECK_SCRIPT)],
        input=json.dumps(dirs),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, f"the snapcraft oracle crashed:\n{proc.stderr[-4000:]}"
    results: dict[str, dict[str, Any]] = json.loads(proc.stdout)
    return results


def problems(result: dict[str, Any]) -> list[str]:
    """Every rejection in one directory's verdict, as readable lines (empty: accepted)."""
    out = [
        f"{b.get('platform')} ({b.get('build-on')} -> {b.get('build-for')}): {b['error']}"
        for b in result["builds"]
        if "error" in b
    ]
    if "error" in result["expand"]:
        out.append(f"expand-extensions: {result['expand']['error']}")
    return out


def expand_extensions(project_dir: Path) -> subprocess.CompletedProcess[str]:
    """The real ``snapcraft expand-extensions`` command, run in the project directory."""
    env = {**os.environ, "SNAPCRAFT_BUILD_ENVIRONMENT": "host"}
    return subprocess.run(
        [str(require() / "bin" / "snapcraft"), "expand-extensions"],
        cwd=project_dir,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
    )
