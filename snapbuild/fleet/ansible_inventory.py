"""Ansible inventories (INI and YAML) whose hosts carry hwprobe facts.

Operators who run Ansible already have the fleet's host list; what a plan needs on top is each
host's hardware profile, carried in one of three host variables (set on the host, on any group it
belongs to, or in ``host_vars/<host>.yml`` / ``group_vars/<group>.yml`` beside the inventory):

- ``hwprobe``: the profile itself (a mapping in YAML, a JSON string in INI), as ``hwprobe --json``
  prints it; this is what the gather play of ``fleet plan --emit ansible`` stores;
- ``hwprobe_profile_file``: a path (relative to the inventory file) of a JSON profile, so a whole
  group of identical kiosks can share one file through group vars;
- ``hwprobe_machine_root``: a recorded machine folder (``machine-root/``, or ``proc/`` + ``sys/``).

The most specific definition wins: group vars by depth (``all`` first), then ``group_vars/`` files,
then the host's own line, then ``host_vars/`` files. A host with none of them, a malformed line, or
a profile that does not validate is reported with its file and line and skipped. Host ranges like
``kiosk[001:250]`` expand as Ansible expands them. The parser is our own (not ansible-core's) so
that errors carry line numbers and planning does not need Ansible installed.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from snapbuild.fleet.inventory import (
    Inventory,
    machine_root_of,
    probe_root,
    validate_profile,
)

FACT_VARS = ("hwprobe", "hwprobe_profile_file", "hwprobe_machine_root")
_RANGE_RE = re.compile(r"\[([0-9]+|[a-z]):([0-9]+|[a-z])(?::([0-9]+))?\]")
_SECTION_RE = re.compile(r"^\[([^\[\]:\s]+)(?::(vars|children))?\]$")
_GROUP_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
# precedence levels of where a fact variable was set (higher wins)
_LEVEL_GROUP_FILE = 10_000
_LEVEL_HOST = 20_000
_LEVEL_HOST_FILE = 30_000


@dataclass
class _Var:
    value: Any
    origin: str  # "file:line"
    level: int


@dataclass
class _Group:
    name: str
    vars: dict[str, _Var] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)


@dataclass
class _Host:
    name: str
    line: int
    groups: list[str] = field(default_factory=list)
    vars: dict[str, _Var] = field(default_factory=dict)


@dataclass
class _Parsed:
    """An inventory file reduced to what planning needs: groups, hosts and their fact vars."""

    file: Path
    groups: dict[str, _Group] = field(default_factory=dict)
    hosts: dict[str, _Host] = field(default_factory=dict)

    def group(self, name: str) -> _Group:
        return self.groups.setdefault(name, _Group(name))

    def host(self, name: str, line: int, group: str) -> _Host:
        host = self.hosts.setdefault(name, _Host(name, line))
        if group not in host.groups:
            host.groups.append(group)
        self.group(group)
        return host


def expand_host_pattern(pattern: str) -> list[str]:
    """``kiosk[01:03]`` -> kiosk01, kiosk02, kiosk03 (numeric keeps its zero padding; ``[a:c]``)."""
    match = _RANGE_RE.search(pattern)
    if match is None:
        return [pattern]
    start, end, step_text = match.groups()
    step = int(step_text) if step_text else 1
    head, tail = pattern[: match.start()], pattern[match.end() :]
    if start.isdigit() != end.isdigit() or step < 1:
        raise ValueError(f"bad host range {match.group(0)!r} in {pattern!r}")
    if start.isdigit():
        width = len(start) if start.startswith("0") else 0
        items = [str(n).zfill(width) for n in range(int(start), int(end) + 1, step)]
    else:
        items = [chr(c) for c in range(ord(start), ord(end) + 1, step)]
    if not items:
        raise ValueError(f"empty host range {match.group(0)!r} in {pattern!r}")
    return [name for item in items for name in expand_host_pattern(head + item + tail)]


# -- INI -----------------------------------------------------------------------------------------
def read_ansible_ini(path: Path, inventory: Inventory) -> None:
    """An INI inventory: ``[group]``, ``[group:vars]``, ``[group:children]``, ``host k=v``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        inventory.report(str(path), None, f"cannot read the inventory: {exc}")
        return
    parsed = _Parsed(path)
    parsed.group("all")
    first_issue = len(inventory.issues)
    section, kind = "ungrouped", "hosts"
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            match = _SECTION_RE.match(line)
            if match is None:
                inventory.report(
                    str(path),
                    number,
                    f"bad section header {line!r} (its entries are skipped): use [group], "
                    "[group:vars] or [group:children]",
                )
                section, kind = "", "skip"
                continue
            section, kind = match.group(1), match.group(2) or "hosts"
            parsed.group(section)
            continue
        _ini_line(parsed, inventory, section, kind, line, number)
    _resolve(parsed, inventory)
    _sort_issues(inventory, first_issue)


