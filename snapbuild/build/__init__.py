"""The builder's steps: from a manifest to a snapcraft project for one inference snap.

:mod:`.plan` decides what goes into the snap (engines, components, shards), :mod:`.project`
turns a plan into snapcraft.yaml data, :mod:`.snapyaml` derives the ``meta/snap.yaml`` snapcraft
would write, :mod:`.naming` checks the snap naming rules the JSON Schema does not, and
:mod:`.render` writes the files through a strict jinja2 environment. :mod:`snapbuild.builder`
is the public face. (The repository's .gitignore matches ``build/``: new files here need
``git add -f``.)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from snapbuild.builder import BuiltProject


def render_project(
    model: str, dest: Path, *, engines: list[str] | None = None, **options: Any
) -> BuiltProject:
    """Render ``model`` into ``dest`` (see :func:`snapbuild.builder.make`)."""
    from snapbuild.builder import make

    return make(model, dest, engines=tuple(engines or ()), **options)
