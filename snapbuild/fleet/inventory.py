"""Fleet inventories: where the hardware profiles of many hosts come from.

An operator points ``snapbuild fleet plan`` at whatever they have: hwprobe JSON files, folders of
them, JSON Lines files (one profile per line, each with a ``hostname``), recorded machine roots, or
an Ansible inventory whose hosts carry hwprobe facts (see :mod:`snapbuild.fleet.ansible_inventory`);
:mod:`snapbuild.fleet.readers` dispatches each path to its reader.
Every reader yields hosts and problems; a bad entry is reported with its file and line and skipped,
so one broken line never hides the rest of a 100,000-host fleet.

Hosts with identical hardware share one *profile key*: the canonical JSON of the profile without
its hostname. Everything else in the profile (available memory included) stays in the key, because
the selector reads it; the planner decides each key once. JSON Lines take a fast path: the raw line
with its hostname cut out is looked up before any parsing, so a line whose hardware was already
seen costs a regular expression and a dictionary lookup instead of a pydantic validation.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from pydantic import ValidationError

from hwprobe.load import load_host
from hwprobe.profile import HostProfile, error_message
from snapcommon.errors import SnapbuildError

JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")
YAML_SUFFIXES = (".yml", ".yaml")
INI_SUFFIXES = (".ini", ".cfg", ".hosts")
# A top-level "hostname" key and its value (a JSON string or null). Inside a JSON string a quote
# is always escaped, so an unescaped '"hostname"' followed by a colon can only be a key.
_HOSTNAME_RE = re.compile(r'"hostname"\s*:\s*("(?:[^"\\]|\\.)*"|null)')
_HOSTNAME_KEY = '"hostname"'
_PLAIN_STRING_RE = re.compile(r'"[^"\\\x00-\x1f]*"\Z')


@dataclass(frozen=True)
class InventoryIssue:
    """One skipped entry: which file, which line (None when the whole file is meant), and why."""

    file: str
    line: int | None
    message: str

    def location(self) -> str:
        """``file:line``, or the file alone."""
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    def format(self) -> str:
        """The line printed to stderr."""
        return f"{self.location()}: {self.message}"

    def to_data(self) -> dict[str, object]:
        """JSON-ready form for ``fleet plan --json``."""
        return {"file": self.file, "line": self.line, "message": self.message}


@dataclass(slots=True)
class HostEntry:
    """One host of the fleet: its name, where it was read, and the key of its hardware profile."""

    hostname: str
    file: str
    line: int | None
    key: str

    @property
    def source(self) -> str:
        """``file:line`` (built on demand: 100,000 hosts need not format it while reading)."""
        return self.file if self.line is None else f"{self.file}:{self.line}"


@dataclass
class Inventory:
    """Hosts in reading order, their distinct profiles, and every skipped entry."""

    hosts: list[HostEntry] = field(default_factory=list)
    profiles: dict[str, HostProfile] = field(default_factory=dict)  # key -> profile, no hostname
    issues: list[InventoryIssue] = field(default_factory=list)
    _raw_keys: dict[str, str | InventoryIssue] = field(default_factory=dict, repr=False)
    _seen: dict[str, HostEntry] = field(default_factory=dict, repr=False)

    # -- building --------------------------------------------------------------------------
    def add_profile(self, profile: HostProfile) -> str:
        """Register a validated profile and return its key (canonical JSON without hostname)."""
        data = profile.to_data()
        del data["hostname"]
        key = json.dumps(data, sort_keys=True, separators=(",", ":"))
        if key not in self.profiles:
            self.profiles[key] = dataclasses.replace(profile, hostname=None)
        return key

    def add_host(self, hostname: str, file: str, line: int | None, key: str) -> None:
        """Add a host, or report it when an earlier entry already used its name."""
        first = self._seen.get(hostname)
        if first is not None:
            self.report(
                file,
                line,
                f"host {hostname!r} is already planned from {first.source}; hostnames must be "
                "unique across inventories (this entry is skipped)",
            )
            return
        entry = HostEntry(hostname, file, line, key)
        self._seen[hostname] = entry
        self.hosts.append(entry)

    def report(self, file: str, line: int | None, message: str) -> None:
        """Record a skipped entry."""
        self.issues.append(InventoryIssue(file, line, message))

    def add_data(self, data: Any, hostname: str, file: str, line: int | None) -> bool:
        """Validate profile ``data`` (a dict from JSON/YAML) for ``hostname``; report failures."""
        try:
            profile = validate_profile(data)
        except ValueError as exc:
            self.report(file, line, f"host {hostname!r}: {exc}")
            return False
        self.add_host(hostname, file, line, self.add_profile(profile))
        return True


def validate_profile(data: Any) -> HostProfile:
    """A HostProfile from parsed JSON/YAML, or ValueError with a message naming the bad field."""
    if not isinstance(data, dict):
        raise ValueError(f"a hwprobe profile is a JSON object, not {_json_type(data)}")
    try:
        return HostProfile.from_data(data)
    except ValidationError as exc:
        raise ValueError(describe_validation(exc)) from None


def describe_validation(exc: ValidationError) -> str:
    """Pydantic's errors as one line: ``field.path: message`` for each (at most three)."""
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "(profile)"
        parts.append(f"{loc}: {error_message(err)}")
    more = len(exc.errors()) - 3
    if more > 0:
        parts.append(f"and {more} more")
    return "invalid hwprobe profile: " + "; ".join(parts)


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", int: "a number", float: "a number"}
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return names.get(type(value), type(value).__name__)


