"""A file-backed ``snapctl`` for running a snap's hooks and apps without snapd.

``snapbuild try`` writes an executable named ``snapctl`` that runs :func:`main` and puts it first
on PATH, so the in-snap code calls it exactly as it calls snapd's. It keeps what snapd would keep
in files under ``$SNAPCTL_STANDIN_STATE``:

- ``config.json``: the snap's configuration (nested objects for dotted keys, like snapd);
- ``services.json``: each app's enabled flag and the pid of its supervisor; services are
  started from ``$SNAP/meta/snap.yaml``'s ``apps:`` entry in their own session (process group),
  with output in ``logs/<app>.log``, and stopped by signalling that whole group. A small
  supervisor honours ``restart-condition`` (default ``on-failure``) and ``restart-delay`` like
  systemd does for snapd, with systemd's default start limit (5 starts within 10 s, then the
  service is marked failed and left stopped), so a daemon that keeps failing is not restarted
  forever;
- ``connections.json``: which plugs are connected (absent plugs count as connected, as when an
  operator has run ``snap connect``; tests write ``false`` to simulate a missing connection).

``install +<component>`` links ``$SNAPCTL_STANDIN_COMPONENTS/<component>`` (where the trial staged
the component's files) to ``$SNAP_COMPONENTS/<component>``, where snapd would mount it;
``remove +<component>`` takes the link away.

Inside a hook snapd does not do these at once. Its documentation: "If these commands are run from
a hook, the components will be installed/removed after the hook itself has run if it ended
successfully", and service commands from a hook are queued the same way. snapd knows it serves a
hook from the context behind ``$SNAP_COOKIE``; a file-backed stand-in has no such context, so
whoever runs a hook (``snapbuild try``, the tests) sets ``$SNAPCTL_STANDIN_HOOK`` to the hook's
name. While it is set, ``install``, ``remove``, ``start``, ``stop`` and ``restart`` are appended to
``queue.json``; after the hook the runner calls ``flush`` (exit 0: component changes first, then
service changes, in the order asked, as snapd's change does) or ``discard`` (the hook failed:
nothing queued happens). Outside a hook they happen at once, as ``snapctl install`` blocks there.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

STATE_VAR = "SNAPCTL_STANDIN_STATE"
STAGED_VAR = "SNAPCTL_STANDIN_COMPONENTS"
HOOK_VAR = "SNAPCTL_STANDIN_HOOK"  # set by the hook runner: we are inside that hook
QUEUE_FILE = "queue.json"
QUEUED = ("install", "remove", "start", "stop", "restart")
# snapd's rule for each dotted segment of an option name
KEY_SEGMENT_RE = re.compile(r"^(?:[a-z0-9]+-?)*[a-z](?:-?[a-z0-9])*$")
STOP_TIMEOUT_S = 15.0
# systemd's defaults for a unit snapd writes (DefaultStartLimitBurst/IntervalSec, RestartSec);
# the variables let a test widen the window on a slow machine.
START_LIMIT_BURST_VAR = "SNAPCTL_STANDIN_START_LIMIT_BURST"
START_LIMIT_INTERVAL_VAR = "SNAPCTL_STANDIN_START_LIMIT_INTERVAL"
START_LIMIT_BURST = 5
START_LIMIT_INTERVAL_S = 10.0
RESTART_DELAY_S = 0.1
_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class StandinError(Exception):
    """A refusal, printed as ``error: ...`` with exit status 1 like snapctl."""


def _state_dir() -> Path:
    value = os.environ.get(STATE_VAR)
    if not value:
        raise StandinError(f"{STATE_VAR} is not set: this stand-in keeps its state there")
    path = Path(value)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _read(name: str, default: Any) -> Any:
    path = _state_dir() / name
    if not path.exists():
        return default
    return json.loads(path.read_text(encoding="utf-8"))


def _write(name: str, data: Any) -> None:
    path = _state_dir() / name
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Serialize concurrent snapctl calls, as snapd's state lock does."""
    with (_state_dir() / "lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


# configuration -----------------------------------------------------------------------------
def _check_key(key: str) -> list[str]:
    parts = key.split(".")
    for part in parts:
        if not KEY_SEGMENT_RE.match(part):
            raise StandinError(f"invalid option name: {key!r}")
    return parts


def _lookup(config: dict[str, Any], key: str) -> Any:
    node: Any = config
    for part in _check_key(key):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _assign(config: dict[str, Any], key: str, value: Any) -> None:
    parts = _check_key(key)
    node = config
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    if value is None:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def cmd_get(args: list[str]) -> str:
    document = "-d" in args
    keys = [a for a in args if not a.startswith("-")]
    config = _read("config.json", {})
    if not keys:
        return json.dumps(config, indent=2)
    values = {k: _lookup(config, k) for k in keys}
    if document or len(keys) > 1:
        return json.dumps({k: v for k, v in values.items() if v is not None}, indent=2)
    value = values[keys[0]]
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, indent=2)


def cmd_set(args: list[str]) -> str:
    with _locked():
        config = _read("config.json", {})
        for arg in args:
            if arg.endswith("!") and "=" not in arg:
                _assign(config, arg[:-1], None)
                continue
            key, sep, text = arg.partition("=")
            if not sep:
                raise StandinError(f"invalid configuration: {arg!r} (want key=value)")
            _assign(config, key, _parse_value(text))
        _write("config.json", config)
    return ""


def cmd_unset(args: list[str]) -> str:
    return cmd_set([f"{key}!" for key in args])


# services ----------------------------------------------------------------------------------
def _snap_yaml() -> dict[str, Any]:
    path = Path(os.environ["SNAP"]) / "meta" / "snap.yaml"
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data


def _daemons() -> dict[str, dict[str, Any]]:
    apps = _snap_yaml().get("apps") or {}
    return {name: app for name, app in apps.items() if app.get("daemon")}


def _resolve(names: list[str]) -> list[str]:
    """Service arguments (``snap.app`` or ``snap``) to app names."""
    snap = os.environ["SNAP_NAME"]
    daemons = _daemons()
    if not names:
        return sorted(daemons)
    apps: list[str] = []
    for name in names:
        if name == snap:
            apps.extend(sorted(daemons))
            continue
        prefix, _, app = name.partition(".")
        if prefix != snap or app not in daemons:
            raise StandinError(f"unknown service: {name!r}")
        apps.append(app)
    return apps


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), None when gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in {"Z", "X"} else fields[19]


def _alive(record: dict[str, Any]) -> bool:
    pid = record.get("pid")
    if not pid:
        return False
    return _start_time(int(pid)) == record.get("start-time")


_VAR_RE = re.compile(r"\$(?:\{(\w+)(?::([+-])((?:[^{}]|\{[^{}]*\})*))?\}|(\w+))")


def expand(value: str, env: dict[str, str]) -> str:
    """Expand $VAR, ${VAR}, ${VAR:+word} and ${VAR:-word} as a shell would (unset: empty)."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(4)
        current = env.get(name, "")
        if match.group(2) == "+":
            return expand(match.group(3), env) if current else ""
        if match.group(2) == "-":
            return current or expand(match.group(3), env)
        return current

    return _VAR_RE.sub(one, value)


def _environment(app: dict[str, Any]) -> dict[str, str]:
    """The daemon's environment: the caller's snap variables plus snap.yaml's ``environment``."""
    env = dict(os.environ)
    env.pop(HOOK_VAR, None)  # a service is not part of the hook that asked for it
    for source in (_snap_yaml().get("environment") or {}, app.get("environment") or {}):
        for key, value in source.items():
            env[key] = expand(str(value), env)
    return env


