"""llama.cpp's own server (``llama-server``) as a supervised child of the gateway.

Why a child process rather than the binding: llama-server batches every active request into one
decoding step (continuous batching over ``-np`` slots), which is where a memory-bound decoder
gains throughput under load, and it implements the OpenAI surface (grammars for
``response_format``, tool-call parsing with ``--jinja``, logprobs, ``n``) at the pinned commit.
The gateway stays the only public listener; the child listens on a Unix socket in a private
directory, so nothing else on the machine can reach it.

Three things live here: the binary and its libraries (:func:`locate`, through the one layout
rule of :mod:`runtimes.component_tree`), the command line for a serving configuration
(:func:`server_command`), and :class:`Supervisor`, which starts the child, waits for its
``/health``, warms it up, and restarts it with backoff when it dies.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from runtimes.component_tree import ROOT_VAR, ComponentTree, component_root
from runtimes.engine import RuntimeFailure
from runtimes.llamaserver.offload import DeviceChoice

log = logging.getLogger("snapbuild.runtimes.llamaserver")

BUILD_HINT = (
    "build llama.cpp at the pinned commit with `make install` (it builds the component tree with "
    f"usr/bin/llama-server and links it into the venv), or set {ROOT_VAR} to such a tree"
)
HEALTH_TIMEOUT_S = 300.0
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
STABLE_S = 60.0  # a child that ran this long resets the backoff
# restarts in a row (none lasting STABLE_S) before giving up: a child that keeps dying is
# reported (503 restart-limit) rather than restarted forever; the variable sets another limit
RESTART_LIMIT, RESTART_LIMIT_VAR = 5, "SNAPBUILD_RESTART_LIMIT"
LOG_LINES = 400


@dataclass(frozen=True)
class ServerBinary:
    """llama-server and what it needs to start: its library directories."""

    binary: Path
    lib_dirs: tuple[Path, ...]

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with the libraries first on
        LD_LIBRARY_PATH (libllama, libggml and the CPU backend modules)."""
        env = dict(os.environ if base is None else base)
        current = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
        env["LD_LIBRARY_PATH"] = ":".join([*(str(d) for d in self.lib_dirs), *current])
        return env


def locate(root: Path) -> ServerBinary:
    """llama-server in a llama.cpp component tree, by the one layout rule
    (:class:`runtimes.component_tree.ComponentTree`: ``usr/bin/llama-server`` beside the GGML
    backend
    modules, libraries in ``usr/lib`` and ``usr/lib/<triplet>``)."""
    tree = ComponentTree(root)
    missing = tree.problems()
    if missing:
        raise RuntimeFailure(
            f"llama-server cannot run from the llama.cpp component tree {root}",
            details="missing: " + "; ".join(missing),
            resolution=BUILD_HINT,
        )
    return ServerBinary(tree.server, tree.library_dirs)


def find_server(root: Path | None = None, binary: Path | None = None) -> ServerBinary:
    """llama-server from an explicit binary, a component root, ``$SNAPBUILD_LLAMA_ROOT`` or the
    tree a development install (``make install``) built."""
    if binary is not None:
        if not binary.is_file():
            raise RuntimeFailure(f"llama-server {binary} does not exist", resolution=BUILD_HINT)
        return ServerBinary(binary, ComponentTree(binary.parent.parent.parent).library_dirs)
    root = root or component_root()
    if root is None:
        raise RuntimeFailure(
            "llama.cpp engines serve through llama-server, and none is built here",
            details=f"no component tree: not given, ${ROOT_VAR} unset, none built by make install",
            resolution=BUILD_HINT,
        )
    return locate(root)


@dataclass(frozen=True)
class ServingConfig:
    """How llama-server serves: slots, context per slot, KV-cache type, flash attention."""

    slots: int = 1
    context_per_slot: int = 4096
    kv_cache_type: str = "f16"
    flash_attention: bool = False
    cache_reuse: int = 256  # min chunk reused from another prompt's cache via KV shifting; 0 off
    threads: int | None = None
    gpu_layers: int | None = None  # None: none on CPU engines, all on GPU engines
    batch_size: int | None = None  # logical and physical batch (embeddings need the whole input)
    offload: DeviceChoice | None = None  # GPU engines: the one device to compute on
    prompt_cache_mib: int = 0  # --cache-ram: what the plan gave the prompt cache; 0 turns it off

    def for_embeddings(self) -> ServingConfig:
        """The embedding child's: one slot, f16 cache, no reuse, and the whole context in one
        batch, since an embedding is pooled over all of its input."""
        ctx = self.context_per_slot
        return replace(self, slots=1, kv_cache_type="f16", cache_reuse=0, batch_size=ctx)


