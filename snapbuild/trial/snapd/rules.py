"""snapd's rules as typed data: ``data/snapd_environment.yaml``, ``data/snapd_sockets.yaml``.

The environment a snap sees and the sockets it may open are knowledge read from snapd's source,
line by line, and they change between the snapd releases the project supports. Kept as data with
the source line of every rule, they can be checked against snapd (each entry says where to look)
and read by people (``docs/snaps.md`` shows the table rendered from them, checked by a test);
these models are their schemas, so a misspelt key, an unknown fact in a value or an unknown
netlink protocol fails when the file loads, not in the middle of a run.

The templates' placeholders are the facts :mod:`.env` computes (:data:`FACTS` for ``snap run``
and snap-confine, :data:`CALLER_FACTS` for the caller's variables, :data:`CWD_FACTS` for the
working directory); the kernel's numbers for the socket names are :data:`FAMILIES` and
:data:`NETLINK_PROTOCOLS`.
"""

from __future__ import annotations

import re
import string
from functools import cache
from typing import Literal, get_args

from pydantic import Field, field_validator, model_validator

from snapbuild.paths import read_data
from snapcommon.model import KebabModel, repeated

DATA_PACKAGE = "snapbuild.trial.snapd"  # its data/: toolkit-only, like the code
Release = tuple[int, int]
RunKind = Literal["hook", "app", "service"]
RUN_KINDS: tuple[RunKind, ...] = ("hook", "app", "service")
Layer = Literal["snap-run", "snap-confine", "snap-exec"]
# When a variable is set besides its release and run kinds; ``not-modelled`` entries are listed
# so the table is snapd's whole list, and say in their note when snapd sets them.
Condition = Literal[
    "always", "declares-components", "has-common-id", "has-bus-name", "not-modelled"
]
_CONDITION_WORDS = {
    "declares-components": "when snap.yaml declares components",
    "has-common-id": "when the app has a common-id",
    "has-bus-name": "when the app has a bus-name",
}
BehaviourId = Literal["conditional-expansion", "xdg-runtime-dir-created"]

# The facts a value may name, and how docs/snaps.md shows each.
FACTS = {
    "mount_dir": "/snap/<name>/<rev>",
    "common_dir": "/var/snap/<name>/common",
    "data_dir": "/var/snap/<name>/<rev>",
    "snap_name": "<name>",
    "snap_version": "<version>",
    "revision": "<rev>",
    "arch": "<dpkg arch>",
    "caller_snap_reexec": "<caller's SNAP_REEXEC>",
    "uid": "<uid>",
    "components_dir": "/snap/<name>/components/<rev>",
    "app_name": "<app>",
    "common_id": "<common-id>",
    "bus_name": "<bus-name>",
    "user_common_dir": "<home>/snap/<name>/common",
    "user_data_dir": "<home>/snap/<name>/<rev>",
    "real_home": "<home>",
    "xdg_runtime_dir": "/run/user/<uid>/snap.<name>",
    "app_cookie": "<the snap's cookie>",
}
CALLER_FACTS = ("invocation_id", "snapd_pid", "hook_cookie")
CWD_FACTS = ("data_dir", "caller_cwd")

# The kernel's numbers (linux/socket.h, linux/netlink.h); Python's socket module lacks some.
FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10}
NETLINK_PROTOCOLS = {
    "NETLINK_ROUTE": 0,
    "NETLINK_INET_DIAG": 4,
    "NETLINK_KOBJECT_UEVENT": 15,
    "NETLINK_GENERIC": 16,
}
MediatedSyscall = Literal["bind", "listen", "accept", "accept4"]
Errno = Literal["EACCES", "EPERM"]
_RELEASE = r"^\d+\.\d+$"
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def parse_release(text: str) -> Release:
    """``"2.73"`` -> ``(2, 73)``; releases compare as tuples."""
    major, _, minor = text.partition(".")
    return int(major), int(minor or 0)


