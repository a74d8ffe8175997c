"""Where an Ansible inventory's hosts get their hwprobe facts: variables, precedence, profiles.

The two inventory formats (:mod:`snapbuild.fleet.ansible_inventory`) reduce a file to groups,
hosts and the fact variables set on them; this module holds that reduced form, reads the
``host_vars/`` and ``group_vars/`` files beside the inventory, applies Ansible's precedence and
turns each host's winning variable into a profile (see that module's docstring for the rules).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap

from snapbuild.fleet.inventory import Inventory, machine_root_of, probe_root, validate_profile
from snapbuild.manifest import yaml_rt

FACT_VARS = ("hwprobe", "hwprobe_profile_file", "hwprobe_machine_root")
# precedence levels of where a fact variable was set (higher wins)
LEVEL_GROUP_FILE = 10_000
LEVEL_HOST = 20_000
LEVEL_HOST_FILE = 30_000


@dataclass
class Var:
    value: Any
    origin: str  # "file:line"
    level: int


@dataclass
class Group:
    name: str
    vars: dict[str, Var] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)


@dataclass
class Host:
    name: str
    line: int
    groups: list[str] = field(default_factory=list)
    vars: dict[str, Var] = field(default_factory=dict)


@dataclass
class Parsed:
    """An inventory file reduced to what planning needs: groups, hosts and their fact vars."""

    file: Path
    groups: dict[str, Group] = field(default_factory=dict)
    hosts: dict[str, Host] = field(default_factory=dict)

    def group(self, name: str) -> Group:
        return self.groups.setdefault(name, Group(name))

    def host(self, name: str, line: int, group: str) -> Host:
        host = self.hosts.setdefault(name, Host(name, line))
        if group not in host.groups:
            host.groups.append(group)
        self.group(group)
        return host


# -- YAML ----------------------------------------------------------------------------------------
# Files are read with ruamel.yaml's round-trip loader (:mod:`snapbuild.manifest.yaml_rt`, as
# manifests
# are): its mappings carry the line of every key, which each message here names.
def load_yaml(path: Path, inventory: Inventory) -> tuple[Any, int] | None:
    """The document of ``path`` and the line where it starts; None (reported) when the file
    cannot be read, is not YAML or is empty. Keys written twice are reported: the first is
    read."""
    try:
        document = yaml_rt.load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        inventory.report(str(path), None, f"cannot read the file: {exc}")
        return None
    except yaml_rt.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        inventory.report(str(path), line, f"invalid YAML: {getattr(exc, 'problem', exc)}")
        return None
    if document.tree is None:
        inventory.report(str(path), None, "the file is empty")
        return None
    for loc, line in document.duplicates:
        inventory.report(
            str(path),
            line,
            f"{yaml_rt.field_name(loc)} appears twice: this one is ignored (merge the two)",
        )
    return document.tree, _start_line(document)


def _start_line(document: yaml_rt.Document) -> int:
    """Where the document's root starts: a container knows it; a lone scalar sits on the
    first line that is not blank, a comment, a directive or a bare ``---``."""
    if hasattr(document.tree, "lc"):
        return int(document.tree.lc.line) + 1
    for number, raw in enumerate(document.text.splitlines(), 1):
        text = raw.strip()
        if text and text[0] not in "#%" and text != "---":
            return number
    return 1


def is_mapping(node: Any) -> bool:
    return isinstance(node, dict)


def items(mapping: CommentedMap) -> Iterator[tuple[str, int, Any]]:
    """Each key (as text), the line it is written on, and its value."""
    own = mapping.lc.data or {}  # None when every key came from a merge
    for key, value in mapping.items():
        at = own.get(key)
        line = int(at[0]) if at is not None else int(mapping.lc.line or 0)  # a merged (<<) key
        yield str(key), line + 1, value


def yaml_vars(
    parsed: Parsed, inventory: Inventory, node: Any, level: int, key_line: int
) -> dict[str, Var]:
    """The fact variables of a ``vars`` mapping (or a host's), written at ``key_line``."""
    file = str(parsed.file)
    if node is None:
        return {}
    if not is_mapping(node):
        inventory.report(file, key_line, "variables must be a mapping of name: value")
        return {}
    found = {}
    for name, line, value in items(node):
        if name in FACT_VARS:
            found[name] = Var(yaml_rt.plain(value), f"{file}:{line}", level)
    return found


# -- host_vars/ and group_vars/ ------------------------------------------------------------------
def _vars_file(folder: Path, name: str, inventory: Inventory, level: int) -> dict[str, Var]:
    for suffix in (".yml", ".yaml", ".json"):
        path = folder / f"{name}{suffix}"
        if path.is_file():
            loaded = load_yaml(path, inventory)
            if loaded is None:
                return {}
            tree, line = loaded
            return yaml_vars(Parsed(path), inventory, tree, level, line)
    return {}


# -- resolution ----------------------------------------------------------------------------------
def _depths(parsed: Parsed) -> dict[str, int]:
    """Distance of each group from ``all`` (groups nobody lists as a child sit at depth 1)."""
    depth = {"all": 0}
    frontier = ["all", *(g for g in parsed.groups if g != "all" and not _is_child(parsed, g))]
    for name in frontier[1:]:
        depth[name] = 1
    while frontier:
        name = frontier.pop(0)
        for child in parsed.groups[name].children:
            if child not in depth:
                depth[child] = depth[name] + 1
                frontier.append(child)
    return depth


def _is_child(parsed: Parsed, name: str) -> bool:
    return any(name in g.children for g in parsed.groups.values())


def _ancestors(parsed: Parsed, groups: list[str]) -> set[str]:
    parents: dict[str, set[str]] = {}
    for group in parsed.groups.values():
        for child in group.children:
            parents.setdefault(child, set()).add(group.name)
    seen: set[str] = {"all"}
    todo = list(groups)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(parents.get(name, ()))
    return seen


class VarResolver:
    """Merges a host's fact variables from its groups, vars files and own line (cached)."""

    def __init__(self, parsed: Parsed, inventory: Inventory) -> None:
        self.parsed = parsed
        self.inventory = inventory
        self.depth = _depths(parsed)
        self.files: dict[tuple[str, str], dict[str, Var]] = {}

    def _file(self, kind: str, name: str, level: int) -> dict[str, Var]:
        if (kind, name) not in self.files:
            folder = self.parsed.file.parent / kind
            self.files[kind, name] = _vars_file(folder, name, self.inventory, level)
        return self.files[kind, name]

    def facts(self, host: Host) -> dict[str, Var]:
        merged: dict[str, Var] = {}
        groups = _ancestors(self.parsed, host.groups)
        for name in sorted(groups, key=lambda g: (self.depth.get(g, 1), g)):
            level = self.depth.get(name, 1)
            for var_name, var in self.parsed.groups[name].vars.items():
                merged[var_name] = Var(var.value, var.origin, level)
            merged.update(self._file("group_vars", name, LEVEL_GROUP_FILE + level))
        merged.update(host.vars)
        merged.update(self._file("host_vars", host.name, LEVEL_HOST_FILE))
        return {k: v for k, v in merged.items() if k in FACT_VARS}


def resolve(parsed: Parsed, inventory: Inventory) -> None:
    """Turn each host's winning fact variable into a profile, in the order hosts were listed."""
    file = str(parsed.file)
    loader = _FactLoader(parsed.file.parent, inventory)
    resolver = VarResolver(parsed, inventory)
    if not parsed.hosts:
        inventory.report(file, None, "the inventory lists no hosts")
    for host in parsed.hosts.values():
        facts = resolver.facts(host)
        if not facts:
            inventory.report(
                file,
                host.line,
                f"host {host.name!r} carries no hwprobe facts: set one of "
                "hwprobe, hwprobe_profile_file or hwprobe_machine_root (see docs/fleet.md)",
            )
            continue
        top = max(v.level for v in facts.values())
        winners = sorted(k for k, v in facts.items() if v.level == top)
        if len(winners) > 1:
            where = ", ".join(f"{k} ({facts[k].origin})" for k in winners)
            inventory.report(file, host.line, f"host {host.name!r} sets both {where}: keep one")
            continue
        loader.load(host, winners[0], facts[winners[0]], file)


class _FactLoader:
    """Loads fact variables into profiles, once per shared file or machine root."""

    def __init__(self, folder: Path, inventory: Inventory) -> None:
        self.folder = folder
        self.inventory = inventory
        self.cache: dict[Path, str | Exception] = {}

    def load(self, host: Host, name: str, var: Var, file: str) -> None:
        where = f"{name} ({var.origin})"
        if name == "hwprobe":
            data = var.value
            if isinstance(data, str):
                try:
                    data = json.loads(data)
                except json.JSONDecodeError as exc:
                    self.inventory.report(
                        file,
                        host.line,
                        f"host {host.name!r}: {where} is not valid JSON: {exc.msg}"
                        f" (column {exc.colno})",
                    )
                    return
            if isinstance(data, dict):
                data = {k: v for k, v in data.items() if k != "hostname"}
            try:
                profile = validate_profile(data)
            except ValueError as exc:
                self.inventory.report(file, host.line, f"host {host.name!r}: {where}: {exc}")
                return
            self.inventory.add_host(host.name, file, host.line, self.inventory.add_profile(profile))
            return
        if not isinstance(var.value, str) or not var.value:
            self.inventory.report(file, host.line, f"host {host.name!r}: {where} must be a path")
            return
        path = (self.folder / var.value).resolve()
        if path not in self.cache:
            self.cache[path] = self._key(path, var.value, name)
        outcome = self.cache[path]
        if isinstance(outcome, Exception):
            self.inventory.report(file, host.line, f"host {host.name!r}: {where}: {outcome}")
        else:
            self.inventory.add_host(host.name, file, host.line, outcome)

    def _key(self, path: Path, shown: str, name: str) -> str | Exception:
        try:
            if name == "hwprobe_machine_root":
                root = machine_root_of(path)
                if root is None:
                    raise ValueError(
                        f"{shown} is not a recorded machine "
                        "(it has no machine-root/, proc/ or sys/)"
                    )
                return self.inventory.add_profile(probe_root(root))
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                data.pop("hostname", None)
            return self.inventory.add_profile(validate_profile(data))
        except json.JSONDecodeError as exc:
            return ValueError(f"{shown} is not valid JSON: {exc.msg} (line {exc.lineno})")
        except FileNotFoundError:
            return ValueError(f"{shown} does not exist (paths are relative to the inventory file)")
        except ValueError as exc:
            return exc
        except OSError as exc:
            return ValueError(f"cannot read {shown}: {exc.strerror}")
