"""Where the stand-in keeps what snapd would keep, and the lock that serializes its callers.

Every command reads and writes small JSON files under ``$SNAPCTL_STANDIN_STATE``; concurrent
calls (a hook and the daemon it started) take one lock, as snapd's state lock serializes them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from snapcommon.files import write_atomically

STATE_VAR = "SNAPCTL_STANDIN_STATE"
STAGED_VAR = "SNAPCTL_STANDIN_COMPONENTS"
HOOK_VAR = "SNAPCTL_STANDIN_HOOK"  # set by the hook runner: we are inside that hook


class StandinError(Exception):
    """A refusal, printed as ``error: ...`` with exit status 1 like snapctl."""


def state_dir() -> Path:
    value = os.environ.get(STATE_VAR)
    if not value:
        raise StandinError(f"{STATE_VAR} is not set: this stand-in keeps its state there")
    path = Path(value)
    path.mkdir(parents=True, exist_ok=True)
    return path


def read(name: str, default: Any) -> Any:
    path = state_dir() / name
    if not path.exists():
        return default
    return json.loads(path.read_text(encoding="utf-8"))


def write(name: str, data: Any) -> None:
    """Replace a state file atomically (a concurrent reader never sees half of it)."""
    path = state_dir() / name
    write_atomically(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """Serialize concurrent snapctl calls, as snapd's state lock does."""
    with (state_dir() / "lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield
