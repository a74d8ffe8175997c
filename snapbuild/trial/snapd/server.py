"""The snapd stand-in: the process behind the snap's ``/run/snapd-snap.socket``.

In a snap, ``snapctl`` (a static Go program from the base, ``/usr/bin/snapctl``) posts
``{"context-id": $SNAP_COOKIE, "args": [...]}`` to ``/v2/snapctl`` on that socket
(``cmd/snapctl/tool/snapctl/main.go``), and snapd answers with ``sync`` ``{stdout, stderr}``, an
``unsuccessful`` error carrying an exit code, or a plain error (``daemon/api_snapctl.go``). So
the snap here runs the real, unmodified snapctl, and this server, outside the namespace, answers
as snapd does:

- it tells hooks from apps by the cookie: each hook has a fresh context id, apps and services
  the snap's cookie, anything else is refused; a non-root caller (``SO_PEERCRED``) gets only the
  commands snapd allows it (``overlord/hookstate/ctlcmd/ctlcmd.go:164``);
- inside a hook, ``install``/``remove``/``start``/``stop``/``restart`` are queued and performed
  after the hook succeeded, components first, stopping at the first failure; a failed hook's
  queue is dropped;
- it mounts components in the namespace and runs services there (:mod:`.services`);
- ``get``/``set``/``unset``/``is-connected`` go to the project's snapctl stand-in
  (:mod:`snapbuild.trial.snapctl`), whose state files stay on the host, in this process.

The harness drives it on a second socket, outside the namespace (``/harness/*``), so a snap
cannot end its own hook. One thread: forking into the namespace stays safe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import http.server
import json
import os
import selectors
import signal
import socket
import socketserver
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

from snapbuild.trial.snapctl import commands as standin
from snapbuild.trial.snapctl.state import STATE_VAR, StandinError
from snapbuild.trial.snapd.control import ServerSpec
from snapbuild.trial.snapd.env import Placement, caller_environment, launch
from snapbuild.trial.snapd.errors import HarnessError
from snapbuild.trial.snapd.kernel import die_with_parent, in_namespace, spawn
from snapbuild.trial.snapd.namespace import (
    SNAPD_SNAP_SOCKET,
    enter,
    mount_component,
    read_meta,
    unmount_component,
)
from snapbuild.trial.snapd.rules import environment_rules
from snapbuild.trial.snapd.seccomp import FilterCache
from snapbuild.trial.snapd.services import ServiceSet

NON_ROOT_COMMANDS = frozenset(
    {"get", "services", "set-health", "is-connected", "system-mode", "refresh", "model"}
    | {"version", "is-ready", "tasks", "change"}
)
QUEUED = ("install", "remove", "start", "stop", "restart")  # deferred inside a hook
Answer = tuple[int, str, str]  # exit status, stdout, stderr ("error: ..." for a refusal)


class SnapdStandIn:
    """snapd's part: the snapctl API, hook contexts, components and services."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.ns_fd = os.open(f"/proc/{spec.holder_pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        self.place = Placement(spec.name, spec.revision)
        self.meta = read_meta(spec.holder_pid, self.place)
        self.hooks: dict[str, str] = {}  # context id -> hook name
        self.queue: dict[str, list[list[str]]] = {}
        self.installed: list[str] = []
        connections = spec.state_dir / standin.CONNECTIONS_FILE
        self.filters = FilterCache(
            connections, "inet-only" if spec.policy_mode == "inet-only" else "snapd"
        )
        self.services = ServiceSet(spec.name, self.meta, self._start_service)
        spec.log_dir.mkdir(exist_ok=True)
        os.environ[STATE_VAR] = str(spec.state_dir)  # the stand-in keeps its files there

    def snapctl(self, cookie: str, args: list[str], uid: int) -> Answer:
        """One snapctl command from the snap, as snapd's ``/v2/snapctl`` handles it."""
        if not args:
            return 1, "", "error: snapctl cannot run without args\n"
        hook = self.hooks.get(cookie)
        if hook is None and cookie != self.spec.app_cookie:
            return 1, "", f"error: no context for cookie {cookie!r}\n"
        if uid != 0 and args[0] not in NON_ROOT_COMMANDS and not {"-h", "--help"} & set(args):
            return 1, "", f'error: cannot use "{args[0]}" with uid {uid}, try with sudo\n'
        return self.perform(args, cookie if hook else None)

    def perform(self, args: list[str], hook_cookie: str | None = None) -> Answer:
        """Do one command; inside a hook, queue what snapd performs after the hook."""
        command, rest = args[0], args[1:]
        try:
            if command in QUEUED and hook_cookie is not None:
                self._check(command, rest)  # refused now, as snapd refuses it in the hook
                self.queue[hook_cookie].append(args)
                return 0, "", ""
            if command in ("install", "remove"):
                self._components(command, rest)
                return 0, "", ""
            if command in ("start", "stop", "restart"):
                self.services.act(command, rest)
                return 0, "", ""
            if command == "services":
                return 0, self.services.table(rest), ""
        except (HarnessError, StandinError, OSError) as exc:
            details = exc.details if isinstance(exc, HarnessError) else None
            return 1, "", f"error: {exc}{f' ({details})' if details else ''}\n"
        if command in standin.STATE_COMMANDS:
            return standin.run(args)
        known = ", ".join((*QUEUED, "services", *standin.STATE_COMMANDS))
        return 1, "", f"error: unknown command {command!r} (the harness answers {known})\n"

    def hook_started(self, cookie: str, hook: str) -> None:
        self.hooks[cookie] = hook
        self.queue[cookie] = []

    def hook_finished(self, cookie: str, ok: bool) -> str:
        """Perform (the hook succeeded) or drop (it failed) what it queued: components, then
        services, each in the order asked; stop at the first failure, as a snapd change does.
        Returns that failure, or ""."""
        hook = self.hooks.pop(cookie, "?")
        queued = self.queue.pop(cookie, [])
        if not ok:
            return ""
        ordered = [q for q in queued if q[0] in ("install", "remove")]
        ordered += [q for q in queued if q[0] not in ("install", "remove")]
        for args in ordered:
            code, _, err = self.perform(args)
            if code != 0:
                return f"after the {hook} hook, `snapctl {' '.join(args)}` failed: {err.strip()}"
        return ""

    def _check(self, command: str, args: list[str]) -> list[str]:
        """The components or services a queued command names; unknown ones are refused."""
        if command in ("start", "stop", "restart"):
            return self.services.resolve([a for a in args if not a.startswith("-")])
        names = []
        for arg in args:
            if not arg.startswith("+"):
                raise HarnessError(f"snapctl {command} handles components (+name), not {arg!r}")
            if arg[1:] not in self.meta.components:
                raise HarnessError(f"{self.spec.name} has no component {arg[1:]!r}")
            names.append(arg[1:])
        return names

    def _components(self, command: str, names: list[str]) -> None:
        for comp in self._check(command, names):
            if command == "install" and comp not in self.installed:
                image = self.spec.components.get(comp)
                if image is None:
                    raise HarnessError(f"cannot install component {comp!r}: no .comp file given")
                backing = os.open(image, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    in_namespace(
                        self.ns_fd, functools.partial(mount_component, self.place, comp, backing)
                    )
                finally:
                    os.close(backing)
                self.installed.append(comp)
            elif command == "remove":
                if comp not in self.installed:
                    raise HarnessError(f"component {comp!r} is not installed")
                in_namespace(self.ns_fd, functools.partial(unmount_component, self.place, comp))
                self.installed.remove(comp)

    def _start_service(self, app: str) -> subprocess.Popen[bytes]:
        """One process of a daemon app, as systemd starts snapd's unit for it."""
        runnable = self.meta.apps[app]
        snapd = self.spec.snapd_release
        run = launch(
            self.meta,
            runnable,
            "service",
            self.place,
            {**caller_environment("service", snapd_pid=os.getpid()), **self.spec.extra_env},
            app_cookie=self.spec.app_cookie,
            snapd=snapd,
            exec_via="snap-exec" if self.spec.exec_via == "snap-exec" else "harness",
        )
        creates_xdg = environment_rules().behaves("xdg-runtime-dir-created", snapd)
        prepare = enter(
            self.ns_fd,
            run.cwd,
            self.filters.for_runnable(self.meta, runnable),
            xdg_runtime_dir=run.env["XDG_RUNTIME_DIR"] if creates_xdg else None,
        )
        with (self.spec.log_dir / f"{app}.log").open("ab") as log:
            return spawn(
                run.argv,
                prepare,
                env=run.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, as a unit's control group
            )

    def set_revision(self, revision: str, components: dict[str, str]) -> None:
        """A refresh made ``revision`` current: later hooks, apps and services run it, and
        ``components`` (name -> .comp file) replace the files components install from."""
        self.spec = dataclasses.replace(
            self.spec, components={**self.spec.components, **components}
        )
        self.place = Placement(self.spec.name, revision)
        self.meta = read_meta(self.spec.holder_pid, self.place)
        self.services.retarget(self.meta)

    def control(self, path: str, body: dict[str, Any]) -> Any:
        """The harness's requests (``/harness/<what>``)."""
        if path == "/harness/hook-started":
            self.hook_started(body["cookie"], body["hook"])
        elif path == "/harness/hook-finished":
            return self.hook_finished(body["cookie"], bool(body["ok"]))
        elif path == "/harness/operator":
            return list(self.perform([str(a) for a in body["args"]]))
        elif path == "/harness/revision":
            self.set_revision(body["revision"], body.get("components") or {})
        elif path == "/harness/start-snap-services":
            self.services.start_snap_services(install=bool(body["install"]))
        elif path == "/harness/services":
            return self.services.statuses()
        elif path == "/harness/stop-all":
            self.services.stop_all()
        elif path == "/harness/installed":
            return list(self.installed)
        else:
            raise HarnessError(f"unknown request {path}")
        return None


def _reply(answer: Answer) -> tuple[int, dict[str, Any]]:
    """snapd's response to a snapctl request: sync, unsuccessful (an exit status), or an error
    whose message the client prints after ``error:``."""
    code, out, err = answer
    if code == 0:
        return 200, {"type": "sync", "status-code": 200, "result": {"stdout": out, "stderr": err}}
    if err.startswith("error: ") and not out:
        message = f"snapctl: {err.removeprefix('error: ').strip()}"
        return 400, {"type": "error", "status-code": 400, "result": {"message": message}}
    value = {"stdout": out, "stderr": err, "exit-code": code}
    result = {"message": f"unsuccessful with exit code: {code}", "kind": "unsuccessful"}
    return 200, {"type": "error", "status-code": 200, "result": {**result, "value": value}}


def _handler(stand_in: SnapdStandIn, control: bool) -> type[http.server.BaseHTTPRequestHandler]:
    """HTTP for /v2/snapctl (the snap's socket) or /harness/* (the control socket)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
            pass

        def address_string(self) -> str:
            return "unix"

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if not control and self.path == "/v2/snapctl":
                creds = self.connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
                answer = stand_in.snapctl(
                    str(body.get("context-id") or ""),
                    [str(a) for a in body.get("args") or []],
                    struct.unpack("3i", creds)[1],
                )
                self._send(*_reply(answer))
            elif control:
                try:
                    result = stand_in.control(self.path, body)
                except (HarnessError, OSError) as exc:
                    message = exc.format() if isinstance(exc, HarnessError) else str(exc)
                    self._send(500, {"type": "error", "result": {"message": message}})
                    return
                self._send(200, {"type": "sync", "result": result})
            else:
                self._send(404, {"type": "error", "result": {"message": "not found"}})

        def _send(self, status: int, data: dict[str, Any]) -> None:
            payload = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True  # one request per connection: one thread serves all
            self.wfile.write(payload)

    return Handler


def serve(spec_path: Path) -> None:
    """The server process: both sockets, one thread, systemd's restarts between requests."""
    die_with_parent(signal.SIGTERM)
    spec = ServerSpec.load(spec_path)
    stand_in = SnapdStandIn(spec)
    snap_socket = f"/proc/{spec.holder_pid}/root{SNAPD_SNAP_SOCKET}"
    servers = []
    for path, control, mode in (
        (snap_socket, False, 0o666),
        (str(spec.control_socket), True, 0o600),
    ):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        server = socketserver.UnixStreamServer(path, _handler(stand_in, control))
        os.chmod(path, mode)
        servers.append(server)
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    selector = selectors.DefaultSelector()
    for server in servers:
        selector.register(server.socket, selectors.EVENT_READ, server)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    try:
        while not stop:
            for key, _ in selector.select(timeout=0.05):
                key.data.handle_request()
            stand_in.services.supervise()
    finally:
        stand_in.services.stop_all()


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