def _spawn(name: str, app: dict[str, Any]) -> dict[str, Any]:
    """Start the app's supervisor in its own session; it runs (and re-runs) the command."""
    logs = _state_dir() / "logs"
    logs.mkdir(exist_ok=True)
    with (logs / f"{name}.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "snaps.snapctl_standin", "supervise", name],
            cwd=os.environ.get("SNAP_DATA", os.environ["SNAP"]),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop kills the whole tree
        )
    return {"pid": proc.pid, "start-time": _start_time(proc.pid)}


def _duration(text: Any, default: float) -> float:
    match = _DURATION_RE.match(str(text).strip()) if text is not None else None
    return float(match[1]) * _UNITS[match[2]] if match else default


def should_restart(condition: str, returncode: int) -> bool:
    """systemd's Restart= rules for an exit status (negative: killed by that signal)."""
    if condition == "always":
        return True
    if condition == "on-success":
        return returncode == 0
    if condition == "on-failure":
        return returncode != 0
    if condition in {"on-abnormal", "on-abort"}:
        return returncode < 0
    return False  # never, on-watchdog (no watchdog here)


class _Supervisor:
    """Runs one daemon and restarts it by its ``restart-condition``, within the start limit."""

    def __init__(self, name: str, app: dict[str, Any]) -> None:
        self.name = name
        self.condition = str(app.get("restart-condition") or "on-failure")
        self.delay = _duration(app.get("restart-delay"), RESTART_DELAY_S)
        self.burst = int(os.environ.get(START_LIMIT_BURST_VAR) or START_LIMIT_BURST)
        self.interval = _duration(os.environ.get(START_LIMIT_INTERVAL_VAR), START_LIMIT_INTERVAL_S)
        argv = shlex.split(app["command"])
        argv[0] = str(Path(os.environ["SNAP"]) / argv[0])
        self.argv = argv
        self.env = _environment(app)
        self.stopping = False
        self.child: subprocess.Popen[bytes] | None = None

    def say(self, message: str) -> None:
        sys.stdout.write(f"snapctl-standin: {self.name}: {message}\n")
        sys.stdout.flush()

    def on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.child.send_signal(signum)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        starts: list[float] = []
        while not self.stopping:
            starts.append(time.monotonic())
            self.say(f"starting (attempt {len(starts)})")
            self.child = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL)
            code = self.child.wait()
            if self.stopping:
                return 0
            self.say(f"exited with status {code}")
            if not should_restart(self.condition, code):
                return 0
            now = time.monotonic()
            recent = [t for t in starts if now - t < self.interval]
            if len(recent) >= self.burst:
                self.say(
                    f"start limit hit ({len(recent)} starts within {self.interval:g}s); "
                    "not restarting: the service is failed"
                )
                self.mark_failed(len(starts))
                return 1
            time.sleep(self.delay)
        return 0

    def mark_failed(self, starts: int) -> None:
        """Note the failure in services.json (never blocking a `stop` that holds the lock)."""
        with (_state_dir() / "lock").open("w") as fh:
            while not self.stopping:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    time.sleep(0.05)
                    continue
                services = _read("services.json", {})
                record = services.get(self.name, {})
                if record.get("pid") == os.getpid():
                    record["failed"] = True
                    record["starts"] = starts
                    services[self.name] = record
                    _write("services.json", services)
                return


def cmd_supervise(args: list[str]) -> str:
    """Internal: the supervisor process of one app (started by start/restart)."""
    if len(args) != 1 or args[0] not in _daemons():
        raise StandinError("supervise takes the name of one daemon app")
    raise SystemExit(_Supervisor(args[0], _daemons()[args[0]]).run())


