"""`snapbuild try`: a snap's life on this machine without snapd.

The trial renders the project with the builder, assembles what snapcraft would prime
(:mod:`.prime`: the project's code as launchers into this Python), stages the runtime installed
here and the weights as components (:mod:`.stage`), then runs the *rendered* hook scripts with
the variables snapd sets and a file-backed ``snapctl`` first on PATH (:mod:`.sandbox`). The
install hook starts the server the way snapd would: the stand-in runs the ``apps:`` entry's
command. Then it asks one question through the snap's own ``chat`` command. Nothing here
re-implements hook logic or imports the snap's code, so what the trial shows is what an installed
snap does.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwprobe.profile import HostProfile
from hwprobe.replay import probe_from_environ
from snapbuild.manifest.model import Manifest
from snapbuild.selection.decision import Decision
from snapbuild.trial.health import wait_healthy
from snapbuild.trial.prime import assemble_prime, check_skeleton, render, write_commands
from snapbuild.trial.sandbox import Trial, TrialError
from snapbuild.trial.stage import stage_components
from snapcommon.errors import NoEngineError, UsageError

PROMPT = "In one sentence, what is a snap package?"


@dataclass
class TrialResult:
    """What a finished trial reports: where the server answered, and what it said."""

    trial: Trial
    decision: Decision
    endpoint: str | None
    answer: str | None
    skeleton: str


def host_profile() -> HostProfile:
    """The machine (or the recorded one named by SNAPBUILD_HOST_ROOT/SNAPBUILD_HOST_PROFILE),
    by the same rule the snap's install hook follows."""
    return probe_from_environ()


def prepare(
    model: str,
    *,
    engine: str | None = None,
    option: str | None = None,
    port: int | None = None,
    work_dir: Path | None = None,
    echo: Callable[[str], None] = print,
    connections: dict[str, bool] | None = None,
) -> tuple[Trial, Decision, str]:
    """Render, select, assemble, stage and install (run the install and configure hooks);
    ``engine`` and a ladder's ``option`` are preset as the snap's settings."""
    from snapbuild.manifest.checks import require_sound
    from snapbuild.manifest.loader import load_manifest
    from snapbuild.selection.selector import select

    manifest = load_manifest(model)
    require_sound(manifest, model, echo)
    host = host_profile()
    decision = select(manifest, host, engine=engine, option=option)
    if (engine or option) and decision.selected is None:
        what = " ".join(f"{k} {v!r}" for k, v in (("engine", engine), ("option", option)) if v)
        cand = next((c for c in decision.candidates if c.option == option), None)
        if engine:
            cand = decision.candidate(engine, option)
        raise NoEngineError(
            f"{what} cannot run on this machine",
            details="; ".join(cand.blockers) if cand else f"{model} has no {what}",
            resolution=f"Leave out {' and '.join(f'--{k}' for k in what.split()[::2])} to let "
            f"the selector choose (`snapbuild try {model}`).",
        )
    # the snap's name, never the argument: MODEL may be a path (/abs/model.yaml, ./m.yaml)
    work = (
        Path(work_dir)
        if work_dir
        else Path(tempfile.mkdtemp(prefix=f"snapbuild-try-{manifest.name}-"))
    )
    if work_dir and work.exists() and any(work.iterdir()):
        raise UsageError(
            f"the work directory {work} is not empty",
            resolution="Give an empty or new directory with --work-dir.",
        )
    with discarded_on_failure(work, fresh=not (work_dir and work.exists())):
        return _install(
            model,
            manifest,
            decision,
            host,
            Trial(work=work, name=manifest.name),
            port=port,
            engine=engine,
            option=option,
            echo=echo,
            connections=connections,
        )


def _install(
    model: str,
    manifest: Manifest,
    decision: Decision,
    host: HostProfile,
    trial: Trial,
    *,
    port: int | None,
    engine: str | None,
    option: str | None,
    echo: Callable[[str], None],
    connections: dict[str, bool] | None,
) -> tuple[Trial, Decision, str]:
    echo(f"Rendering the snapcraft project into {trial.project}")
    render(model, trial.project, None)
    snapcraft = assemble_prime(trial, host.architecture or "amd64")
    skeleton = check_skeleton(trial.prime)
    echo(f"snap pack --check-skeleton: {skeleton}")
    write_commands(trial)
    # every engine of every size that runs here, as the Store offers every component: an
    # operator may force one the selector rejects (`use-engine E --force`), e.g. Vulkan on
    # lavapipe; a ladder's sizes that run nowhere here are left out
    runs = {c.option for c in decision.candidates if c.compatible} if decision.options else {None}
    usable = [(c.engine, c.option) for c in decision.candidates if c.option in runs]
    missing = stage_components(trial, manifest, usable, snapcraft)
    sel = decision.selected
    if sel is not None and any((m.engine, m.option) == (sel.engine, sel.option) for m in missing):
        raise TrialError(
            f"cannot stage engine {sel.engine}'s components",
            details="\n".join(str(m) for m in missing),
            resolution=f"Install the runtime here, or `snapbuild fetch {model}` the weights.",
        )
    _preset(trial, port=port, engine=engine, option=option, connections=connections)
    for hook in ("install", "configure"):
        echo(f"Running the {hook} hook ($SNAP/meta/hooks/{hook})")
        proc = trial.run_hook(hook)
        for line in proc.stderr.splitlines():
            echo(f"  {hook}: {line}")
        if proc.returncode != 0:
            raise TrialError(f"the {hook} hook failed (exit {proc.returncode})")
    return trial, decision, skeleton