def _ini_line(
    parsed: _Parsed, inventory: Inventory, section: str, kind: str, line: str, number: int
) -> None:
    file = str(parsed.file)
    origin = f"{file}:{number}"
    if kind == "skip":
        return
    if kind == "children":
        if not _GROUP_NAME_RE.match(line):
            inventory.report(file, number, f"bad group name {line!r} in [{section}:children]")
            return
        parsed.group(section).children.append(line)
        parsed.group(line)
        return
    if kind == "vars":
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            inventory.report(file, number, f"expected key=value in [{section}:vars], got {line!r}")
            return
        parsed.group(section).vars[name.strip()] = _Var(value.strip(), origin, 0)
        return
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError as exc:
        inventory.report(file, number, f"cannot split the host line: {exc} (check the quotes)")
        return
    _ini_host(parsed, inventory, section, tokens, number)


def _ini_host(
    parsed: _Parsed, inventory: Inventory, section: str, tokens: list[str], number: int
) -> None:
    file = str(parsed.file)
    pattern, assignments = tokens[0], tokens[1:]
    host_vars: dict[str, _Var] = {}
    for token in assignments:
        name, sep, value = token.partition("=")
        if not sep or not name:
            inventory.report(
                file,
                number,
                f"host {pattern!r}: expected key=value, got {token!r} (quote values "
                "with spaces, e.g. hwprobe='{...}')",
            )
            return
        host_vars[name] = _Var(value, f"{file}:{number}", _LEVEL_HOST)
    try:
        names = expand_host_pattern(_strip_port(pattern))
    except ValueError as exc:
        inventory.report(file, number, str(exc))
        return
    for name in names:
        parsed.host(name, number, section).vars.update(host_vars)


def _strip_port(pattern: str) -> str:
    head, sep, port = pattern.rpartition(":")
    return head if sep and port.isdigit() and "]" not in port and head.count(":") == 0 else pattern


# -- YAML ----------------------------------------------------------------------------------------
def read_ansible_yaml(path: Path, inventory: Inventory) -> None:
    """A YAML inventory: groups with ``hosts``, ``children`` and ``vars``."""
    file = str(path)
    loader = _load_nodes(path, inventory)
    if loader is None:
        return
    node, constructor = loader
    parsed = _Parsed(path)
    parsed.group("all")
    first_issue = len(inventory.issues)
    if not isinstance(node, yaml.MappingNode):
        inventory.report(file, _line(node), "an Ansible YAML inventory is a mapping of groups")
        return
    for name, key_node, value in _items(node):
        _yaml_group(parsed, inventory, constructor, name, key_node, value)
    _resolve(parsed, inventory)
    _sort_issues(inventory, first_issue)


def _sort_issues(inventory: Inventory, first: int) -> None:
    """Report one inventory's problems in line order, whichever pass found them."""
    mine = inventory.issues[first:]
    mine.sort(key=lambda issue: issue.line or 0)
    inventory.issues[first:] = mine


def _load_nodes(
    path: Path, inventory: Inventory
) -> tuple[yaml.Node, yaml.constructor.SafeConstructor] | None:
    try:
        text = path.read_text(encoding="utf-8")
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
    except (OSError, UnicodeDecodeError) as exc:
        inventory.report(str(path), None, f"cannot read the file: {exc}")
        return None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        inventory.report(str(path), line, f"invalid YAML: {getattr(exc, 'problem', exc)}")
        return None
    if node is None:
        inventory.report(str(path), None, "the file is empty")
        return None
    return node, loader


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _items(node: yaml.MappingNode) -> Iterator[tuple[str, yaml.Node, yaml.Node]]:
    for key_node, value_node in node.value:
        yield str(key_node.value), key_node, value_node


def _yaml_group(
    parsed: _Parsed,
    inventory: Inventory,
    constructor: yaml.constructor.SafeConstructor,
    name: str,
    key_node: yaml.Node,
    node: yaml.Node,
) -> None:
    file = str(parsed.file)
    group = parsed.group(name)
    if _is_null(node):
        return
    if not isinstance(node, yaml.MappingNode):
        inventory.report(file, _line(key_node), f"group {name!r} must be a mapping")
        return
    for key, sub_key, value in _items(node):
        if key == "hosts":
            _yaml_hosts(parsed, inventory, constructor, name, sub_key, value)
        elif key == "children":
            if _is_null(value):
                continue
            if not isinstance(value, yaml.MappingNode):
                inventory.report(file, _line(sub_key), f"children of {name!r} must be a mapping")
                continue
            for child, child_key, child_node in _items(value):
                group.children.append(child)
                _yaml_group(parsed, inventory, constructor, child, child_key, child_node)
        elif key == "vars":
            group.vars.update(_yaml_vars(parsed, inventory, constructor, value, 0, sub_key))
        else:
            inventory.report(
                file,
                _line(sub_key),
                f"group {name!r}: unknown key {key!r} (use hosts, children or vars)",
            )


