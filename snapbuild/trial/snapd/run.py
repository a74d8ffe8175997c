"""``SnapRun``: one installed snap in its namespace, driven the way snapd and a user drive it.

``with SnapRun(snap_file, work, components={"weights": comp}) as run:`` mounts the snap (see
:mod:`.namespace`) and starts the snapd stand-in (:mod:`.server`); then ``run.install()`` is
``snap install`` (install hook, services, configure hook), ``run.run_app(app, [args])`` is a user's
``snap run``, ``run.snap_set("port=8400")`` is ``snap set`` (configure hook; the configuration is
rolled back when the hook fails, as snapd does), ``run.refresh(new_snap)`` is ``snap refresh``
(pre-refresh, services stopped, data copied, post-refresh, services, configure), and
``run.wait_for_port(8400, service="server")`` waits for a daemon, which listens on the host's
network (the harness makes a mount namespace only). Leaving the block stops everything; the loop
devices go with the namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from snapbuild.trial.snapctl.commands import CONNECTIONS_FILE
from snapbuild.trial.snapctl.config import CONFIG_FILE
from snapbuild.trial.snapd.base import HostPython, find_host_python
from snapbuild.trial.snapd.check import require_host
from snapbuild.trial.snapd.control import LOG_TAIL, ServerSpec, post, start_server
from snapbuild.trial.snapd.env import (
    SNAP_EXEC,
    ExecVia,
    Placement,
    caller_environment,
    launch,
    newest_snapd,
)
from snapbuild.trial.snapd.errors import HarnessError
from snapbuild.trial.snapd.kernel import in_namespace, spawn
from snapbuild.trial.snapd.meta import Runnable, snap_name
from snapbuild.trial.snapd.namespace import (
    NamespacePlan,
    enter,
    mount_revision,
    read_meta,
    relink,
    snapctl_client,
    start_holder,
)
from snapbuild.trial.snapd.rules import Release, RunKind, environment_rules, socket_rules
from snapbuild.trial.snapd.seccomp import FilterCache, PolicyMode
from snapbuild.trial.snapd.services import ServiceStatus
from snapcommon.files import write_atomically


@dataclass
class RunResult:
    """A finished hook or app: what it printed, and (hooks) what snapd failed to do after it."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    after_hook: str = ""  # the queued action that failed after the hook, if any
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.after_hook


