"""``meta/snap.yaml`` as snapcraft writes it from a snapcraft.yaml (for one architecture).

``snapbuild try`` assembles a snap without snapcraft, and the builder's tests pack a skeleton
with ``snap pack --check-skeleton``; both need the installed-snap metadata that snapcraft would
derive. Only the keys this project's snapcraft.yaml uses are translated.
"""

from __future__ import annotations

import copy
from typing import Any

from snapcommon.errors import UsageError

# What snapcraft adds for non-bare bases so staged binaries and libraries are found.
DEFAULT_ENVIRONMENT = {
    "LD_LIBRARY_PATH": "${SNAP_LIBRARY_PATH}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}",
    "PATH": "$SNAP/usr/sbin:$SNAP/usr/bin:$SNAP/sbin:$SNAP/bin:$PATH",
}
# Debian multiarch triplets: what snapcraft substitutes for $CRAFT_ARCH_TRIPLET_BUILD_FOR.
ARCH_TRIPLETS = {
    "amd64": "x86_64-linux-gnu",
    "arm64": "aarch64-linux-gnu",
    "armhf": "arm-linux-gnueabihf",
    "riscv64": "riscv64-linux-gnu",
    "s390x": "s390x-linux-gnu",
    "ppc64el": "powerpc64le-linux-gnu",
    "i386": "i386-linux-gnu",
}
# What snapcraft 9.0.1's `gpu` extension adds for core24 (snapcraft/extensions/gpu_extension.py):
# the gpu-2404 content plug, its layouts, and its wrapper first in each app's command-chain.
GPU_2404_PLUG = {
    "gpu-2404": {
        "interface": "content",
        "target": "$SNAP/gpu-2404",
        "default-provider": "mesa-2404",
    }
}
GPU_2404_LAYOUT = {
    "/usr/share/libdrm": {"bind": "$SNAP/gpu-2404/libdrm"},
    "/usr/share/drirc.d": {"symlink": "$SNAP/gpu-2404/drirc.d"},
    "/usr/share/X11/XErrorDB": {"symlink": "$SNAP/gpu-2404/X11/XErrorDB"},
}
GPU_2404_WRAPPER = "snap/command-chain/gpu-2404-wrapper"
# Top-level keys copied unchanged, in snapcraft's order.
_COPIED = ("name", "title", "version", "summary", "description", "license")
_TAIL = ("base", "assumes", "confinement", "grade")
_LINKS = ("contact", "donation", "issues", "source-code", "website")
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
    project = _apply_extensions(project)
    meta: dict[str, Any] = {k: project[k] for k in _COPIED if k in project}
    meta["architectures"] = [arch]
    meta.update({k: copy.deepcopy(project[k]) for k in _TAIL if k in project})
    if any("command-chain" in app for app in (project.get("apps") or {}).values()):
        meta["assumes"] = sorted({*meta.get("assumes", []), "command-chain"})
    triplet = ARCH_TRIPLETS.get(arch, "")
    environment = {
        k: str(v).replace("$CRAFT_ARCH_TRIPLET_BUILD_FOR", triplet)
        for k, v in (project.get("environment") or {}).items()
    }
    meta["environment"] = {**DEFAULT_ENVIRONMENT, **environment}
    if project.get("apps"):
        meta["apps"] = {
            name: {k: copy.deepcopy(app[k]) for k in _APP_KEYS if k in app}
            for name, app in project["apps"].items()
        }
    if project.get("hooks"):
        meta["hooks"] = copy.deepcopy(project["hooks"])
    if project.get("plugs"):
        meta["plugs"] = copy.deepcopy(project["plugs"])
    if project.get("slots"):
        meta["slots"] = copy.deepcopy(project["slots"])
    if project.get("layout"):
        meta["layout"] = copy.deepcopy(project["layout"])
    links = {k: _as_list(project[k]) for k in _LINKS if project.get(k)}
    if links:
        meta["links"] = links
    if project.get("components"):
        meta["components"] = {
            name: {k: comp[k] for k in _COMPONENT_KEYS if k in comp}
            for name, comp in project["components"].items()
        }
    return meta


def _as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _apply_extensions(project: dict[str, Any]) -> dict[str, Any]:
    """The project after snapcraft applies the apps' extensions (only ``gpu`` is known here)."""
    apps = project.get("apps") or {}
    used = {x for app in apps.values() for x in app.get("extensions", [])}
    unknown = used - {"gpu"}
    if unknown:
        raise UsageError(f"extension {', '.join(sorted(unknown))} is not supported here")
    if not used:
        return project
    out = copy.deepcopy(project)
    for app in out["apps"].values():
        if "gpu" in app.pop("extensions", []):
            app["command-chain"] = [GPU_2404_WRAPPER, *app.get("command-chain", [])]
    out["plugs"] = {**GPU_2404_PLUG, **out.get("plugs", {})}
    out["layout"] = {**GPU_2404_LAYOUT, **out.get("layout", {})}
    return out


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
