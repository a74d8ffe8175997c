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

import re
import shlex
from pathlib import Path
from typing import Any

from snapbuild.fleet.ansible_vars import (
    LEVEL_HOST,
    Parsed,
    Var,
    is_mapping,
    items,
    load_yaml,
    resolve,
    yaml_vars,
)
from snapbuild.fleet.inventory import Inventory

_RANGE_RE = re.compile(r"\[([0-9]+|[a-z]):([0-9]+|[a-z])(?::([0-9]+))?\]")
_SECTION_RE = re.compile(r"^\[([^\[\]:\s]+)(?::(vars|children))?\]$")
_GROUP_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


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
    parsed = Parsed(path)
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
    resolve(parsed, inventory)
    _sort_issues(inventory, first_issue)


def _ini_line(
    parsed: Parsed, inventory: Inventory, section: str, kind: str, line: str, number: int
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
        parsed.group(section).vars[name.strip()] = Var(value.strip(), origin, 0)
        return
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError as exc:
        inventory.report(file, number, f"cannot split the host line: {exc} (check the quotes)")
        return
    _ini_host(parsed, inventory, section, tokens, number)


def _ini_host(
    parsed: Parsed, inventory: Inventory, section: str, tokens: list[str], number: int
) -> None:
    file = str(parsed.file)
    pattern, assignments = tokens[0], tokens[1:]
    host_vars: dict[str, Var] = {}
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
        host_vars[name] = Var(value, f"{file}:{number}", LEVEL_HOST)
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
    first_issue = len(inventory.issues)
    loaded = load_yaml(path, inventory)
    if loaded is None:
        return
    tree, line = loaded
    parsed = Parsed(path)
    parsed.group("all")
    if not is_mapping(tree):
        inventory.report(file, line, "an Ansible YAML inventory is a mapping of groups")
        return
    for name, key_line, value in items(tree):
        _yaml_group(parsed, inventory, name, key_line, value)
    resolve(parsed, inventory)
    _sort_issues(inventory, first_issue)


def _sort_issues(inventory: Inventory, first: int) -> None:
    """Report one inventory's problems in line order, whichever pass found them."""
    mine = inventory.issues[first:]
    mine.sort(key=lambda issue: issue.line or 0)
    inventory.issues[first:] = mine


def _yaml_group(parsed: Parsed, inventory: Inventory, name: str, line: int, node: Any) -> None:
    """A group written at ``line``: its hosts, children (groups too) and vars."""
    file = str(parsed.file)
    group = parsed.group(name)
    if node is None:
        return
    if not is_mapping(node):
        inventory.report(file, line, f"group {name!r} must be a mapping")
        return
    for key, key_line, value in items(node):
        if key == "hosts":
            _yaml_hosts(parsed, inventory, name, key_line, value)
        elif key == "children":
            if value is None:
                continue
            if not is_mapping(value):
                inventory.report(file, key_line, f"children of {name!r} must be a mapping")
                continue
            for child, child_line, child_node in items(value):
                group.children.append(child)
                _yaml_group(parsed, inventory, child, child_line, child_node)
        elif key == "vars":
            group.vars.update(yaml_vars(parsed, inventory, value, 0, key_line))
        else:
            inventory.report(
                file,
                key_line,
                f"group {name!r}: unknown key {key!r} (use hosts, children or vars)",
            )


def _yaml_hosts(parsed: Parsed, inventory: Inventory, group: str, line: int, node: Any) -> None:
    """The ``hosts`` mapping (written at ``line``) of ``group``: patterns and their vars."""
    file = str(parsed.file)
    if node is None:
        return
    if not is_mapping(node):
        inventory.report(file, line, f"hosts of {group!r} must be a mapping")
        return
    for pattern, host_line, value in items(node):
        try:
            names = expand_host_pattern(pattern)
        except ValueError as exc:
            inventory.report(file, host_line, str(exc))
            continue
        host_vars = yaml_vars(parsed, inventory, value, LEVEL_HOST, host_line)
        for name in names:
            parsed.host(name, host_line, group).vars.update(host_vars)