def from_plan(plan: Any, threads: int | None = None) -> ServingConfig:
    """A :class:`ServingConfig` from the selector's ``Serving`` record (the Decision)."""
    return ServingConfig(
        slots=int(plan.slots),
        context_per_slot=int(plan.context_per_slot),
        kv_cache_type=str(plan.kv_cache_type),
        flash_attention=bool(plan.flash_attention),
        cache_reuse=int(plan.cache_reuse),
        threads=threads,
        prompt_cache_mib=int(getattr(plan, "prompt_cache", 0)) >> 20,
    )


def server_command(
    server: ServerBinary,
    model: Path,
    config: ServingConfig,
    address: str,
    *,
    device: str = "cpu",
    embeddings: bool = False,
    alias: str | None = None,
) -> list[str]:
    """The command line: ``address`` is a ``*.sock`` path (Unix socket) or ``host:port``."""
    host, _, port = address.rpartition(":") if not address.endswith(".sock") else (address, "", "")
    args = [
        str(server.binary),
        "--model",
        str(model),
        "--host",
        host,
        *(["--port", port] if port else []),
        "--ctx-size",
        str(config.slots * config.context_per_slot),
        "--parallel",
        str(config.slots),
        "--no-kv-unified",  # each slot owns context_per_slot cells: what the selector planned
        "--cache-type-k",
        config.kv_cache_type,
        "--cache-type-v",
        config.kv_cache_type,
        "--flash-attn",
        "on" if config.flash_attention else "off",
        "--fit",
        "off",  # the selector sized the configuration; llama.cpp must not change it
        "--no-webui",
        "--metrics",
        "--slots",
        "--jinja",
        "--no-warmup",  # the supervisor warms up through the API, which tests more
        "--cache-ram",  # the planned size, never llama-server's 8 GiB default the plan never saw
        str(0 if embeddings else config.prompt_cache_mib),
    ]
    if device == "gpu" or config.gpu_layers is not None:
        args += ["--gpu-layers", str(_gpu_layers(config, device))]
    if config.offload is not None:  # that device or a failed start, never the CPU by accident;
        # verbosity 4: llama.cpp's load lines (device, layers, buffers: offload.read_report)
        args += ["--device", config.offload.device, "--log-verbosity", "4"]
    if config.threads:
        args += ["--threads", str(config.threads), "--threads-batch", str(config.threads)]
    if config.batch_size:
        args += ["--batch-size", str(config.batch_size), "--ubatch-size", str(config.batch_size)]
    if embeddings:
        args += ["--embeddings", "--pooling", "mean"]
    elif config.cache_reuse:
        args += ["--cache-reuse", str(config.cache_reuse)]
    if alias:
        args += ["--alias", alias]
    return args


def _gpu_layers(config: ServingConfig, device: str) -> int:
    if config.gpu_layers is not None:
        return config.gpu_layers
    return 999 if device == "gpu" else 0


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the gateway dies, however it dies (Linux prctl
    PR_SET_PDEATHSIG), so no llama-server outlives its supervisor."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class ChildState:
    """What happened to the child, for /health and ``<snap> status``."""

    status: str = "starting"  # starting, ok, restarting, error, stopped
    detail: str | None = None
    restarts: int = 0
    last_exit: str | None = None
    started_at: float | None = None
    log: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=LOG_LINES))

    def to_data(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "status": self.status,
            "detail": self.detail,
            "restarts": self.restarts,
            "last-exit": self.last_exit,
        }


WarmUp = Callable[[httpx.AsyncClient], Awaitable[None]]


