"""Helpers for the tests of the typed data tables: a broken copy of a table."""

from __future__ import annotations

import copy
from typing import Any


def changed(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A deep copy of ``data`` with the value at ``path`` (keys and list indexes) replaced
    (None: the key removed)."""
    out = copy.deepcopy(data)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out