def _preset(
    trial: Trial,
    *,
    port: int | None,
    engine: str | None,
    option: str | None = None,
    connections: dict[str, bool] | None,
) -> None:
    """What the operator set before installing: options (``snap set``) and plug connections."""
    preset: dict[str, Any] = {}
    if port is not None:
        preset["port"] = port
    if engine is not None:
        preset["engine"] = engine
    if option is not None:
        preset["model"] = option
    if connections:  # e.g. {"hardware-observe": False}: a plug the operator has not connected
        trial.state.mkdir(parents=True, exist_ok=True)
        (trial.state / "connections.json").write_text(json.dumps(connections))
    if preset:
        trial.snapctl("set", *(f"{k}={json.dumps(v)}" for k, v in preset.items()))


def ask(trial: Trial, prompt: str, max_tokens: int) -> str:
    """One question through the snap's own ``chat`` command, piped as a user would pipe it;
    greedy (temperature 0), so a trial of one build on one machine answers the same each time."""
    options = ("--max-tokens", str(max_tokens), "--temperature", "0")
    proc = trial.run("chat", *options, input_text=prompt + "\n")
    if proc.returncode != 0:
        raise TrialError(
            f"the snap's chat command failed (exit {proc.returncode})",
            details=proc.stderr.strip(),
            resolution="Read the service log; `status` in the trial environment says more.",
        )
    return proc.stdout.removesuffix("\n")


def run_trial(
    model: str,
    *,
    engine: str | None = None,
    option: str | None = None,
    port: int | None = None,
    work_dir: Path | None = None,
    keep_running: bool = False,
    echo: Callable[[str], None] = print,
    prompt: str = PROMPT,
    max_tokens: int = 64,
) -> TrialResult:
    """The whole trial; stops the server at the end unless ``keep_running``."""
    fresh = not work_dir or not Path(work_dir).exists()
    trial, decision, skeleton = prepare(
        model, engine=engine, option=option, port=port, work_dir=work_dir, echo=echo
    )
    with discarded_on_failure(trial.work, fresh=fresh), _stopping(trial):
        status = json.loads(trial.run("status", "--json").stdout)
        if status["engine"] is None:
            raise NoEngineError(
                f"no engine of {status['model']} fits this machine; the service stays disabled",
                details=trial.run("status").stdout.strip(),
            )
        endpoint = status["endpoint"]
        echo(f"Waiting for {endpoint.removesuffix('/v1')}/health ...")
        health = wait_healthy(trial, endpoint.removesuffix("/v1") + "/health", echo=echo)
        echo(f"Healthy: {json.dumps(health)}")
        answer = ask(trial, prompt, max_tokens)
        result = TrialResult(trial, decision, endpoint, answer, skeleton)
        echo(summary(result, prompt))
        if keep_running:
            echo("The server keeps running; press Ctrl-C to stop it.")
            try:
                wait_forever()
            except KeyboardInterrupt:
                echo("Stopping the server.")
    return result


def summary(result: TrialResult, prompt: str) -> str:
    """The closing message: the exchange, the endpoint, and the commands to try next."""
    trial = result.trial
    cmd = str(trial.bin / trial.name)
    return "\n".join(
        [
            "",
            f"You: {prompt}",
            f"{trial.name}: {(result.answer or '').strip()}",
            "",
            f"Endpoint: {result.endpoint} (OpenAI-compatible; model id {trial.name!r})",
            "In-snap commands to try (the launcher sets the simulated snap environment; or "
            f"`. {trial.work / 'env.sh'}` then `$SNAP/bin/inference-snap ...`):",
            f"  {cmd} status",
            *([f"  {cmd} models"] if result.decision.options else []),
            f"  {cmd} engines",
            f"  {cmd} why",
            f"  {cmd} set port=8400",
            f"  {cmd} chat",
            f"Service log: {trial.state / 'logs' / 'server.log'}",
            "The server stops when `snapbuild try` ends (--keep-running keeps it up); start it "
            f"again with `{trial.bin / 'snapctl'} start {trial.name}.server` (env from env.sh).",
        ]
    )


@contextlib.contextmanager
def discarded_on_failure(work: Path, *, fresh: bool) -> Iterator[None]:
    """A failed trial leaves nothing behind: its work directory (``fresh``: made for it) or
    what it wrote into the empty one it was given is removed; its errors carry the log. A trial
    that ran and found that no engine fits (exit 3) did not fail: its snap stays to inspect."""
    try:
        yield
    except NoEngineError:
        raise
    except BaseException:
        targets = [work] if fresh else list(work.iterdir()) if work.is_dir() else []
        for target in targets:
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _stopping(trial: Trial) -> Iterator[None]:
    """Stop the service on the way out (always on errors and Ctrl-C)."""
    try:
        yield
    finally:
        trial.stop()


def wait_forever() -> None:
    """Sleep until Ctrl-C or SIGTERM (both end as KeyboardInterrupt, so the server stops)."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        while True:
            time.sleep(3600)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