class SnapRun:
    """One installed snap; its hooks, apps and services run as snapd runs them.

    ``components``: the ``.comp`` files that ``snapctl install +<name>`` mounts.
    ``connections``: plugs the operator connected (``True``) or disconnected (``False``);
    the others are as snapd leaves them on install: connected when their interface
    auto-connects (``network``, ``network-bind``), not when it does not (``hardware-observe``).
    ``extra_env``: for tests, variables added to every caller's environment (snapd's for hooks,
    the unit's for services, the shell's for apps), as if those had them; snapd has no such knob.
    ``snapd_version``: the snapd release whose rules apply (default the newest described;
    2.68-2.76 expand ``${VAR:+...}`` differently from 2.77+). ``base_python``: the Python 3.12
    laid out as core24's (``"auto"`` finds one and fails when there is none; ``None`` runs on
    the host's /usr as it is). ``policy_mode="inet-only"`` denies AF_INET/AF_INET6 sockets and
    nothing else. ``exec_via="snap-exec"`` leaves the last step to snapd's own snap-exec.
    ``snapctl="client"`` uses the harness's snapctl client even where snapd's exists.
    ``login_session``: /run/user/<uid> exists, as it does under a logind session.
    """

    def __init__(
        self,
        snap_file: Path,
        work: Path,
        *,
        components: Mapping[str, Path] | None = None,
        connections: Mapping[str, bool] | None = None,
        extra_env: Mapping[str, str] | None = None,
        snapd_version: Release | None = None,
        base_python: HostPython | Literal["auto"] | None = "auto",
        policy_mode: PolicyMode = "snapd",
        exec_via: ExecVia = "harness",
        snapctl: Literal["auto", "client"] = "auto",
        login_session: bool = False,
        revision: str = "x1",
    ) -> None:
        self.base_python = find_host_python() if base_python == "auto" else base_python
        require_host(overlay=self.base_python is not None and not self.base_python.native)
        if exec_via == "snap-exec" and not os.path.exists(SNAP_EXEC):
            raise HarnessError(
                f"exec_via='snap-exec' needs {SNAP_EXEC}", resolution="apt-get install snapd"
            )
        self.work = work.resolve()
        self.snap_file = snap_file.resolve()
        self.place = Placement(snap_name(self.snap_file), revision)
        self.snapd = snapd_version or newest_snapd()
        self.exec_via = exec_via
        self.app_cookie = secrets.token_urlsafe(33)  # snapd's per-snap cookie for apps
        self.state_dir = self.work / "snapctl-state"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.filters = FilterCache(self.state_dir / CONNECTIONS_FILE, policy_mode)
        client = snapctl_client(force=snapctl == "client")
        plan = NamespacePlan(
            self.work, self.place, self.snap_file, self.base_python, client, login_session
        )
        plan.prepare_dirs()
        started = time.perf_counter()
        self.holder = start_holder(plan)
        self.server: subprocess.Popen[bytes] | None = None
        self.ns_fd = -1
        try:
            self.ns_fd = os.open(f"/proc/{self.holder.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            self.setup_seconds = time.perf_counter() - started
            self.meta = read_meta(self.holder.pid, self.place)
            self._connect_on_install(connections or {})
            self.spec = ServerSpec(
                work=str(self.work),
                name=self.place.name,
                revision=revision,
                holder_pid=self.holder.pid,
                app_cookie=self.app_cookie,
                components={k: str(Path(v).resolve()) for k, v in (components or {}).items()},
                policy_mode=policy_mode,
                exec_via=exec_via,
                snapd=self.snapd,
                extra_env=dict(extra_env or {}),
            )
            self.server = start_server(self.spec)
        except BaseException:
            self.close()
            raise

    def _connect_on_install(self, given: Mapping[str, bool]) -> None:
        """snapd's auto-connection, then the operator's ``snap connect``/``disconnect``."""
        rules = socket_rules().interfaces
        state = {
            plug: False
            for plug, interface in self.meta.interfaces.items()
            if interface in rules and not rules[interface].auto_connect
        }
        self._write_connections({**state, **given})

    def _write_connections(self, state: Mapping[str, bool]) -> None:
        text = json.dumps(state, indent=2, sort_keys=True) + "\n"
        write_atomically(self.state_dir / CONNECTIONS_FILE, text)

    # -- running -----------------------------------------------------------------------
    def _control(self, what: str, **body: Any) -> Any:
        return post(self.spec.control_socket, f"/harness/{what}", body)

    def _run(
        self,
        runnable: Runnable,
        kind: RunKind,
        caller_env: Mapping[str, str],
        caller_cwd: str,
        args: Sequence[str] = (),
        input_text: str | None = None,
        timeout: float | None = None,
    ) -> RunResult:
        run = launch(
            self.meta,
            runnable,
            kind,
            self.place,
            caller_env,
            caller_cwd=caller_cwd,
            app_cookie=self.app_cookie,
            snapd=self.snapd,
            exec_via=self.exec_via,
        )
        argv = [*run.argv, *args]
        creates_xdg = environment_rules().behaves("xdg-runtime-dir-created", self.snapd)
        prepare = enter(
            self.ns_fd,
            run.cwd,
            self.filters.for_runnable(self.meta, runnable),
            xdg_runtime_dir=run.env["XDG_RUNTIME_DIR"] if creates_xdg else None,
        )
        started = time.perf_counter()
        proc = spawn(
            argv,
            prepare,
            env=run.env,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            out, err = proc.communicate(input_text, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            out, err = proc.communicate()
            raise HarnessError(
                f"{' '.join(argv)} did not finish within {timeout:g} s",
                details=(out + err)[-LOG_TAIL:],
            ) from exc
        return RunResult(argv, proc.returncode, out, err, seconds=time.perf_counter() - started)

    def run_hook(self, hook: str, *, timeout: float = 600.0) -> RunResult:
        """Run meta/hooks/<hook> as snapd does (``snap run --hook``: cwd /, snapd's own
        environment, a fresh context id), then let snapd do what the hook queued."""
        runnable = self.meta.hooks.get(hook)
        if runnable is None:
            raise HarnessError(f"{self.place.name} has no {hook} hook")
        cookie = secrets.token_urlsafe(33)
        self._control("hook-started", cookie=cookie, hook=hook)
        assert self.server is not None
        caller = caller_environment("hook", hook_cookie=cookie, snapd_pid=self.server.pid)
        caller.update(self.spec.extra_env)
        try:
            result = self._run(runnable, "hook", caller, "/", timeout=timeout)
        except BaseException:
            self._control("hook-finished", cookie=cookie, ok=False)
            raise
        done = self._control("hook-finished", cookie=cookie, ok=result.returncode == 0)
        result.after_hook = str(done or "")
        return result

    def run_app(
        self,
        app: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str = "/",
        input_text: str | None = None,
        timeout: float = 600.0,
    ) -> RunResult:
        """A user's ``snap run <snap>.<app> ARGS`` from a shell: ``env`` is that shell's
        environment (default: a plain login shell's), ``cwd`` its directory (a path that does
        not exist in the namespace gives snap-confine's void directory)."""
        runnable = self.meta.apps.get(app)
        if runnable is None:
            raise HarnessError(f"{self.place.name} has no app {app!r}")
        caller = dict(env) if env is not None else caller_environment("app", uid=self.place.uid)
        caller.update(self.spec.extra_env)
        return self._run(runnable, "app", caller, cwd, args, input_text, timeout)

    def snapctl(self, *args: str) -> RunResult:
        """What the operator's ``snap start/stop/get/set`` asks snapd (no hook; at once)."""
        code, out, err = self._control("operator", args=list(args))
        return RunResult(["snapctl", *args], int(code), str(out), str(err))

    def snap_set(self, *assignments: str) -> RunResult:
        """``snap set``: store the options, then run the configure hook; when the hook fails,
        the configuration is what it was before, as snapd does not commit it."""
        config = self.state_dir / CONFIG_FILE
        before = config.read_text() if config.exists() else None
        result = self.snapctl("set", *assignments)
        if result.returncode == 0 and "configure" in self.meta.hooks:
            result = self.run_hook("configure")
        if not result.ok:
            if before is None:
                config.unlink(missing_ok=True)
            else:
                write_atomically(config, before)
        return result

    def install(self) -> list[RunResult]:
        """``snap install``: the install hook, snapd's start of the services (install-mode
        ``enable``, not disabled by the hook), then the configure hook. Stops at a failed hook
        (snapd would undo the install)."""
        results: list[RunResult] = []
        if self._hook_if_any("install", results):
            self._control("start-snap-services", install=True)
            self._hook_if_any("configure", results)
        return results

    def _hook_if_any(self, hook: str, results: list[RunResult]) -> bool:
        """Run ``hook`` when the snap has it, adding its result; False when it failed."""
        if hook in self.meta.hooks:
            results.append(self.run_hook(hook))
            return results[-1].ok
        return True

    def refresh(
        self, snap_file: Path, *, components: Mapping[str, Path] | None = None
    ) -> list[RunResult]:
        """``snap refresh`` to the next revision: pre-refresh (old revision), services
        stopped, SNAP_DATA and ~/snap/<name>/<rev> copied forward, the new revision mounted
        and made current (installed components relinked, or remounted from ``components``),
        post-refresh, the enabled services started, configure. Stops at a failed hook."""
        if snap_name(snap_file) != self.place.name:
            raise HarnessError(f"{snap_file} is not a revision of {self.place.name}")
        results: list[RunResult] = []
        if not self._hook_if_any("pre-refresh", results):
            return results
        self._control("stop-all")
        old = self.place
        new = Placement(old.name, f"x{int(old.revision.lstrip('x') or 0) + 1}", old.uid)
        for base in (self.work / "var-snap" / old.name, self.work / "home/root/snap" / old.name):
            shutil.copytree(
                base / old.revision, base / new.revision, symlinks=True, dirs_exist_ok=True
            )
            relink(base / "current", new.revision)
        files = {k: str(Path(v).resolve()) for k, v in (components or {}).items()}
        opened = {name: os.open(path, os.O_RDONLY | os.O_CLOEXEC) for name, path in files.items()}
        image = os.open(snap_file, os.O_RDONLY | os.O_CLOEXEC)
        try:
            in_namespace(self.ns_fd, lambda: mount_revision(old, new, image, opened))
        finally:
            for fd in (image, *opened.values()):
                os.close(fd)
        self.place = new
        self.meta = read_meta(self.holder.pid, new)
        self._control("revision", revision=new.revision, components=files)
        if self._hook_if_any("post-refresh", results):
            self._control("start-snap-services", install=False)
            self._hook_if_any("configure", results)
        return results

    # -- looking at it -------------------------------------------------------------------
    def services(self) -> dict[str, ServiceStatus]:
        """Every service that was ever started or enabled, by app name."""
        return {app: ServiceStatus(**s) for app, s in self._control("services").items()}

    def service_log(self, app: str) -> str:
        """Everything a service printed (systemd's journal for its unit)."""
        log = self.work / "logs" / f"{app}.log"
        return log.read_text(errors="replace") if log.exists() else ""

    def wait_for_port(
        self, port: int, *, service: str | None = None, host: str = "127.0.0.1", timeout: float = 60
    ) -> None:
        """Wait until something accepts connections on ``host:port`` (the namespace shares the
        host's network); with ``service``, fail at once when that service has failed or
        stopped, with the end of its log."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError), socket.create_connection((host, port), 0.5):
                return
            status = self.services().get(service) if service else None
            if service and (status is None or status.failed or not status.active):
                raise HarnessError(
                    f"the {service} service is not running, so nothing listens on {port}",
                    details=self.service_log(service)[-LOG_TAIL:],
                )
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"nothing listened on {host}:{port} within {timeout:g} s",
                    details=self.service_log(service)[-LOG_TAIL:] if service else None,
                )
            time.sleep(0.1)

    def connect(self, plug: str, connected: bool = True) -> None:
        """``snap connect`` (or, with ``connected=False``, ``snap disconnect``) a plug: what
        ``snapctl is-connected`` answers and what the socket policy grants from now on."""
        path = self.state_dir / CONNECTIONS_FILE
        self._write_connections({**json.loads(path.read_text()), plug: connected})

    def inside(self, path: str) -> Path:
        """A path of the namespace, as the host reaches it (read it; do not write the snap)."""
        return Path(f"/proc/{self.holder.pid}/root{path}")

    def installed_components(self) -> list[str]:
        return list(self._control("installed"))

    # -- the end -------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the services, the stand-in and the namespace (its loop devices go with it)."""
        if self.server is not None and self.server.poll() is None:
            self.server.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.server.wait(60)
        self.holder.kill()
        self.holder.wait()
        if self.ns_fd >= 0:
            os.close(self.ns_fd)
            self.ns_fd = -1

    def __enter__(self) -> SnapRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
