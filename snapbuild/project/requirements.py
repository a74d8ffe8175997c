"""What the snap's own Python part installs: pyproject.toml's ``serve`` extra, read from the file.

The ``snapbuild`` part (snapcraft's python plugin) installs snapbuild's source, which brings the
core ``dependencies``, plus its ``python-packages``. Extras are not installed by ``pip install
.``, so what the server imports beyond the core (FastAPI, uvicorn, httpx, httptools, orjson,
uvloop, Pillow) must be listed there. One list serves both the toolkit (``pip install
.[serve]``) and the snap, so a server dependency added for ``snapbuild serve`` cannot be missing
from the snap: the rendered part copies the extra as written, environment markers included
(pip evaluates them on the build machine, which is the target's architecture).
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

from snapbuild.paths import project_root
from snapcommon.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML through the tomli backport
    import tomli as tomllib

SERVE_EXTRA = "serve"


def serve_requirements(root: Path | None = None) -> tuple[str, ...]:
    """The ``serve`` extra of ``root``'s pyproject.toml (default: this installation's)."""
    return _extra((root or project_root()) / "pyproject.toml", SERVE_EXTRA)


@cache
def _extra(pyproject: Path, name: str) -> tuple[str, ...]:
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(
            f"cannot read snapbuild's own {pyproject.name}: the snap's python part takes its "
            f"packages from its `{name}` extra",
            details=f"{pyproject}: {exc}",
            resolution="run snapbuild from its source tree (or set SNAPBUILD_HOME to one)",
        ) from exc
    extras = data.get("project", {}).get("optional-dependencies", {})
    if not extras.get(name):
        raise UsageError(f"{pyproject} has no `{name}` extra in [project.optional-dependencies]")
    return tuple(str(req) for req in extras[name])
