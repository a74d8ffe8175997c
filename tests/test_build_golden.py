"""Golden directories: ``snapbuild make`` output compared file by file, exactly.

Each ``tests/data/build/<case>/`` holds ``manifest.yaml``, optional ``options.yaml`` (keyword
arguments for :func:`snapbuild.project.builder.make`) and ``expected/``: every file make writes,
except
the vendored ``snapbuild-src/`` copy (checked in test_build_cli). A file missing on either side
fails. ``SNAPBUILD_UPDATE_GOLDEN=1`` rewrites ``expected/`` from the current output.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from support.build import CASES, case_manifest, case_names, case_options, tree

from snapbuild.project.builder import make
from snapbuild.project.render import SOURCE_DIR


@pytest.mark.parametrize("case", case_names())
def test_golden(case: str, tmp_path: Path) -> None:
    out = tmp_path / "project"
    make(case_manifest(case), out, **case_options(case))
    produced = tree(out, skip=(SOURCE_DIR,))
    expected_dir = CASES / case / "expected"
    if os.environ.get("SNAPBUILD_UPDATE_GOLDEN") == "1":
        shutil.rmtree(expected_dir, ignore_errors=True)
        for rel, text in produced.items():
            (expected_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (expected_dir / rel).write_text(text, encoding="utf-8")
    expected = tree(expected_dir)
    assert sorted(produced) == sorted(expected), "files written differ from expected/"
    for rel in expected:
        assert produced[rel] == expected[rel], f"{case}/{rel} differs from the golden file"
    # hooks must be executable, or snapd ignores them
    for hook in (out / "snap" / "hooks").iterdir():
        assert os.access(hook, os.X_OK), hook


def test_golden_cases_exist() -> None:
    """The parametrized test above would pass vacuously with no cases."""
    assert case_names() == ["sharded", "tiny-cpu-cuda", "variant-intel"]
