"""Reading inventories: each command-line path dispatched to the reader of its kind (hwprobe
JSON, JSON Lines, recorded machines, Ansible inventories), all into one :class:`Inventory`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from snapbuild.fleet.ansible_inventory import read_ansible_ini, read_ansible_yaml
from snapbuild.fleet.inventory import (
    INI_SUFFIXES,
    JSON_LINES_SUFFIXES,
    YAML_SUFFIXES,
    Inventory,
    machine_root_of,
    read_json_file,
    read_json_lines,
    read_machine_root,
)


def read_inventories(paths: list[Path]) -> Inventory:
    """Read every inventory into one, in the order given (hosts keep their reading order)."""
    inventory = Inventory()
    for path in paths:
        read_path(path, inventory)
    return inventory


def read_path(path: Path, inventory: Inventory) -> None:
    """Dispatch one command-line path on its kind."""
    if not path.exists():
        inventory.report(str(path), None, "no such file or folder")
    elif path.is_dir():
        if machine_root_of(path) is not None:
            read_machine_root(path, inventory)
        else:
            _read_folder(path, inventory)
    else:
        _read_file(path, inventory)


def _read_folder(path: Path, inventory: Inventory) -> None:
    """hwprobe JSON files, JSON Lines files and recorded machines inside, in name order."""
    found = False
    for child in _folder_entries(path):
        found = True
        read_path(child, inventory)
    if not found:
        inventory.report(
            str(path),
            None,
            "the folder holds no inventory: expected *.json, *.jsonl files or recorded machine "
            "folders (with machine-root/, or proc/ and sys/)",
        )


def _folder_entries(path: Path) -> Iterator[Path]:
    for child in sorted(path.iterdir()):
        if child.name.startswith("."):
            continue
        if child.is_dir():
            if machine_root_of(child) is not None or any(_folder_entries(child)):
                yield child
        elif child.suffix in (".json", *JSON_LINES_SUFFIXES):
            yield child


def _read_file(path: Path, inventory: Inventory) -> None:
    suffix = path.suffix.lower()
    if suffix in JSON_LINES_SUFFIXES:
        read_json_lines(path, inventory)
    elif suffix == ".json":
        read_json_file(path, inventory)
    elif suffix in YAML_SUFFIXES:
        read_ansible_yaml(path, inventory)
    elif suffix in INI_SUFFIXES or not suffix:
        read_ansible_ini(path, inventory)
    else:
        inventory.report(
            str(path),
            None,
            f"unknown inventory kind {suffix!r}: use .json (one hwprobe profile), .jsonl (JSON "
            "Lines), .yml/.yaml or .ini (Ansible inventory), or a folder",
        )
