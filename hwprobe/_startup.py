"""Start-up settings shared by the project's own command-line processes.

``hwprobe --json`` runs in install hooks and fleet agents, and ``snapbuild``/``inference-snap``
start for every command, so their start-up is most of their run time. The first pydantic model a
process defines makes pydantic scan every installed distribution's entry points for plugins
(``importlib.metadata``): tens of milliseconds here, for plugins this project never uses.
pydantic's documented ``PYDANTIC_DISABLE_PLUGINS`` skips the scan. Only the console entry points
call this, before any model class exists, and a value the user set is kept.
"""

from __future__ import annotations

import os


def configure_process() -> None:
    """Set process-wide defaults for a snapbuild command; call before importing models."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
