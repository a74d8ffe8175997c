"""The toolkit drives the snap from outside: snapbuild never imports snaps, and the snap never
imports the trial machinery (which the builder leaves out of the snap, see test_build_cli)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _imports(package: str) -> list[tuple[str, str]]:
    """(module file, imported name) for every import in ``package``, lazy ones included."""
    found: list[tuple[str, str]] = []
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.extend((rel, alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.extend((rel, f"{node.module}.{alias.name}") for alias in node.names)
    return found


def _into(imports: list[tuple[str, str]], target: str) -> list[tuple[str, str]]:
    return [(f, n) for f, n in imports if n == target or n.startswith(target + ".")]


def test_the_scan_sees_imports() -> None:
    assert ("snaps/cli.py", "snapbuild.cli.run_cli") in _imports("snaps")
    assert ("snapbuild/trial/run.py", "snapbuild.trial.stage.stage_components") in _imports(
        "snapbuild"
    )


def test_snapbuild_never_imports_snaps() -> None:
    assert _into(_imports("snapbuild"), "snaps") == []


def test_the_snap_never_imports_the_trial() -> None:
    assert _into(_imports("snaps"), "snapbuild.trial") == []
    assert _into(_imports("runtimes"), "snapbuild.trial") == []
