"""`snapbuild try`: a snap's life on this machine without snapd.

The trial renders the project with the builder, assembles what snapcraft would prime (the
project's code as launchers into this Python, the runtime installed here as a runtime component,
the weights as an artifact component), writes ``meta/snap.yaml`` from the rendered
snapcraft.yaml, then runs the *rendered* hook scripts with the variables snapd sets and a
file-backed ``snapctl`` first on PATH. The install hook starts the server the way snapd would:
the stand-in runs the ``apps:`` entry's command. Nothing here re-implements hook logic, so what
the trial shows is what an installed snap does.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import requests
import yaml

from hwprobe.profile import HostProfile
from runtimes.catalog import load_catalog
from snapbuild.decision import Decision
from snapbuild.manifest import Manifest
from snapcommon.errors import NoEngineError, SnapbuildError, UsageError
from snaps.snapctl_standin import HOOK_VAR

REVISION = "x1"
HEALTH_TIMEOUT_S = 180.0
PROMPT = "In one sentence, what is a snap package?"
# Python packages that make up each runtime family's component (what the snap's part stages).
RUNTIME_PACKAGES: dict[str, tuple[str, ...]] = {
    "llama.cpp": ("llama_cpp",),
    "openvino": ("openvino", "openvino_genai", "openvino_tokenizers"),
    "onnxruntime": ("onnxruntime",),
}
PASSTHROUGH_VARS = ("SNAPBUILD_HOST_ROOT", "SNAPBUILD_HOST_PROFILE", "SNAPBUILD_CACHE", "HOME")


class TrialError(SnapbuildError):
    """The trial could not assemble or run the snap."""


@dataclass(frozen=True)
class Trial:
    """The directories of one trial; ``env`` is what snapd would set for the snap."""

    work: Path
    name: str

    @property
    def project(self) -> Path:
        return self.work / "project"

    @property
    def prime(self) -> Path:
        return self.work / "prime"

    @property
    def staged(self) -> Path:
        return self.work / "staged-components"

    @property
    def bin(self) -> Path:
        return self.work / "bin"

    @property
    def state(self) -> Path:
        return self.work / "snapctl-state"

    @property
    def env(self) -> dict[str, str]:
        env = {
            "SNAP": str(self.prime),
            "SNAP_NAME": self.name,
            "SNAP_INSTANCE_NAME": self.name,
            "SNAP_REVISION": REVISION,
            "SNAP_DATA": str(self.work / "var" / REVISION),
            "SNAP_COMMON": str(self.work / "var" / "common"),
            "SNAP_COMPONENTS": str(self.work / "components" / REVISION),
            "SNAPCTL_STANDIN_STATE": str(self.state),
            "SNAPCTL_STANDIN_COMPONENTS": str(self.staged),
            "PATH": f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "PYTHONPATH": str(_source_root()),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "SNAP_LIBRARY_PATH": "",
        }
        env.update({k: os.environ[k] for k in PASSTHROUGH_VARS if os.environ.get(k)})
        return env

    def command(self, *args: str) -> list[str]:
        """How a user runs the snap's command in this trial (like /snap/bin/<name>)."""
        return [str(self.bin / self.name), *args]

    def run(self, *args: str, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run the snap's command and capture its output."""
        return subprocess.run(
            self.command(*args), capture_output=True, text=True, input=input_text, check=False
        )

    def snapctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the snapctl stand-in as a hook would."""
        return subprocess.run(
            [str(self.bin / "snapctl"), *args],
            capture_output=True,
            text=True,
            env=self.env,
            check=False,
        )

    def run_hook(self, hook: str, *, flush: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the rendered hook script from meta/hooks, as snapd does, then settle its queue.

        Inside the hook the stand-in queues component and service changes (snapd performs them
        after the hook); on exit 0 they are flushed (components, then services), otherwise
        discarded. A failed flush is reported as the hook step failing, with its error appended,
        as `snap install` fails when a queued task fails. ``flush=False`` leaves the queue as it
        is (a test of what happens while snapd is still working through it).
        """
        proc = subprocess.run(
            [str(self.prime / "meta" / "hooks" / hook)],
            capture_output=True,
            text=True,
            env={**self.env, HOOK_VAR: hook},
            cwd=self.env["SNAP_DATA"],
            check=False,
        )
        if not flush:
            return proc
        if proc.returncode != 0:
            self.snapctl("discard")
            return proc
        settled = self.snapctl("flush")
        return subprocess.CompletedProcess(
            proc.args, settled.returncode, proc.stdout, proc.stderr + settled.stderr
        )

    def log(self) -> str:
        """The server's log so far (the stand-in's journal)."""
        path = self.state / "logs" / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Stop the server and every process in its group."""
        if (self.state / "services.json").exists():
            self.snapctl("stop", f"{self.name}.server")


def _source_root() -> Path:
    """The directory holding this project's packages (snaps/, snapbuild/, runtimes/, hwprobe/)."""
    return Path(__file__).resolve().parent.parent


# assembling --------------------------------------------------------------------------------
def render(manifest_name: str, dest: Path, engines: list[str] | None) -> None:
    """Render the snapcraft project with the builder, exactly as `snapbuild make` does."""
    from snapbuild.builder import make

    make(manifest_name, dest, engines=engines or ())


def snap_yaml_from(snapcraft: dict[str, Any], arch: str) -> dict[str, Any]:
    """What snapcraft writes to meta/snap.yaml (the builder's translation, one architecture)."""
    from snapbuild.builder import snap_yaml

    return snap_yaml(snapcraft, arch)


def _launcher(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    path.chmod(0o755)


def _python_launcher(path: Path, module: str) -> None:
    """A launcher running this venv's Python on a module of this project."""
    root = shlex.quote(str(_source_root()))
    _launcher(
        path,
        f"PYTHONPATH={root}${{PYTHONPATH:+:$PYTHONPATH}} exec {shlex.quote(sys.executable)} "
        f'-m {module} "$@"',
    )


def assemble_prime(trial: Trial, arch: str) -> dict[str, Any]:
    """The prime tree: meta/snap.yaml, meta/hooks (the rendered scripts), bin/, snapbuild/.

    Returns the rendered snapcraft.yaml data.
    """
    snapcraft = yaml.safe_load((trial.project / "snap" / "snapcraft.yaml").read_text())
    meta = trial.prime / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    snap_yaml = snap_yaml_from(snapcraft, arch)
    (meta / "snap.yaml").write_text(yaml.safe_dump(snap_yaml, sort_keys=False))
    hooks_src = trial.project / "snap" / "hooks"
    if hooks_src.is_dir():
        shutil.copytree(hooks_src, meta / "hooks")
        for hook in (meta / "hooks").iterdir():
            hook.chmod(0o755)
    _python_launcher(trial.prime / "bin" / "inference-snap", "snaps")
    data_src = trial.project / "snapbuild-data"
    (trial.prime / "snapbuild").mkdir(exist_ok=True)
    for item in data_src.iterdir() if data_src.is_dir() else ():
        shutil.copy2(item, trial.prime / "snapbuild" / item.name)
    _prime_doc(trial, snapcraft)
    return snapcraft


def _prime_doc(trial: Trial, snapcraft: dict[str, Any]) -> None:
    """The licence notice, where the project's doc part organizes it (usr/share/doc/<snap>/)."""
    from snapbuild.build.project import DOC_SOURCE_DIR

    part = (snapcraft.get("parts") or {}).get(DOC_SOURCE_DIR) or {}
    target = str((part.get("organize") or {}).get("*", "")).strip("/")
    source = trial.project / DOC_SOURCE_DIR
    if target and source.is_dir():
        shutil.copytree(source, trial.prime / target, dirs_exist_ok=True)


def stage_components(
    trial: Trial, manifest: Manifest, engines: list[str], snapcraft: dict[str, Any]
) -> list[str]:
    """Stage, where the stand-in installs from, every component of ``engines`` available here.

    Runtime components link the Python packages installed here; artifact components link the
    weights found in the cache or a local package. Returns what could not be staged.
    """
    from snapbuild.artifacts import locate

    declared = snapcraft
    catalog = load_catalog()
    unavailable: list[str] = []
    for name in engines:
        engine = manifest.engine(name)
        assert engine is not None
        runtime = catalog.get(engine.runtime)
        assert runtime is not None
        site: dict[str, Path] = {}
        for package in RUNTIME_PACKAGES[runtime.family]:
            spec = importlib.util.find_spec(package)
            if spec and spec.submodule_search_locations:
                site[package] = Path(next(iter(spec.submodule_search_locations)))
        native = _native_tree(runtime.family, runtime.component)
        if not site or native is False:
            unavailable.append(f"{runtime.component} (no {runtime.family} installed here)")
        else:
            comp = _component_dir(trial, runtime.component, declared)
            lib = comp / "lib" / "python3" / "site-packages"
            lib.mkdir(parents=True, exist_ok=True)
            for package, path in site.items():
                _link(lib / package, path)
            if isinstance(native, Path):  # the cmake part's files, where the component has them
                _link(comp / "usr", native / "usr")
        for artifact in manifest.engine_artifacts(engine):  # the weights and any projector
            found = locate(manifest, artifact)
            if found is None:
                unavailable.append(f"{artifact.name} (not in the cache: `snapbuild fetch`)")
                continue
            stage_artifact(trial, manifest, artifact.name, found, declared)
    return unavailable


def _native_tree(family: str, component: str) -> Path | bool:
    """The built tree of a runtime's cmake part (llama.cpp), True when it has none, False when
    it needs one that this machine has not built (``make install`` builds the CPU one).

    A GPU build (CUDA, ROCm, Vulkan) cannot be made here; a trial of a replayed GPU machine
    stages the CPU build in its place, and the runtime then says it runs on the CPU.
    """
    if family != "llama.cpp":
        return True
    from runtimes.native import ComponentTree, component_root

    root = component_root(component) or component_root()
    if root is None or ComponentTree(root).problems():
        return False
    return root


def stage_artifact(
    trial: Trial, manifest: Manifest, artifact: str, found: Path, snapcraft: dict[str, Any]
) -> None:
    """Stage an artifact exactly as the builder's ``components.yaml`` lays it out.

    A file stored whole is linked into its component (GGUF splits land in several); a file the
    builder stores in pieces is cut into ``<file>.part-NN`` at the manifest's shard sizes, each
    in its own component, so the daemon joins and verifies them as on a real install.
    """
    from snaps.artifacts import layout
    from snaps.env import SnapEnv

    lay = layout(SnapEnv.from_environ(trial.env), manifest, artifact)
    for file in lay.files:
        source = found if found.is_file() else found / file.path
        if not file.joined:
            assert file.component is not None
            _link(_component_dir(trial, file.component, snapcraft) / file.path, source)
            continue
        declared = next(f for f in manifest.artifact(artifact).files if f.path == file.path)
        sizes = [s.size for s in declared.shards]
        if len(sizes) != len(file.pieces) or sum(sizes) != source.stat().st_size:
            raise TrialError(
                f"cannot cut {source} into the pieces the snap stores",
                details=f"{len(file.pieces)} pieces in components.yaml, {len(sizes)} shards of "
                f"{sum(sizes)} bytes in the manifest, the file has {source.stat().st_size}",
                resolution="Fix the manifest's shards (or re-fetch the file), then try again.",
            )
        with source.open("rb") as src:
            for piece, size in zip(file.pieces, sizes, strict=True):
                dest = _component_dir(trial, piece.component, snapcraft) / piece.path
                _copy_bytes(src, dest, size)


def _copy_bytes(src: BinaryIO, dest: Path, size: int) -> None:
    """The next ``size`` bytes of ``src`` into ``dest`` (a piece of a split file)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    left = size
    with dest.open("wb") as out:
        while left > 0:
            chunk = src.read(min(left, 8 * 1024 * 1024))
            if not chunk:
                raise TrialError(f"{src.name} ended {left} bytes short of the piece {dest.name}")
            out.write(chunk)
            left -= len(chunk)


def _component_dir(trial: Trial, name: str, snapcraft: dict[str, Any]) -> Path:
    """A staged component with its meta/component.yaml, as snapcraft would pack it."""
    from snapbuild.builder import component_yaml

    comp = trial.staged / name
    meta = comp / "meta" / "component.yaml"
    if not meta.exists():
        meta.parent.mkdir(parents=True, exist_ok=True)
        if name in (snapcraft.get("components") or {}):
            meta.write_text(yaml.safe_dump(component_yaml(snapcraft, name), sort_keys=False))
    return comp


def _link(target: Path, source: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        target.symlink_to(source.resolve())


def write_commands(trial: Trial) -> None:
    """bin/snapctl (the stand-in), bin/<name> (like /snap/bin/<name>) and env.sh."""
    _python_launcher(trial.bin / "snapctl", "snaps.snapctl_standin")
    exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in trial.env.items())
    (trial.work / "env.sh").write_text(exports + "\n")
    _launcher(trial.bin / trial.name, f'{exports}\nexec "$SNAP/bin/inference-snap" "$@"')
    for var in ("SNAP_DATA", "SNAP_COMMON"):
        Path(trial.env[var]).mkdir(parents=True, exist_ok=True)


# checking ------------------------------------------------------------------------------------
def check_skeleton(prime: Path) -> str:
    """Validate the prime tree with Debian's `snap pack --check-skeleton`, when installed."""
    snap = shutil.which("snap")
    if snap is None:
        return "skipped: `snap` is not installed (apt-get install snapd gives `snap pack`)"
    proc = subprocess.run(
        [snap, "pack", "--check-skeleton", str(prime)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise TrialError(
            "`snap pack --check-skeleton` rejects the prime tree",
            details=(proc.stderr or proc.stdout).strip(),
            resolution="The rendered snapcraft.yaml produces invalid snap metadata; fix the "
            "builder's output.",
        )
    return "passed"


def wait_healthy(
    trial: Trial,
    url: str,
    timeout: float = HEALTH_TIMEOUT_S,
    echo: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Poll /health until 200; fail early, with the log, if the service dies. ``echo`` hears
    what the daemon is doing (waiting for components, preparing, loading) as it changes, and
    the elapsed time every few seconds, so a slow load is not a silent wait."""
    start = time.monotonic()
    deadline = start + timeout
    said = ("", 0.0)
    while time.monotonic() < deadline:
        if echo is not None:
            said = _progress(trial, echo, said, time.monotonic() - start)
        with contextlib.suppress(requests.RequestException):
            resp = requests.get(url, timeout=2)
            if resp.status_code == 200:
                body: dict[str, Any] = resp.json()
                return body
        if "inactive" in trial.snapctl("services").stdout:
            raise TrialError(
                "the server stopped before it was healthy",
                details=_tail(trial.log()),
                resolution="Read the log above; `status` in the trial environment says more.",
            )
        time.sleep(0.3)
    raise TrialError(
        f"the server did not become healthy within {timeout:.0f}s at {url}",
        details=_tail(trial.log()),
    )


PROGRESS_EVERY_S = 5.0


def _progress(
    trial: Trial, echo: Callable[[str], None], said: tuple[str, float], elapsed: float
) -> tuple[str, float]:
    """Echo the daemon's phase when it changes (or every few seconds); returns what was said."""
    path = Path(trial.env["SNAP_DATA"]) / "daemon.json"
    try:
        note = json.loads(path.read_text(encoding="utf-8"))
        text = f"{note['phase']}: {note['message']}"
    except (OSError, ValueError, KeyError, TypeError):
        text = "starting the server"
    if text != said[0] or elapsed - said[1] >= PROGRESS_EVERY_S:
        echo(f"  [{elapsed:4.1f}s] {text}")
        return text, elapsed
    return said


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.splitlines()[-lines:])


# the whole trial ---------------------------------------------------------------------------
@dataclass
class TrialResult:
    trial: Trial
    decision: Decision
    endpoint: str | None
    answer: str | None
    skeleton: str
    notes: list[str]


def host_profile() -> HostProfile:
    """The machine (or the recorded one named by SNAPBUILD_HOST_ROOT/SNAPBUILD_HOST_PROFILE)."""
    from snaps.manager import _probe

    return _probe()


def prepare(
    model: str,
    *,
    engine: str | None = None,
    port: int | None = None,
    work_dir: Path | None = None,
    echo: Callable[[str], None] = print,
    connections: dict[str, bool] | None = None,
) -> tuple[Trial, Decision, str]:
    """Render, select, assemble, stage and install (run the install and configure hooks)."""
    from snapbuild.manifest_checks import require_sound
    from snapbuild.manifest_loader import load_manifest
    from snapbuild.selector import select

    manifest = load_manifest(model)
    require_sound(manifest, model, echo)
    host = host_profile()
    decision = select(manifest, host, engine=engine)
    if engine and (decision.selected is None or decision.selected.engine != engine):
        cand = decision.candidate(engine)
        raise NoEngineError(
            f"engine {engine!r} cannot run on this machine",
            details="; ".join(cand.blockers) if cand else f"{model} has no engine {engine!r}",
            resolution=f"Leave out --engine to let the selector choose (`snapbuild try {model}`).",
        )
    # the snap's name, never the argument: MODEL may be a path (/abs/model.yaml, ./m.yaml)
    work = (
        Path(work_dir)
        if work_dir
        else Path(tempfile.mkdtemp(prefix=f"snapbuild-try-{manifest.name}-"))
    )
    if work.exists() and any(work.iterdir()):
        raise UsageError(
            f"the work directory {work} is not empty",
            resolution="Give an empty or new directory with --work-dir.",
        )
    trial = Trial(work=work, name=manifest.name)
    echo(f"Rendering the snapcraft project into {trial.project}")
    render(model, trial.project, None)
    snapcraft = assemble_prime(trial, host.architecture or "amd64")
    skeleton = check_skeleton(trial.prime)
    echo(f"snap pack --check-skeleton: {skeleton}")
    write_commands(trial)
    usable = [c.engine for c in decision.candidates if c.compatible]
    missing = stage_components(trial, manifest, usable, snapcraft)
    if decision.selected and any(
        m.split(" ")[0] in _components(manifest, decision.selected.engine) for m in missing
    ):
        raise TrialError(
            f"cannot stage engine {decision.selected.engine}'s components",
            details="\n".join(missing),
            resolution=f"Install the runtime here, or `snapbuild fetch {model}` the weights.",
        )
    preset: dict[str, Any] = {}
    if port is not None:
        preset["port"] = port
    if engine is not None:
        preset["engine"] = engine
    if connections:  # e.g. {"hardware-observe": False}: a plug the operator has not connected
        trial.state.mkdir(parents=True, exist_ok=True)
        (trial.state / "connections.json").write_text(json.dumps(connections))
    if preset:
        trial.snapctl("set", *(f"{k}={json.dumps(v)}" for k, v in preset.items()))
    for hook in ("install", "configure"):
        echo(f"Running the {hook} hook ($SNAP/meta/hooks/{hook})")
        proc = trial.run_hook(hook)
        for line in proc.stderr.splitlines():
            echo(f"  {hook}: {line}")
        if proc.returncode != 0:
            raise TrialError(f"the {hook} hook failed (exit {proc.returncode})")
    return trial, decision, skeleton


def _components(manifest: Manifest, engine: str) -> list[str]:
    from snaps.manager import components_for

    return components_for(manifest, engine)


def run_trial(
    model: str,
    *,
    engine: str | None = None,
    port: int | None = None,
    work_dir: Path | None = None,
    keep_running: bool = False,
    echo: Callable[[str], None] = print,
    prompt: str = PROMPT,
    max_tokens: int = 64,
) -> TrialResult:
    """The whole trial; stops the server at the end unless ``keep_running``."""
    trial, decision, skeleton = prepare(
        model, engine=engine, port=port, work_dir=work_dir, echo=echo
    )
    with _stopping(trial):
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
        from snaps.chat import ask_once

        answer = ask_once(endpoint, status["model"], prompt, max_tokens=max_tokens)
        result = TrialResult(trial, decision, endpoint, answer, skeleton, [])
        echo(summary(result, prompt))
        if keep_running:
            echo("The server keeps running; press Ctrl-C to stop it.")
            try:
                _wait_forever()
            except KeyboardInterrupt:
                echo("Stopping the server.")
    return result


def summary(result: TrialResult, prompt: str) -> str:
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
def _stopping(trial: Trial) -> Iterator[None]:
    """Stop the service on the way out (always on errors and Ctrl-C)."""
    try:
        yield
    finally:
        trial.stop()


def _wait_forever() -> None:
    """Sleep until Ctrl-C or SIGTERM (both end as KeyboardInterrupt, so the server stops)."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        while True:
            time.sleep(3600)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
