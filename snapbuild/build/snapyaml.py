"""``meta/snap.yaml`` as snapcraft writes it from a snapcraft.yaml (for one architecture).

``snapbuild try`` assembles a snap without snapcraft, and the builder's tests pack a skeleton
with ``snap pack --check-skeleton``; both need the installed-snap metadata that snapcraft would
derive. Only the keys this project's snapcraft.yaml uses are translated.
"""

from __future__ import annotations

import copy
from typing import Any

from snapbuild.errors import UsageError

# What snapcraft adds for non-bare bases so staged binaries and libraries are found.
DEFAULT_ENVIRONMENT = {
    "LD_LIBRARY_PATH": "${SNAP_LIBRARY_PATH}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}",
    "PATH": "$SNAP/usr/sbin:$SNAP/usr/bin:$SNAP/sbin:$SNAP/bin:$PATH",
}
# Top-level keys copied unchanged, in snapcraft's order.
_COPIED = ("name", "title", "version", "summary", "description", "license")
_TAIL = ("base", "assumes", "confinement", "grade")
_APP_KEYS = (
    "command",
    "command-chain",
    "daemon",
    "restart-condition",
    "install-mode",
    "plugs",
    "environment",
)
_COMPONENT_KEYS = ("type", "summary", "description", "version")


def snap_yaml(project: dict[str, Any], architecture: str | None = None) -> dict[str, Any]:
    """The ``meta/snap.yaml`` data snapcraft writes for ``project`` built for ``architecture``.

    ``architecture`` defaults to the first platform's build-for.
    """
    platforms = project.get("platforms") or {}
    targets = [p.get("build-for", [name])[0] for name, p in platforms.items() if p]
    arch = architecture or (targets[0] if targets else None)
    if arch is None or (targets and arch not in targets):
        raise UsageError(
            f"architecture {arch!r} is not among the project's platforms",
            details=f"platforms build for: {', '.join(targets) or 'none'}",
        )
    meta: dict[str, Any] = {k: project[k] for k in _COPIED if k in project}
    meta["architectures"] = [arch]
    meta.update({k: copy.deepcopy(project[k]) for k in _TAIL if k in project})
    meta["environment"] = {**DEFAULT_ENVIRONMENT, **project.get("environment", {})}
    if project.get("apps"):
        meta["apps"] = {
            name: {k: copy.deepcopy(app[k]) for k in _APP_KEYS if k in app}
            for name, app in project["apps"].items()
        }
    if project.get("hooks"):
        meta["hooks"] = copy.deepcopy(project["hooks"])
    if project.get("plugs"):
        meta["plugs"] = copy.deepcopy(project["plugs"])
    if project.get("components"):
        meta["components"] = {
            name: {k: comp[k] for k in _COMPONENT_KEYS if k in comp}
            for name, comp in project["components"].items()
        }
    return meta


def component_yaml(project: dict[str, Any], component: str) -> dict[str, Any]:
    """A component's ``meta/component.yaml`` (``<snap>+<component>``, type, version...)."""
    comp = project["components"][component]
    return {
        "component": f"{project['name']}+{component}",
        "type": comp["type"],
        "version": comp.get("version", project.get("version")),
        "summary": comp["summary"],
        "description": comp["description"],
    }