def placeholders(template: str) -> set[str]:
    """The ``{fact}`` names a value template uses."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def _check_template(template: str, allowed: tuple[str, ...]) -> str:
    unknown = sorted(placeholders(template) - set(allowed))
    if unknown:
        raise ValueError(f"unknown fact {', '.join(unknown)} in {template!r}")
    return template


def _shown(template: str) -> str:
    """A value as docs/snaps.md shows it: facts as their readable form, "" as (empty)."""
    return f"`{template.format(**FACTS)}`" if template else "(empty)"


class SnapdSource(KebabModel):
    """The snapd tree the source lines refer to."""

    repository: str
    commit: str
    describe: str
    date: str


class Releases(KebabModel):
    oldest: str = Field(pattern=_RELEASE)
    newest: str = Field(pattern=_RELEASE)


class Variable(KebabModel):
    """One variable: its value template, which layer sets it, for which runs and releases."""

    name: str
    value: str
    layer: Layer
    runs: tuple[RunKind, ...] = RUN_KINDS
    since: str | None = Field(default=None, pattern=_RELEASE)
    until: str | None = Field(default=None, pattern=_RELEASE)
    when: Condition = "always"
    source: str
    note: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not _ENV_NAME.match(name):
            raise ValueError(f"not an environment variable name: {name!r}")
        return name

    @field_validator("value")
    @classmethod
    def _value(cls, value: str) -> str:
        return _check_template(value, tuple(FACTS))

    def in_release(self, snapd: Release) -> bool:
        """Whether snapd release ``snapd`` sets it (``since`` included, ``until`` not)."""
        if self.since is not None and snapd < parse_release(self.since):
            return False
        return self.until is None or snapd < parse_release(self.until)


class SystemdUnit(KebabModel):
    """What systemd gives a system service before the unit's own settings."""

    path: str
    environment_files: tuple[str, ...]
    source: str
    note: str = ""


class Caller(KebabModel):
    """The variables one kind of caller adds to what it starts from."""

    variables: dict[str, str]
    source: str
    note: str = ""

    @field_validator("variables")
    @classmethod
    def _templates(cls, variables: dict[str, str]) -> dict[str, str]:
        for value in variables.values():
            _check_template(value, CALLER_FACTS)
        return variables


class Callers(KebabModel):
    systemd_unit: SystemdUnit
    service: Caller
    hook: Caller
    app: Caller


class NameList(KebabModel):
    source: str
    names: tuple[str, ...]


class SnapExec(KebabModel):
    """snap-exec's last step: the saved variables and where the chain and arguments are built."""

    saved_prefix: str
    saved_source: str
    app_chain_source: str
    hook_chain_source: str
    arguments_source: str


class WorkingDirectory(KebabModel):
    value: str
    source: str

    @field_validator("value")
    @classmethod
    def _value(cls, value: str) -> str:
        return _check_template(value, CWD_FACTS)


class WorkingDirectories(KebabModel):
    hook: WorkingDirectory
    service: WorkingDirectory
    app: WorkingDirectory
    void: WorkingDirectory


class Behaviour(KebabModel):
    """A change of behaviour between releases, checked by id in :mod:`.env` and :mod:`.expand`."""

    id: BehaviourId
    since: str = Field(pattern=_RELEASE)
    source: str
    what: str


