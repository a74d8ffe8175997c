"""Snap naming rules that snapcraft's JSON Schema does not enforce.

The schema accepts any string as a snap, app, component or hook name; snapd does not. Checking
here turns a bad name into a clear error at ``snapbuild make`` time instead of a failed upload.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from snapcommon.errors import UsageError

# snap and component names: lowercase letters, digits, single hyphens, at least one letter,
# 2 to 40 characters (snapd's ValidateName / ValidateComponentName).
_SNAP_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9](?:-?[a-z0-9])*$")
# app names: letters (either case), digits and single hyphens (snapd's ValidateApp).
_APP_NAME = re.compile(r"^[a-zA-Z0-9](?:-?[a-zA-Z0-9])*$")
# hooks snapd knows; a hook file with another name is rejected at install time.
KNOWN_HOOKS = frozenset(
    {
        "install",
        "post-refresh",
        "pre-refresh",
        "remove",
        "configure",
        "default-configure",
        "check-health",
        "gate-auto-refresh",
        "fde-setup",
        "install-device",
    }
)
# plug names follow the snap name alphabet without the letter requirement.
_PLUG_NAME = re.compile(r"^[a-z](?:-?[a-z0-9])*$")


def name_problems(project: Mapping[str, Any]) -> list[str]:
    """Every naming-rule violation in snapcraft.yaml data, as readable sentences."""
    problems: list[str] = []
    problems += _check("snap name", [project.get("name", "")], _SNAP_NAME, 40)
    problems += _check("app name", project.get("apps", {}), _APP_NAME, None)
    problems += _check("component name", project.get("components", {}), _SNAP_NAME, 40)
    problems += _check("plug name", project.get("plugs", {}), _PLUG_NAME, None)
    for hook in project.get("hooks", {}):
        if hook not in KNOWN_HOOKS:
            problems.append(f"hook {hook!r} is not a hook snapd runs")
    return problems


def check_names(project: Mapping[str, Any]) -> None:
    """Raise a UsageError listing every naming violation, or return quietly."""
    problems = name_problems(project)
    if problems:
        raise UsageError(
            "the rendered snapcraft project breaks the snap naming rules",
            details="\n".join(problems),
            resolution="rename the manifest's snap, engines or artifacts (2-40 lowercase "
            "letters, digits and single hyphens, at least one letter)",
        )


def _check(what: str, names: Iterable[str], rule: re.Pattern[str], limit: int | None) -> list[str]:
    out = []
    for name in names:
        too_long = limit is not None and not 2 <= len(name) <= limit
        if too_long or not rule.match(name):
            out.append(f"{what} {name!r} is not valid")
    return out