def _yaml_hosts(
    parsed: _Parsed,
    inventory: Inventory,
    constructor: yaml.constructor.SafeConstructor,
    group: str,
    key_node: yaml.Node,
    node: yaml.Node,
) -> None:
    file = str(parsed.file)
    if _is_null(node):
        return
    if not isinstance(node, yaml.MappingNode):
        inventory.report(file, _line(key_node), f"hosts of {group!r} must be a mapping")
        return
    for pattern, host_key, value in _items(node):
        try:
            names = expand_host_pattern(pattern)
        except ValueError as exc:
            inventory.report(file, _line(host_key), str(exc))
            continue
        host_vars = _yaml_vars(parsed, inventory, constructor, value, _LEVEL_HOST, host_key)
        for name in names:
            parsed.host(name, _line(host_key), group).vars.update(host_vars)


def _yaml_vars(
    parsed: _Parsed,
    inventory: Inventory,
    constructor: yaml.constructor.SafeConstructor,
    node: yaml.Node,
    level: int,
    key_node: yaml.Node,
) -> dict[str, _Var]:
    file = str(parsed.file)
    if _is_null(node):
        return {}
    if not isinstance(node, yaml.MappingNode):
        inventory.report(file, _line(key_node), "variables must be a mapping of name: value")
        return {}
    found = {}
    for name, var_key, value in _items(node):
        if name in FACT_VARS:
            data = constructor.construct_object(value, deep=True)
            found[name] = _Var(data, f"{file}:{_line(var_key)}", level)
    return found


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


# -- host_vars/ and group_vars/ ------------------------------------------------------------------
def _vars_file(folder: Path, name: str, inventory: Inventory, level: int) -> dict[str, _Var]:
    for suffix in (".yml", ".yaml", ".json"):
        path = folder / f"{name}{suffix}"
        if path.is_file():
            loaded = _load_nodes(path, inventory)
            if loaded is None:
                return {}
            node, constructor = loaded
            return _yaml_vars(_Parsed(path), inventory, constructor, node, level, node)
    return {}


# -- resolution ----------------------------------------------------------------------------------
def _depths(parsed: _Parsed) -> dict[str, int]:
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


def _is_child(parsed: _Parsed, name: str) -> bool:
    return any(name in g.children for g in parsed.groups.values())


def _ancestors(parsed: _Parsed, groups: list[str]) -> set[str]:
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


class _VarResolver:
    """Merges a host's fact variables from its groups, vars files and own line (cached)."""

    def __init__(self, parsed: _Parsed, inventory: Inventory) -> None:
        self.parsed = parsed
        self.inventory = inventory
        self.depth = _depths(parsed)
        self.files: dict[tuple[str, str], dict[str, _Var]] = {}

    def _file(self, kind: str, name: str, level: int) -> dict[str, _Var]:
        if (kind, name) not in self.files:
            folder = self.parsed.file.parent / kind
            self.files[kind, name] = _vars_file(folder, name, self.inventory, level)
        return self.files[kind, name]

    def facts(self, host: _Host) -> dict[str, _Var]:
        merged: dict[str, _Var] = {}
        groups = _ancestors(self.parsed, host.groups)
        for name in sorted(groups, key=lambda g: (self.depth.get(g, 1), g)):
            level = self.depth.get(name, 1)
            for var_name, var in self.parsed.groups[name].vars.items():
                merged[var_name] = _Var(var.value, var.origin, level)
            merged.update(self._file("group_vars", name, _LEVEL_GROUP_FILE + level))
        merged.update(host.vars)
        merged.update(self._file("host_vars", host.name, _LEVEL_HOST_FILE))
        return {k: v for k, v in merged.items() if k in FACT_VARS}


def _resolve(parsed: _Parsed, inventory: Inventory) -> None:
    """Turn each host's winning fact variable into a profile, in the order hosts were listed."""
    file = str(parsed.file)
    loader = _FactLoader(parsed.file.parent, inventory)
    resolver = _VarResolver(parsed, inventory)
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

    def load(self, host: _Host, name: str, var: _Var, file: str) -> None:
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
