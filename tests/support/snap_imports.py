"""Run with core24's Python 3.12 and nothing else on its path: which imports of a packed snap's
own packages fail with only the snap's declared packages installed?

    python3.12 -I -S snap_imports.py SITE_DIR [MORE_SITE_DIRS...]

``-I -S``: no user site, no environment, not even that interpreter's own site-packages, as in
the snap's venv (``include-system-site-packages = false``). SITE_DIR is the snap's
``lib/python3.12/site-packages`` (unpacked); the others are runtime components'
``lib/python3/site-packages``, which the daemon adds for its engine. Each is added with
``site.addsitedir`` (``.pth`` files processed, as for a venv).

Prints one JSON object: every third-party top-level module the first-party packages import
(at the top or inside functions) that cannot be found, with the files importing it, and every
first-party module that fails to import, with its error.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import pkgutil
import site
import sys
from pathlib import Path

FIRST_PARTY = ("snapcommon", "hwprobe", "runtimes", "snapbuild", "snaps")


def main(site_dirs: list[str]) -> int:
    for directory in site_dirs:
        site.addsitedir(directory)
    root = Path(site_dirs[0])
    wanted: dict[str, set[str]] = {}
    for package in FIRST_PARTY:
        for py in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(py.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in FIRST_PARTY and top not in sys.stdlib_module_names:
                        wanted.setdefault(top, set()).add(py.relative_to(root).as_posix())
    wanted.pop("__future__", None)
    missing = {
        m: sorted(f) for m, f in sorted(wanted.items()) if importlib.util.find_spec(m) is None
    }
    failures: dict[str, str] = {}
    for package in FIRST_PARTY:
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, prefix=f"{package}."):
            try:
                importlib.import_module(info.name)
            except Exception as exc:  # noqa: BLE001 - every failure is a finding to report
                failures[info.name] = f"{type(exc).__name__}: {exc}"
    json.dump(
        {
            "python": sys.version.split()[0],
            "packages": {p: str(Path(importlib.import_module(p).__file__ or "").parent)
                         for p in FIRST_PARTY},
            "missing": missing,
            "failures": failures,
        },
        sys.stdout,
        indent=2,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