def _json_error(exc: json.JSONDecodeError) -> str:
    return f"invalid JSON: {exc.msg} (column {exc.colno}); write one complete JSON object"


# -- JSON Lines ----------------------------------------------------------------------------------
def read_json_lines(path: Path, inventory: Inventory) -> None:
    """One profile per line, each with a ``hostname``; blank lines are allowed."""
    file = str(path)
    with path.open(encoding="utf-8", errors="surrogateescape") as stream:
        for number, line in enumerate(stream, 1):
            if line.strip():
                _read_json_line(line, file, number, inventory)


def _read_json_line(line: str, file: str, number: int, inventory: Inventory) -> None:
    match = _HOSTNAME_RE.search(line)
    if match is None or line.count(_HOSTNAME_KEY) != 1:
        _read_json_line_slowly(line, file, number, inventory)
        return
    literal = match.group(1)
    if _PLAIN_STRING_RE.match(literal):
        hostname: object = literal[1:-1]  # no escapes or control characters: no decoding needed
    else:
        try:
            hostname = json.loads(literal)
        except json.JSONDecodeError:
            _read_json_line_slowly(line, file, number, inventory)
            return
    raw_key = line[: match.start(1)] + line[match.end(1) :].rstrip()
    known = inventory._raw_keys.get(raw_key)
    if known is None:
        _read_json_line_slowly(line, file, number, inventory, raw=(raw_key, hostname))
    elif isinstance(known, InventoryIssue):
        inventory.report(file, number, _with_host(known.message, hostname))
    elif _check_hostname(hostname, file, number, inventory):
        inventory.add_host(hostname, file, number, known)


def _read_json_line_slowly(
    line: str,
    file: str,
    number: int,
    inventory: Inventory,
    *,
    raw: tuple[str, object] | None = None,
) -> None:
    """Parse and validate a whole line; remember the outcome for lines with the same hardware.

    ``raw`` is the line's fast-path key and the hostname the regular expression found; the
    outcome is remembered only when that hostname really is the top-level one.
    """
    try:
        data = json.loads(line.strip())
    except json.JSONDecodeError as exc:
        inventory.report(file, number, _json_error(exc))
        return
    if not isinstance(data, dict):
        inventory.report(file, number, f"expected a JSON object, got {_json_type(data)}")
        return
    hostname = data.pop("hostname", None)
    raw_key = raw[0] if raw is not None and raw[1] == hostname else None
    try:
        key = inventory.add_profile(validate_profile(data))
    except ValueError as exc:
        if raw_key is not None:
            inventory._raw_keys[raw_key] = InventoryIssue(file, number, str(exc))
        inventory.report(file, number, _with_host(str(exc), hostname))
        return
    if raw_key is not None:
        inventory._raw_keys[raw_key] = key
    if _check_hostname(hostname, file, number, inventory):
        inventory.add_host(hostname, file, number, key)


def _with_host(message: str, hostname: object) -> str:
    return f"host {hostname!r}: {message}" if isinstance(hostname, str) and hostname else message


def _check_hostname(
    hostname: object, file: str, number: int, inventory: Inventory
) -> TypeGuard[str]:
    if isinstance(hostname, str) and hostname.strip():
        return True
    if hostname is None:
        why = 'has no "hostname"'
    elif isinstance(hostname, str):
        why = 'has an empty "hostname"'
    else:
        why = f'has a "hostname" that is {_json_type(hostname)}, not a non-empty string'
    inventory.report(
        file,
        number,
        f'the profile {why}; add "hostname": "<name>" to each line of a JSON Lines file',
    )
    return False


# -- single JSON files and machine roots ---------------------------------------------------------
def read_json_file(path: Path, inventory: Inventory) -> None:
    """One hwprobe profile (``hwprobe --json > h.json``); hostname from the file, else its name."""
    file = str(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        inventory.report(file, exc.lineno, _json_error(exc))
        return
    except (OSError, UnicodeDecodeError) as exc:
        inventory.report(file, None, f"cannot read the file: {exc}")
        return
    hostname = data.pop("hostname", None) if isinstance(data, dict) else None
    if not isinstance(hostname, str) or not hostname.strip():
        hostname = path.stem
    inventory.add_data(data, hostname, file, 1)


def machine_root_of(path: Path) -> Path | None:
    """The filesystem root a recorded machine folder replays, or None when it is no such folder."""
    if (path / "machine-root").is_dir():
        return path / "machine-root"
    if (path / "proc").is_dir() or (path / "sys").is_dir():
        return path
    return None


def probe_root(root: Path) -> HostProfile:
    """Probe a recorded machine root with the real prober (raises ValueError/OSError on failure)."""
    try:
        return load_host(root=root)
    except SnapbuildError as exc:
        raise ValueError(exc.brief) from None


def read_machine_root(path: Path, inventory: Inventory) -> None:
    """A recorded machine: hostname from the probe, else the folder's name."""
    root = machine_root_of(path)
    assert root is not None
    try:
        profile = probe_root(root)
    except (OSError, ValueError) as exc:
        inventory.report(str(path), None, f"cannot probe the recorded machine root {root}: {exc}")
        return
    name = path.name if path.name != "machine-root" else path.parent.name
    hostname = profile.hostname or name
    inventory.add_host(hostname, str(path), None, inventory.add_profile(profile))
