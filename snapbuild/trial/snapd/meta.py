"""``meta/snap.yaml`` as snapd reads it: what decides how each hook, app and service runs.

snapd reads every scalar of ``environment:`` as a string, in file order (``strutil/map.go:94``),
so the file is loaded with PyYAML's ``BaseLoader`` (no ``18731`` turned into a number or ``true``
into ``True``) and the mappings keep their order. Plugs bind as snapd binds them
(``snap/info_snap_yaml.go``): a plug an app or hook lists is its own (a name not declared at the
top is an implicit plug of that interface); a top-level plug that no app or hook lists is bound to
every app and hook. Which plugs are bound, of which interfaces, and which of them are connected
decides the socket policy (:mod:`.seccomp`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from snapbuild.trial.snapd.errors import HarnessError

_Loader: Any = getattr(yaml, "CBaseLoader", yaml.BaseLoader)


@dataclass(frozen=True)
class Runnable:
    """An app or a hook: what snap-exec runs and what confines it."""

    name: str
    kind: Literal["app", "hook"]
    command: str = ""
    command_chain: tuple[str, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()
    plugs: frozenset[str] = frozenset()  # the names of the plugs bound to it
    daemon: str = ""
    restart_condition: str = "on-failure"
    restart_delay: str = ""
    install_mode: str = "enable"
    common_id: str = ""
    bus_name: str = ""

    @property
    def is_service(self) -> bool:
        return self.kind == "app" and bool(self.daemon)


@dataclass(frozen=True)
class SnapMeta:
    """The parts of meta/snap.yaml that decide how snapd runs a snap."""

    name: str
    version: str
    base: str
    confinement: str
    environment: tuple[tuple[str, str], ...]
    apps: Mapping[str, Runnable]
    hooks: Mapping[str, Runnable]
    components: tuple[str, ...]
    layout: tuple[str, ...]  # the paths snap.yaml lays out (not applied by the harness)
    interfaces: Mapping[str, str]  # plug name -> interface, for every bound plug

    @property
    def services(self) -> list[str]:
        """The daemon apps, sorted as snapd lists them."""
        return sorted(name for name, app in self.apps.items() if app.is_service)

    @classmethod
    def from_yaml(cls, text: str, hook_files: Sequence[str] = ()) -> SnapMeta:
        """Read snap.yaml; ``hook_files`` (the names in meta/hooks/) adds the hooks snapd adds
        for files that snap.yaml does not mention."""
        try:
            data = yaml.load(text, Loader=_Loader)  # BaseLoader: strings only, no objects
        except yaml.YAMLError as exc:
            raise HarnessError("meta/snap.yaml is not valid YAML", details=str(exc)) from exc
        if not isinstance(data, dict) or not data.get("name"):
            raise HarnessError("meta/snap.yaml has no name")
        declared: dict[str, str] = {}
        for plug, spec in _mapping(data.get("plugs")).items():
            declared[plug] = spec if isinstance(spec, str) and spec else plug
            if isinstance(spec, dict):
                declared[plug] = str(spec.get("interface") or plug)
        apps_data = {name: _mapping(app) for name, app in _mapping(data.get("apps")).items()}
        hooks_data: dict[str, dict[str, Any]] = {h: {} for h in hook_files}
        hooks_data.update({n: _mapping(h) for n, h in _mapping(data.get("hooks")).items()})
        listed = {p for item in (*apps_data.values(), *hooks_data.values()) for p in _plugs(item)}
        unlisted = {p for p in declared if p not in listed}

        def bound(item: dict[str, Any]) -> frozenset[str]:
            return frozenset({*_plugs(item), *unlisted})

        apps = {
            name: Runnable(
                name=name,
                kind="app",
                command=str(app.get("command") or ""),
                command_chain=tuple(_strings(app.get("command-chain"))),
                environment=_env(app.get("environment")),
                plugs=bound(app),
                daemon=str(app.get("daemon") or ""),
                restart_condition=str(app.get("restart-condition") or "on-failure"),
                restart_delay=str(app.get("restart-delay") or ""),
                install_mode=str(app.get("install-mode") or "enable"),
                common_id=str(app.get("common-id") or ""),
                bus_name=str(app.get("bus-name") or ""),
            )
            for name, app in apps_data.items()
        }
        hooks = {
            name: Runnable(
                name=name,
                kind="hook",
                command_chain=tuple(_strings(hook.get("command-chain"))),
                environment=_env(hook.get("environment")),
                plugs=bound(hook),
            )
            for name, hook in hooks_data.items()
        }
        return cls(
            name=str(data["name"]),
            version=str(data.get("version") or ""),
            base=str(data.get("base") or ""),
            confinement=str(data.get("confinement") or "strict"),
            environment=_env(data.get("environment")),
            apps=apps,
            hooks=hooks,
            components=tuple(_mapping(data.get("components"))),
            layout=tuple(_mapping(data.get("layout"))),
            interfaces={p: declared.get(p, p) for p in sorted({*listed, *unlisted})},
        )


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _plugs(item: dict[str, Any]) -> list[str]:
    return _strings(item.get("plugs"))


def _env(value: Any) -> tuple[tuple[str, str], ...]:
    """An ``environment:`` mapping in file order; an empty value is ""."""
    return tuple((str(k), "" if v is None else str(v)) for k, v in _mapping(value).items())


def snap_name(snap_file: Path) -> str:
    """The name in a ``.snap``'s meta/snap.yaml (read with unsquashfs, nothing mounted)."""
    out = subprocess.run(
        ["unsquashfs", "-cat", str(snap_file), "meta/snap.yaml"],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise HarnessError(f"cannot read meta/snap.yaml from {snap_file}", details=out.stderr)
    return SnapMeta.from_yaml(out.stdout).name
