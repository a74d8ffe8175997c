"""The environment, command line and working directory of a hook, app or service under snapd.

A snap's process gets its environment in layers, and each layer is a different program of snapd:
the caller (a user's shell for an app, the systemd unit for a service, snapd itself for a hook),
then ``snap run`` (the ``SNAP*`` variables, ``HOME`` moved into ``~/snap``), then snap-confine
(``PATH`` reset, the cookie, ``TMPDIR``; glibc drops the "unsecure" variables first for a
non-root caller, since snap-confine is set-uid), then snap-exec (snap.yaml's ``environment:``,
expanded as :mod:`.expand` says). The variables, their values and the release each starts in are
data (:mod:`.rules`, ``data/snapd_environment.yaml``); this module supplies the facts of one run
and applies the layers in order. ``exec_via="snap-exec"`` stops before the last layer
and leaves it to snapd's own ``/usr/lib/snapd/snap-exec``, which is how the tests check this
module against snapd.
"""

from __future__ import annotations

import contextlib
import os
import platform
import pwd
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hwprobe.tables import cpu_table
from snapbuild.trial.snapd.expand import expand_command_args, expand_environment
from snapbuild.trial.snapd.meta import Runnable, SnapMeta
from snapbuild.trial.snapd.rules import (
    FACTS,
    Release,
    RunKind,
    Variable,
    environment_rules,
    parse_release,
)

SNAP_MOUNT_DIR = "/snap"
SNAP_DATA_DIR = "/var/snap"
SNAP_EXEC = "/usr/lib/snapd/snap-exec"
ExecVia = Literal["harness", "snap-exec"]


def newest_snapd() -> Release:
    """The newest snapd release the data describes: the default behaviour."""
    return parse_release(environment_rules().releases.newest)


@dataclass(frozen=True)
class Placement:
    """Where one revision of a snap lives, as snapd's ``dirs`` and ``snap`` packages name it."""

    name: str
    revision: str
    uid: int = 0

    @property
    def mount_dir(self) -> str:
        return f"{SNAP_MOUNT_DIR}/{self.name}/{self.revision}"

    @property
    def components_dir(self) -> str:
        return f"{SNAP_MOUNT_DIR}/{self.name}/components/{self.revision}"

    @property
    def data_dir(self) -> str:
        return f"{SNAP_DATA_DIR}/{self.name}/{self.revision}"

    @property
    def common_dir(self) -> str:
        return f"{SNAP_DATA_DIR}/{self.name}/common"

    @property
    def real_home(self) -> str:
        return pwd.getpwuid(self.uid).pw_dir

    @property
    def user_data_dir(self) -> str:
        return f"{self.real_home}/snap/{self.name}/{self.revision}"

    @property
    def user_common_dir(self) -> str:
        return f"{self.real_home}/snap/{self.name}/common"

    @property
    def xdg_runtime_dir(self) -> str:
        return f"/run/user/{self.uid}/snap.{self.name}"


@dataclass(frozen=True)
class Launch:
    """What to exec inside the namespace: environment, command line, working directory."""

    env: dict[str, str]
    argv: list[str]
    cwd: str


def dpkg_architecture() -> str:
    """SNAP_ARCH: snapd's dpkg name for this machine's architecture (hwprobe's table)."""
    machine = platform.machine()
    return cpu_table().architectures.get(machine, machine)


def run_facts(
    meta: SnapMeta,
    runnable: Runnable,
    place: Placement,
    caller_env: Mapping[str, str],
    *,
    app_cookie: str,
) -> dict[str, str]:
    """The values the variables' templates name (:data:`~.rules.FACTS`, all of them)."""
    facts = {
        "mount_dir": place.mount_dir,
        "common_dir": place.common_dir,
        "data_dir": place.data_dir,
        "snap_name": meta.name,
        "snap_version": meta.version,
        "revision": place.revision,
        "arch": dpkg_architecture(),
        "caller_snap_reexec": caller_env.get("SNAP_REEXEC", ""),
        "uid": str(place.uid),
        "components_dir": place.components_dir,
        "app_name": runnable.name,
        "common_id": runnable.common_id,
        "bus_name": runnable.bus_name,
        "user_common_dir": place.user_common_dir,
        "user_data_dir": place.user_data_dir,
        "real_home": place.real_home,
        "xdg_runtime_dir": place.xdg_runtime_dir,
        "app_cookie": app_cookie,
    }
    assert tuple(facts) == tuple(FACTS)  # the data's contract; tests/test_snapd_env.py checks it
    return facts


def _holds(variable: Variable, meta: SnapMeta, runnable: Runnable) -> bool:
    if variable.when == "declares-components":
        return bool(meta.components)
    if variable.when == "has-common-id":
        return bool(runnable.common_id)
    if variable.when == "has-bus-name":
        return bool(runnable.bus_name)
    return variable.when == "always"


def systemd_unit_environment() -> dict[str, str]:
    """What systemd gives a system unit: its PATH, the locale and /etc/environment."""
    unit = environment_rules().callers.systemd_unit
    env = {"PATH": unit.path}
    for path in unit.environment_files:
        env.update(_read_env_file(path))
    return env


def login_environment(uid: int = 0) -> dict[str, str]:
    """A plain login shell's environment: what an app starts from by default (the harness's
    own environment is the development tree's and would say nothing about a user's)."""
    user = pwd.getpwuid(uid)
    env = {
        "HOME": user.pw_dir,
        "USER": user.pw_name,
        "LOGNAME": user.pw_name,
        "SHELL": user.pw_shell or "/bin/sh",
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "TERM": os.environ.get("TERM", "xterm"),
    }
    env.update({k: v for k, v in os.environ.items() if k == "LANG" or k.startswith("LC_")})
    return env


