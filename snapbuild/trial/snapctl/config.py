"""``snapctl get/set/unset``: the snap's configuration, kept as snapd keeps it.

Dotted keys are nested objects, values are JSON when they parse as JSON and strings otherwise,
``key!`` unsets, and option names follow snapd's segment rule, so the in-snap code meets the
same answers and refusals it meets on a real install.
"""

from __future__ import annotations

import json
import re
from typing import Any

from snapbuild.trial.snapctl.state import StandinError, locked, read, write

# snapd's rule for each dotted segment of an option name
KEY_SEGMENT_RE = re.compile(r"^(?:[a-z0-9]+-?)*[a-z](?:-?[a-z0-9])*$")
CONFIG_FILE = "config.json"


def _check_key(key: str) -> list[str]:
    parts = key.split(".")
    for part in parts:
        if not KEY_SEGMENT_RE.match(part):
            raise StandinError(f"invalid option name: {key!r}")
    return parts


def _lookup(config: dict[str, Any], key: str) -> Any:
    node: Any = config
    for part in _check_key(key):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _assign(config: dict[str, Any], key: str, value: Any) -> None:
    parts = _check_key(key)
    node = config
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    if value is None:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def cmd_get(args: list[str]) -> str:
    document = "-d" in args
    keys = [a for a in args if not a.startswith("-")]
    config = read(CONFIG_FILE, {})
    if not keys:
        return json.dumps(config, indent=2)
    values = {k: _lookup(config, k) for k in keys}
    if document or len(keys) > 1:
        return json.dumps({k: v for k, v in values.items() if v is not None}, indent=2)
    value = values[keys[0]]
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, indent=2)


def cmd_set(args: list[str]) -> str:
    with locked():
        config = read(CONFIG_FILE, {})
        for arg in args:
            if arg.endswith("!") and "=" not in arg:
                _assign(config, arg[:-1], None)
                continue
            key, sep, text = arg.partition("=")
            if not sep:
                raise StandinError(f"invalid configuration: {arg!r} (want key=value)")
            _assign(config, key, _parse_value(text))
        write(CONFIG_FILE, config)
    return ""


def cmd_unset(args: list[str]) -> str:
    return cmd_set([f"{key}!" for key in args])