def _terminate(record: dict[str, Any]) -> None:
    if not _alive(record):
        return
    pid = int(record["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _alive(record) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(record):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)  # leftovers of the group, if any


def _service_action(args: list[str], action: str) -> str:
    enable = "--enable" in args
    disable = "--disable" in args
    names = [a for a in args if not a.startswith("-")]
    daemons = _daemons()
    with _locked():
        services = _read("services.json", {})
        for app in _resolve(names):
            record = services.get(app, {"enabled": False})
            if action in {"stop", "restart"}:
                _terminate(record)
                record.pop("pid", None)
                record.pop("start-time", None)
            if action in {"start", "restart"} and not _alive(record):
                record.pop("failed", None)  # an explicit start clears the start limit
                record.pop("starts", None)
                record.update(_spawn(app, daemons[app]))
            if enable:
                record["enabled"] = True
            if disable:
                record["enabled"] = False
            services[app] = record
        _write("services.json", services)
    return ""


def cmd_services(args: list[str]) -> str:
    snap = os.environ["SNAP_NAME"]
    services = _read("services.json", {})
    rows = [("Service", "Startup", "Current", "Notes")]
    for app in _resolve([a for a in args if not a.startswith("-")]):
        record = services.get(app, {"enabled": False})
        rows.append(
            (
                f"{snap}.{app}",
                "enabled" if record.get("enabled") else "disabled",
                "active" if _alive(record) else "inactive",
                "failed" if record.get("failed") and not _alive(record) else "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) if i < 3 else cell for i, cell in enumerate(row))
        for row in rows
    )


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


# hooks: queued until the hook has succeeded ------------------------------------------------
def _queue(command: str, args: list[str]) -> str:
    """Record a command asked for inside a hook (checked now, performed by ``flush``)."""
    if command in {"install", "remove"}:
        _component_names(args, command)
    else:
        _resolve([a for a in args if not a.startswith("-")])
    with _locked():
        queue = _read(QUEUE_FILE, [])
        queue.append({"hook": os.environ[HOOK_VAR], "command": command, "args": args})
        _write(QUEUE_FILE, queue)
    return ""


def cmd_flush(args: list[str]) -> str:
    """Internal: the hook ended with status 0; do what it queued, components first.

    Stops at the first failure (like a snapd change whose task fails) and drops the rest.
    """
    if os.environ.get(HOOK_VAR):
        raise StandinError("flush runs after the hook, not inside it")
    with _locked():
        queue = _read(QUEUE_FILE, [])
        _write(QUEUE_FILE, [])
    ordered = [q for q in queue if q["command"] in {"install", "remove"}]
    ordered += [q for q in queue if q["command"] not in {"install", "remove"}]
    for item in ordered:
        try:
            COMMANDS[item["command"]](list(item["args"]))
        except StandinError as err:
            words = " ".join([item["command"], *item["args"]])
            raise StandinError(f"after the {item['hook']} hook, `{words}` failed: {err}") from None
    return ""


def cmd_discard(args: list[str]) -> str:
    """Internal: the hook failed; nothing it queued happens (snapd undoes the hook's change)."""
    with _locked():
        _write(QUEUE_FILE, [])
    return ""


def cmd_is_connected(args: list[str]) -> str:
    if len(args) != 1:
        raise StandinError("is-connected takes one plug name")
    if not _read("connections.json", {}).get(args[0], True):
        raise SystemExit(1)
    return ""


COMMANDS = {
    "get": cmd_get,
    "set": cmd_set,
    "unset": cmd_unset,
    "services": cmd_services,
    "start": lambda a: _service_action(a, "start"),
    "stop": lambda a: _service_action(a, "stop"),
    "restart": lambda a: _service_action(a, "restart"),
    "install": cmd_install,
    "remove": cmd_remove,
    "is-connected": cmd_is_connected,
    "supervise": cmd_supervise,
    "flush": cmd_flush,
    "discard": cmd_discard,
}


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
    try:
        if os.environ.get(HOOK_VAR) and args[0] in QUEUED:
            out = _queue(args[0], args[1:])
        else:
            out = COMMANDS[args[0]](args[1:])
    except StandinError as err:
        sys.stderr.write(f"error: {err}\n")
        return 1
    if out:
        sys.stdout.write(out + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