def caller_environment(
    kind: RunKind, *, uid: int = 0, hook_cookie: str = "", snapd_pid: int | None = None
) -> dict[str, str]:
    """What ``snap run`` starts from: snapd.service's environment plus the hook's context id
    (hook), the systemd unit's (service), a login shell's (app)."""
    if kind == "app":
        return login_environment(uid)
    callers = environment_rules().callers
    facts = {
        "invocation_id": secrets.token_hex(16),
        "snapd_pid": str(snapd_pid if snapd_pid is not None else os.getpid()),
        "hook_cookie": hook_cookie,
    }
    extra = (callers.hook if kind == "hook" else callers.service).variables
    return {**systemd_unit_environment(), **{k: v.format(**facts) for k, v in extra.items()}}


def _read_env_file(path: str) -> dict[str, str]:
    """KEY=VALUE lines (systemd's EnvironmentFile, pam_env's /etc/environment; quotes dropped)."""
    env: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for raw in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
            line = raw.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, _, value = line.removeprefix("export ").partition("=")
            env[key.strip()] = value.strip().strip("\"'")
    return env


def confined_environment(
    meta: SnapMeta,
    runnable: Runnable,
    kind: RunKind,
    place: Placement,
    caller_env: Mapping[str, str],
    *,
    app_cookie: str,
    snapd: Release,
) -> dict[str, str]:
    """What snap-exec starts from: the caller's environment after ``snap run`` and
    snap-confine. ``app_cookie`` is the snap's cookie (/var/lib/snapd/cookie/snap.<name>),
    which snap-confine gives apps and services; a hook keeps the one its caller has."""
    rules = environment_rules()
    env = dict(caller_env)
    if place.uid != 0:
        for key in rules.glibc_unsecure.names:
            env.pop(key, None)
    facts = run_facts(meta, runnable, place, caller_env, app_cookie=app_cookie)
    for layer in ("snap-run", "snap-confine"):
        for variable in rules.applying(layer, kind, snapd):
            if _holds(variable, meta, runnable):
                env[variable.name] = variable.value.format(**facts)
    return env


def snap_exec_environment(
    confined: Mapping[str, str], meta: SnapMeta, runnable: Runnable, *, snapd: Release
) -> dict[str, str]:
    """snap-exec's part: apps un-escape ``SNAP_SAVED_*``, then the snap's ``environment:``
    and the app's or hook's, in order, each value expanded as snapd ``snapd`` expands it."""
    rules = environment_rules()
    env = dict(confined)
    prefix = rules.snap_exec.saved_prefix
    if runnable.kind == "app":
        for key in [k for k in env if k.startswith(prefix)]:
            value = env.pop(key)
            env.setdefault(key[len(prefix) :], value)
    conditional = rules.behaves("conditional-expansion", snapd)
    expand_environment(env, meta.environment, conditional=conditional)
    expand_environment(env, runnable.environment, conditional=conditional)
    return env


def runnable_argv(runnable: Runnable, place: Placement, env: Mapping[str, str]) -> list[str]:
    """snap-exec's command line: the command-chain, then the app's command (split on single
    spaces, arguments expanded and dropped when empty) or the hook's file."""
    chain = [os.path.normpath(os.path.join(place.mount_dir, c)) for c in runnable.command_chain]
    if runnable.kind == "hook":
        return [*chain, f"{place.mount_dir}/meta/hooks/{runnable.name}"]
    words = runnable.command.split(" ")
    head = os.path.normpath(os.path.join(place.mount_dir, words[0]))
    return [*chain, head, *expand_command_args(words[1:], env)]


def snap_exec_argv(meta: SnapMeta, runnable: Runnable) -> list[str]:
    """What snap-confine execs when snapd's own snap-exec does the last step."""
    if runnable.kind == "hook":
        return [SNAP_EXEC, f"--hook={runnable.name}", meta.name]
    return [SNAP_EXEC, f"{meta.name}.{runnable.name}"]


def initial_cwd(kind: RunKind, place: Placement, caller_cwd: str) -> str:
    """Where the process starts: snapd's ``/`` for hooks, ``WorkingDirectory=$SNAP_DATA`` for
    services, the caller's directory for apps (snap-confine falls back to :func:`void_dir`
    when that path does not exist in the namespace; :mod:`.namespace` does the same)."""
    template = getattr(environment_rules().working_directories, kind).value
    return str(template.format(data_dir=place.data_dir, caller_cwd=caller_cwd))


def void_dir() -> str:
    """snap-confine's directory for a process whose working directory does not exist."""
    return environment_rules().working_directories.void.value


def launch(
    meta: SnapMeta,
    runnable: Runnable,
    kind: RunKind,
    place: Placement,
    caller_env: Mapping[str, str],
    *,
    caller_cwd: str = "/",
    app_cookie: str,
    snapd: Release,
    exec_via: ExecVia = "harness",
) -> Launch:
    """Everything one run needs: computed here (``harness``), or with the last layer left to
    snapd's snap-exec, which builds environment and command line itself (``snap-exec``)."""
    env = confined_environment(
        meta, runnable, kind, place, caller_env, app_cookie=app_cookie, snapd=snapd
    )
    cwd = initial_cwd(kind, place, caller_cwd)
    if exec_via == "snap-exec":
        return Launch(env, snap_exec_argv(meta, runnable), cwd)
    env = snap_exec_environment(env, meta, runnable, snapd=snapd)
    return Launch(env, runnable_argv(runnable, place, env), cwd)
