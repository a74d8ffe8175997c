"""Rollout files from a plan: an Ansible playbook with inventory variables, or cloud-init user-data.

Templates live in ``templates/fleet/`` and are rendered with ``StrictUndefined``; every value that
reaches YAML goes through :func:`yaml_value` (JSON, which YAML reads as a quoted scalar or a flow
sequence), and pure data files (the planned inventory, the groups list) are written with
``yaml.safe_dump``: a hostname never becomes YAML syntax.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

import jinja2
import yaml

from snapbuild.fleet.planner import FleetPlan
from snapbuild.paths import templates_dir
from snapcommon.errors import UsageError

SnapModule = Literal["community", "builtin"]
PLANNED_GROUP = "snapbuild_planned"
NO_ENGINE_GROUP = "snapbuild_no_engine"
_CHANNEL_RE = re.compile(
    r"^(?:[a-z0-9][a-z0-9.+_-]*/)?(?:stable|candidate|beta|edge)(?:/[a-z0-9._-]+)?$"
)


def yaml_value(value: Any) -> str:
    """A value as YAML text that parses back to exactly ``value`` (JSON is a subset of YAML)."""
    return json.dumps(value, ensure_ascii=False)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir() / "fleet")),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )
    env.filters["yaml_value"] = yaml_value
    return env


def check_channel(channel: str) -> str:
    """A snap channel (``stable``, ``latest/edge``, ``2/beta/fix``), or UsageError."""
    if not _CHANNEL_RE.match(channel):
        raise UsageError(
            f"invalid snap channel {channel!r}",
            resolution="use [track/]risk[/branch] with risk one of stable, candidate, beta, edge",
        )
    return channel


def engine_groups(plan: FleetPlan) -> dict[str | None, list[str]]:
    """Hostnames per planned engine (None: no engine), engines in manifest order."""
    order = [e.name for e in plan.manifest.engines]
    groups: dict[str | None, list[str]] = {}
    for host in plan.inventory.hosts:
        selected = plan.outcomes[host.key].selected
        groups.setdefault(selected["engine"] if selected else None, []).append(host.hostname)
    return dict(sorted(groups.items(), key=lambda kv: order.index(kv[0]) if kv[0] else len(order)))


def ansible_group(snap: str, engine: str) -> str:
    """An Ansible group name for an engine (Ansible wants underscores, engines use hyphens)."""
    return f"snapbuild_{snap}_{engine}".replace("-", "_")


def planned_inventory(plan: FleetPlan, channel: str) -> dict[str, Any]:
    """The YAML inventory: one group per engine with ``snapbuild_engine``, shared vars on all."""
    snap = plan.manifest.name
    children: dict[str, Any] = {}
    planned: dict[str, Any] = {}
    for engine, hosts in engine_groups(plan).items():
        members = {name: None for name in hosts}
        if engine is None:
            children[NO_ENGINE_GROUP] = {"hosts": members}
            continue
        planned[ansible_group(snap, engine)] = {
            "hosts": members,
            "vars": {"snapbuild_engine": engine},
        }
    children = {PLANNED_GROUP: {"children": planned}, **children}
    return {
        "all": {
            "vars": {
                "snapbuild_snap": snap,
                "snapbuild_channel": channel,
                "snapbuild_hwprobe_command": ["hwprobe", "--json"],
                "snapbuild_profiles_dir": "profiles",
            },
            "children": children,
        }
    }


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _dump(data: Any, header: str) -> str:
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)


def emit_ansible(
    plan: FleetPlan, folder: Path, *, channel: str = "stable", snap_module: SnapModule = "community"
) -> list[Path]:
    """site.yml, inventory.yml and requirements.yml under ``folder``."""
    check_channel(channel)
    snap = plan.manifest.name
    playbook = (
        _environment()
        .get_template("ansible/site.yml.j2")
        .render(snap=snap, channel=channel, planned_group=PLANNED_GROUP, snap_module=snap_module)
    )
    inventory = _dump(
        planned_inventory(plan, channel),
        f"# Planned engines for the {snap} snap, from `snapbuild fleet plan --emit ansible`.\n"
        "# Hosts without an engine are in snapbuild_no_engine and get nothing installed.\n",
    )
    requirements = _dump(
        {"collections": [{"name": "community.general", "version": ">=8.0.0"}]},
        "# The playbook installs the snap with community.general.snap.\n",
    )
    written = [_write(folder / "site.yml", playbook), _write(folder / "inventory.yml", inventory)]
    if snap_module == "community":
        written.append(_write(folder / "requirements.yml", requirements))
    return written


def emit_cloud_init(plan: FleetPlan, folder: Path, *, channel: str = "stable") -> list[Path]:
    """``user-data-<engine>.yaml`` per planned engine, and groups.yaml listing their hosts."""
    check_channel(channel)
    snap = plan.manifest.name
    template = _environment().get_template("cloud-init/user-data.yaml.j2")
    written = []
    groups = engine_groups(plan)
    for engine, hosts in groups.items():
        if engine is None:
            continue
        text = template.render(snap=snap, channel=channel, engine=engine, hosts=len(hosts))
        written.append(_write(folder / f"user-data-{engine}.yaml", text))
    listing = {
        "snap": snap,
        "engines": {
            e: {"user-data": f"user-data-{e}.yaml", "hosts": h} for e, h in groups.items() if e
        },
        "no-engine": groups.get(None, []),
    }
    header = f"# Which hosts get which user-data file, from `snapbuild fleet plan {snap}`.\n"
    written.append(_write(folder / "groups.yaml", _dump(listing, header)))
    return written
