"""`snapbuild try` on the snap users install: packed by `snapbuild pack` (craft-parts through
snapcraft's own services, `snap pack`) and run as snapd runs it (:mod:`snapbuild.trial.snapd`:
the `.snap` and `.comp` files mounted read-only, the checkout hidden, snapd's environment, the
network refused where no plug grants it, core24's Python).

This is the default where the machine allows it (root, mount namespaces, squashfs-tools,
snapd's `snap`, python3-apt, snapcraft and a Python 3.12); elsewhere, and for what only the
development trial can do (a recorded machine replayed through ``SNAPBUILD_HOST_ROOT``), `try`
falls back to :mod:`snapbuild.trial.run` and says so. The differences that remain between the
two are listed in docs/snaps.md.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapbuild.pack import Packed, pack
from snapbuild.pack.host import HostError, find_host
from snapbuild.trial.health import Watched, wait_healthy
from snapbuild.trial.run import PROMPT, wait_forever
from snapbuild.trial.snapd import HarnessError, RunResult, SnapRun, check_host, find_host_python
from snapcommon.errors import NoEngineError, UsageError

Echo = Callable[[str], None]
REPLAY_VARS = ("SNAPBUILD_HOST_ROOT", "SNAPBUILD_HOST_PROFILE")


@dataclass
class PackedResult:
    """What a finished run of the packed snap reports."""

    packed: Packed
    endpoint: str
    answer: str


def why_not_packed() -> str | None:
    """Why this machine cannot try the packed snap as snapd runs it (None: it can)."""
    replayed = [name for name in REPLAY_VARS if os.environ.get(name)]
    if replayed:
        return f"{replayed[0]} replays a recorded machine, which only the trial can do"
    problems = check_host(overlay=True)
    if problems:
        return "; ".join(problems)
    try:
        find_host_python()
        find_host()
    except (HarnessError, HostError) as exc:
        return str(getattr(exc, "brief", exc))
    return None


def run_packed(
    model: str,
    *,
    engine: str | None = None,
    option: str | None = None,
    port: int | None = None,
    work_dir: Path | None = None,
    keep_running: bool = False,
    echo: Echo = print,
    prompt: str = PROMPT,
    max_tokens: int = 64,
) -> PackedResult:
    """Pack MODEL's CPU variant, install it as snapd would, wait for its API, ask one question
    through the snap's own `chat` command; stop at the end unless ``keep_running``."""
    work = _work_dir(work_dir, model)
    echo(f"Packing the snap with craft-parts (snapbuild pack) into {work / 'out'}")
    packed = pack(model, work / "out", variant="cpu", progress=_steps(echo))
    echo(f"Installing {packed.snap.name} as snapd runs it (read-only at /snap/{packed.model}/x1)")
    with SnapRun(packed.snap, work / "run", components=dict(packed.components)) as run:
        _preset(run, engine=engine, option=option, port=port)
        _install(run, echo)
        status = json.loads(_app(run, packed.model, "status", "--json").stdout)
        if status["engine"] is None:
            raise NoEngineError(
                f"no engine of {packed.model} fits this machine",
                details=_app(run, packed.model, "status").stdout.strip(),
            )
        endpoint = str(status["endpoint"])
        health_url = endpoint.removesuffix("/v1") + "/health"
        echo(f"Waiting for {health_url} ...")
        health = wait_healthy(_watched(run, packed.model), health_url, echo=echo)
        echo(f"Healthy: {json.dumps(health)}")
        answer = _ask(run, packed.model, prompt, max_tokens)
        result = PackedResult(packed, endpoint, answer)
        echo(summary(result, prompt, run))
        if keep_running:
            echo("The server keeps running; press Ctrl-C to stop it.")
            try:
                wait_forever()
            except KeyboardInterrupt:
                echo("Stopping the server.")
    return result


def _steps(echo: Echo) -> Callable[[str], None]:
    """craft-parts' steps as they run; the ones it skips (nothing changed) are not news."""

    def say(line: str) -> None:
        if not line.rstrip().endswith("(skip)"):
            echo(f"  {line}")

    return say


def _watched(run: SnapRun, name: str) -> Watched:
    """The service as the harness's systemd stand-in sees it."""

    def stopped() -> bool:
        service = run.services().get("server")
        return service is not None and (service.failed or not service.active)

    note = run.inside(f"/var/snap/{name}/current/daemon.json")
    return Watched(stopped=stopped, log=lambda: run.service_log("server"), note=note)


def _work_dir(work_dir: Path | None, model: str) -> Path:
    stem = Path(model).stem if model.endswith((".yaml", ".yml")) else model
    work = work_dir or Path(tempfile.mkdtemp(prefix=f"snapbuild-try-{stem}-"))
    if work.exists() and any(work.iterdir()):
        raise UsageError(
            f"the work directory {work} is not empty",
            resolution="Give an empty or new directory with --work-dir.",
        )
    return work


def _preset(run: SnapRun, **settings: Any) -> None:
    """Settings the operator chose before the install (as gadget defaults would give them)."""
    chosen = {"engine": settings["engine"], "model": settings["option"], "port": settings["port"]}
    values = [f"{key}={json.dumps(value)}" for key, value in chosen.items() if value is not None]
    if values:
        done = run.snapctl("set", *values)
        if done.returncode != 0:
            raise UsageError(f"cannot preset {' '.join(values)}", details=done.stderr.strip())


def _install(run: SnapRun, echo: Echo) -> None:
    for result in run.install():
        hook = Path(result.argv[0]).name
        echo(f"Ran the {hook} hook ($SNAP/meta/hooks/{hook}) as snapd runs it")
        for line in result.stderr.splitlines():
            echo(f"  {hook}: {line}")
        if result.returncode != 0:
            raise HarnessError(f"the {hook} hook failed (exit {result.returncode})")


def _app(run: SnapRun, name: str, *args: str, input_text: str | None = None) -> RunResult:
    result = run.run_app(name, list(args), input_text=input_text)
    if result.returncode != 0:
        raise HarnessError(
            f"`{name} {' '.join(args)}` failed (exit {result.returncode})",
        ) from RuntimeError(result.stderr.strip())
    return result


def _ask(run: SnapRun, name: str, prompt: str, max_tokens: int) -> str:
    """One question through the snap's own `chat`, greedy, as a user would pipe it."""
    options = ("--max-tokens", str(max_tokens), "--temperature", "0")
    return _app(run, name, "chat", *options, input_text=prompt + "\n").stdout.removesuffix("\n")


def summary(result: PackedResult, prompt: str, run: SnapRun) -> str:
    """The closing message: the exchange, the endpoint, the files a user would install."""
    packed = result.packed
    files = [packed.snap, *packed.components.values()]
    return "\n".join(
        [
            "",
            f"You: {prompt}",
            f"{packed.model}: {result.answer.strip()}",
            "",
            f"Endpoint: {result.endpoint} (OpenAI-compatible; model id {packed.model!r})",
            "Packed (install on a machine with snapd: `snap install --dangerous` the .snap, then "
            "each .comp):",
            *(f"  {path}" for path in files),
            f"Service log: {run.work / 'logs' / 'server.log'}",
        ]
    )