class EnvironmentRules(KebabModel):
    """The whole of ``snapd_environment.yaml``."""

    schema_version: Literal[1]
    snapd_source: SnapdSource
    releases: Releases
    variables: tuple[Variable, ...]
    callers: Callers
    glibc_unsecure: NameList
    snap_exec: SnapExec
    working_directories: WorkingDirectories
    behaviours: tuple[Behaviour, ...]

    @model_validator(mode="after")
    def _consistent(self) -> EnvironmentRules:
        """Every behaviour once; a variable listed twice only for releases that do not meet."""
        ids = [b.id for b in self.behaviours]
        twice = repeated(ids)
        if twice:
            raise ValueError(f"behaviour listed twice: {', '.join(twice)}")
        missing = sorted(set(get_args(BehaviourId)) - set(ids))
        if missing:
            raise ValueError(f"behaviours lack: {', '.join(missing)}")
        for name in repeated(v.name for v in self.variables):
            ranges = sorted(
                (parse_release(v.since or "0.0"), parse_release(v.until or "999.0"))
                for v in self.variables
                if v.name == name
            )
            if any(a[1] > b[0] for a, b in zip(ranges, ranges[1:], strict=False)):
                raise ValueError(f"{name} is listed twice for the same snapd releases")
        return self

    def markdown(self) -> str:
        """The variables as the table ``docs/snaps.md`` shows (checked by a test)."""
        src = self.snapd_source
        lines = [
            f"| variable | value | runs | snapd | set by ({src.repository} {src.commit}) |",
            "|---|---|---|---|---|",
        ]
        for v in self.variables:
            value = "(not modelled)" if v.when == "not-modelled" else _shown(v.value)
            if v.when in _CONDITION_WORDS:
                value += f" {_CONDITION_WORDS[v.when]}"
            releases = " ".join(
                [*([f"{v.since}+"] if v.since else []), *([f"< {v.until}"] if v.until else [])]
            )
            runs = "all" if v.runs == RUN_KINDS else ", ".join(v.runs)
            note = f"; {v.note}" if v.note else ""
            lines.append(
                f"| {v.name} | {value}{note} | {runs} | {releases or 'all'} | {v.source} |"
            )
        return "\n".join(lines) + "\n"

    def behaves(self, behaviour: BehaviourId, snapd: Release) -> bool:
        """Whether snapd release ``snapd`` has ``behaviour``."""
        found = next(b for b in self.behaviours if b.id == behaviour)
        return snapd >= parse_release(found.since)

    def applying(self, layer: Layer, kind: RunKind, snapd: Release) -> list[Variable]:
        """The modelled variables ``layer`` sets for a run of ``kind``, in the file's order."""
        return [
            v
            for v in self.variables
            if v.layer == layer
            and kind in v.runs
            and v.when != "not-modelled"
            and v.in_release(snapd)
        ]


class SocketDefaults(KebabModel):
    """What every strict snap gets, and the answers to what it does not."""

    families: tuple[str, ...]
    families_source: str
    family_errno: Errno
    netlink: tuple[str, ...]
    netlink_source: str
    netlink_errno: Errno
    errno_source: str
    mediated_syscalls: tuple[MediatedSyscall, ...]
    syscall_errno: Errno
    partial_apparmor_syscalls: tuple[MediatedSyscall, ...]
    partial_apparmor_source: str
    denied_syscalls: tuple[str, ...]
    denied_syscalls_note: str


class InterfaceGrant(KebabModel):
    """What one connected plug of an interface adds, and whether snapd connects it."""

    auto_connect: bool
    auto_connect_source: str
    families: tuple[str, ...]
    netlink: tuple[str, ...]
    syscalls: tuple[MediatedSyscall, ...]
    source: str


class SocketRules(KebabModel):
    """The whole of ``snapd_sockets.yaml``."""

    schema_version: Literal[1]
    default: SocketDefaults
    interfaces: dict[str, InterfaceGrant]

    @model_validator(mode="after")
    def _known_names(self) -> SocketRules:
        grants: list[SocketDefaults | InterfaceGrant] = [self.default, *self.interfaces.values()]
        bad = sorted(
            {f for g in grants for f in g.families if f not in FAMILIES}
            | {p for g in grants for p in g.netlink if p not in NETLINK_PROTOCOLS}
        )
        if bad:
            raise ValueError(f"unknown socket family or netlink protocol: {', '.join(bad)}")
        return self


@cache
def environment_rules() -> EnvironmentRules:
    """``data/snapd_environment.yaml``, validated once per process."""
    return EnvironmentRules.model_validate(read_data("snapd_environment.yaml", DATA_PACKAGE))


@cache
def socket_rules() -> SocketRules:
    """``data/snapd_sockets.yaml``, validated once per process."""
    return SocketRules.model_validate(read_data("snapd_sockets.yaml", DATA_PACKAGE))
