"""The stand-in's command line: component install/remove, the hook queue and the dispatch.

Commands run at once outside a hook; inside one (``$SNAPCTL_STANDIN_HOOK`` set by the hook
runner) the ones snapd defers are queued, checked now and performed by ``flush`` after the hook
succeeded, or dropped by ``discard`` when it failed (see :mod:`snapbuild.trial.snapctl`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from snapbuild.trial.snapctl.config import cmd_get, cmd_set, cmd_unset
from snapbuild.trial.snapctl.services import cmd_services, resolve, service_action
from snapbuild.trial.snapctl.state import (
    HOOK_VAR,
    STAGED_VAR,
    STATE_VAR,
    StandinError,
    locked,
    read,
    write,
)
from snapbuild.trial.snapctl.supervisor import cmd_supervise

QUEUE_FILE = "queue.json"
CONNECTIONS_FILE = "connections.json"
QUEUED = ("install", "remove", "start", "stop", "restart")
COMPONENT_COMMANDS = ("install", "remove")


# components and interfaces -----------------------------------------------------------------
def _component_names(args: list[str], verb: str) -> list[str]:
    names = []
    for arg in args:
        if not arg.startswith("+") or len(arg) < 2:
            raise StandinError(f"snapctl {verb} only {verb}s components (+name), not {arg!r}")
        names.append(arg[1:])
    return names


def cmd_install(args: list[str]) -> str:
    staged = Path(os.environ.get(STAGED_VAR, ""))
    target_root = Path(os.environ["SNAP_COMPONENTS"])
    for name in _component_names(args, "install"):
        source = staged / name
        if not source.is_dir():
            raise StandinError(
                f"cannot install component {name!r}: not available (looked in {source})"
            )
        target = target_root / name
        target_root.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            continue  # already installed
        target.symlink_to(source.resolve(), target_is_directory=True)
    return ""


def cmd_remove(args: list[str]) -> str:
    target_root = Path(os.environ["SNAP_COMPONENTS"])
    for name in _component_names(args, "remove"):
        target = target_root / name
        if not target.is_symlink() and not target.exists():
            raise StandinError(f"cannot remove component {name!r}: it is not installed")
        target.unlink()
    return ""


def cmd_is_connected(args: list[str]) -> str:
    if len(args) != 1:
        raise StandinError("is-connected takes one plug name")
    if not read(CONNECTIONS_FILE, {}).get(args[0], True):
        raise StandinError("")  # snapctl's "no": exit 1, nothing printed
    return ""


# hooks: queued until the hook has succeeded ------------------------------------------------
def _queue(command: str, args: list[str]) -> str:
    """Record a command asked for inside a hook (checked now, performed by ``flush``)."""
    if command in COMPONENT_COMMANDS:
        _component_names(args, command)
    else:
        resolve([a for a in args if not a.startswith("-")])
    with locked():
        queue = read(QUEUE_FILE, [])
        queue.append({"hook": os.environ[HOOK_VAR], "command": command, "args": args})
        write(QUEUE_FILE, queue)
    return ""


def cmd_flush(args: list[str]) -> str:
    """Internal: the hook ended with status 0; do what it queued, components first.

    Stops at the first failure (like a snapd change whose task fails) and drops the rest.
    """
    if os.environ.get(HOOK_VAR):
        raise StandinError("flush runs after the hook, not inside it")
    with locked():
        queue = read(QUEUE_FILE, [])
        write(QUEUE_FILE, [])
    ordered = [q for q in queue if q["command"] in COMPONENT_COMMANDS]
    ordered += [q for q in queue if q["command"] not in COMPONENT_COMMANDS]
    for item in ordered:
        try:
            COMMANDS[item["command"]](list(item["args"]))
        except StandinError as err:
            words = " ".join([item["command"], *item["args"]])
            raise StandinError(f"after the {item['hook']} hook, `{words}` failed: {err}") from None
    return ""


def cmd_discard(args: list[str]) -> str:
    """Internal: the hook failed; nothing it queued happens (snapd undoes the hook's change)."""
    with locked():
        write(QUEUE_FILE, [])
    return ""


COMMANDS: dict[str, Callable[[list[str]], str]] = {
    "get": cmd_get,
    "set": cmd_set,
    "unset": cmd_unset,
    "services": cmd_services,
    "start": lambda a: service_action(a, "start"),
    "stop": lambda a: service_action(a, "stop"),
    "restart": lambda a: service_action(a, "restart"),
    "install": cmd_install,
    "remove": cmd_remove,
    "is-connected": cmd_is_connected,
    "supervise": cmd_supervise,
    "flush": cmd_flush,
    "discard": cmd_discard,
}


# What only reads or writes the snap's state: the part the snapd-like harness
# (:mod:`snapbuild.trial.snapd`) delegates to, while it performs the actions itself.
STATE_COMMANDS = ("get", "set", "unset", "is-connected")


def run(args: list[str]) -> tuple[int, str, str]:
    """One snapctl command: exit status, stdout and stderr as snapctl prints them."""
    try:
        if os.environ.get(HOOK_VAR) and args[0] in QUEUED:
            out = _queue(args[0], args[1:])
        else:
            out = COMMANDS[args[0]](args[1:])
    except StandinError as err:
        return 1, "", f"error: {err}\n" if str(err) else ""
    return 0, f"{out}\n" if out else "", ""


def main(argv: list[str] | None = None) -> int:
    """Run one snapctl command; errors print like snapctl's and exit 1."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in COMMANDS:
        sys.stderr.write(f"error: unknown command, use one of: {', '.join(COMMANDS)}\n")
        return 1
    missing = [v for v in ("SNAP", "SNAP_NAME", STATE_VAR) if not os.environ.get(v)]
    if missing:
        sys.stderr.write(
            f"error: {', '.join(missing)} not set: run this stand-in in the simulated snap "
            "environment (source the trial's env.sh)\n"
        )
        return 1
    code, out, err = run(args)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code