class Supervisor:
    """Run one llama-server child: start, wait for health, warm up, restart with backoff.

    ``ready`` is set only while the child answers and its warm-up succeeded; requests in
    between get a 503 from the gateway that says what happened (``state.detail``).
    """

    def __init__(
        self,
        command: Callable[[str], list[str]],
        env: dict[str, str],
        *,
        warm_up: WarmUp | None = None,
        name: str = "llama-server",
        health_timeout: float = HEALTH_TIMEOUT_S,
        backoff: Sequence[float] = BACKOFF_S,
        cwd: Path | None = None,
    ) -> None:
        self._command = command
        self._env = env
        self._cwd = cwd  # ggml loads backend modules from the binary's folder and from here
        self._warm_up = warm_up
        self.name = name
        self.health_timeout = health_timeout
        self.backoff = tuple(backoff)
        limit = os.environ.get(RESTART_LIMIT_VAR, "").strip()  # a whole number, or the default
        self.restart_limit = int(limit) if limit.isdigit() else RESTART_LIMIT
        self.state = ChildState()
        self.ready = asyncio.Event()
        self.first_attempt = asyncio.Event()  # set once the first start succeeded or failed
        self._dir = Path(tempfile.mkdtemp(prefix="snapbuild-llama-"))
        os.chmod(self._dir, 0o700)
        self.socket = str(self._dir / "server.sock")
        self.client = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=self.socket),
            base_url="http://llama-server",
            timeout=httpx.Timeout(None, connect=10.0),
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=64),
        )
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        return self._proc.pid if self._proc and self._proc.returncode is None else None

    def start(self) -> None:
        """Begin supervising (returns at once; ``ready`` tells when requests may go through)."""
        self._task = asyncio.create_task(self._supervise())

    async def stop(self) -> None:
        """Stop the child and supervision."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self._terminate()
        await self.client.aclose()
        self.state.status = "stopped"
        shutil.rmtree(self._dir, ignore_errors=True)

    async def _terminate(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()

    async def _supervise(self) -> None:
        failures = 0
        ever_ready = False
        while not self._stopping:
            began = time.monotonic()
            ok = await self._run_once()
            if self._stopping:
                return
            ever_ready = ever_ready or ok
            if not ever_ready:  # never served: a bad model or flag, which restarting won't fix
                self.state.status = "error"
                self.state.detail = f"{self.name} {self.state.last_exit}"
                self.first_attempt.set()
                return
            if ok and time.monotonic() - began >= STABLE_S:
                failures = 0
            if failures >= self.restart_limit:
                self.state.status = "error"
                self.state.detail = (
                    f"{self.name} {self.state.last_exit}; restart limit reached: it exited "
                    f"{failures + 1} times in a row, so it is not restarted again"
                )
                log.error("%s", self.state.detail)
                return
            delay = self.backoff[min(failures, len(self.backoff) - 1)]
            failures += 1
            self.state.restarts += 1
            self.state.status = "restarting"
            self.state.detail = f"{self.name} {self.state.last_exit}; restarting in {delay:g}s"
            log.error("%s", self.state.detail)
            await asyncio.sleep(delay)

    async def _run_once(self) -> bool:
        """Start the child, make it ready, wait for it to exit; whether it ever became ready."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)
        self.ready.clear()
        self.state.status = "starting" if self.state.restarts == 0 else "restarting"
        command = self._command(self.socket)
        log.info("starting %s", " ".join(command))
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *command,
                env=self._env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                preexec_fn=_die_with_parent,
                cwd=self._cwd,
            )
        except OSError as exc:
            self.state.last_exit = f"could not start: {exc}"
            return False
        proc = self._proc
        self.state.started_at = time.monotonic()
        reader = asyncio.create_task(self._read_log(proc))
        exited = asyncio.create_task(proc.wait())
        became_ready = False
        try:
            became_ready = await self._become_ready(exited)
            if became_ready:
                self.state.status, self.state.detail = "ok", None
                self.ready.set()
                self.first_attempt.set()
            await exited
        finally:
            self.ready.clear()
            if not exited.done():
                await self._terminate()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(reader, 5)
        code = proc.returncode
        tail = " | ".join(list(self.state.log)[-3:])
        self.state.last_exit = f"exited with status {code}" + (f" ({tail})" if tail else "")
        return became_ready

    async def _become_ready(self, exited: asyncio.Task[int]) -> bool:
        deadline = time.monotonic() + self.health_timeout
        while time.monotonic() < deadline:
            if exited.done():
                return False
            try:
                response = await self.client.get("/health", timeout=5)
                if response.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.05)
        else:
            self.state.last_exit = f"not healthy within {self.health_timeout:g}s"
            await self._terminate()
            return False
        if self._warm_up is not None:
            try:
                await self._warm_up(self.client)
            except Exception as exc:
                self.state.detail = f"warm-up failed: {exc}"
                log.error("%s warm-up failed: %s", self.name, exc)
                await self._terminate()
                return False
        return True

    async def _read_log(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        while line := await proc.stderr.readline():
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                self.state.log.append(text)
                log.debug("%s: %s", self.name, text)
