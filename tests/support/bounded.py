"""Run a command the way a hostile input must be run: in its own session, with a memory cap
(RLIMIT_AS) and a deadline, and say what it cost (its peak RSS and wall time).

A test that feeds an attacker's file to our code must not be able to take the machine with it
when the code regresses: the cap makes an unbounded allocation fail fast inside the child, the
deadline kills a loop, and the figures let the test assert the bound it promises.

The peak RSS is measured by a small wrapper that forks the command and reads ``wait4``: Linux
carries a process's high-water RSS across ``exec``, so a command spawned straight from the
(large) test process would report the test's own peak.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20
MEMORY_CAP = 1024 * MIB  # address space of the child: a regression fails fast, not the machine
TIMEOUT_S = 60.0
ROOT = Path(__file__).resolve().parent.parent.parent
SNAPBUILD = [sys.executable, "-c", "from snapbuild.cli import main; main()"]

# argv: memory cap, file size cap (0: none), report file, command...; forks, caps the child,
# reports its wait4 figures. A file size cap makes writes past it fail with EFBIG (SIGXFSZ is
# ignored): how a test fills "the disk" without filling a disk.
WRAPPER = """
import json, os, resource, signal, sys
memory, fsize, report, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
pid = os.fork()
if pid == 0:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if fsize:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    os.execvp(argv[0], argv)
_, status, usage = os.wait4(pid, 0)
with open(report, "w") as fh:
    json.dump({"status": status, "maxrss": usage.ru_maxrss * 1024}, fh)
sys.exit(os.waitstatus_to_exitcode(status) % 256)
"""


@dataclass(frozen=True)
class Bounded:
    """How a bounded run ended and what it cost."""

    returncode: int
    stdout: str
    stderr: str
    peak_rss: int  # bytes; 0 when the run was killed at its deadline
    seconds: float
    timed_out: bool

    def describe(self) -> str:
        return (
            f"exit {self.returncode}, {self.peak_rss / MIB:.0f} MiB peak RSS, "
            f"{self.seconds:.1f} s{' (timed out)' if self.timed_out else ''}"
        )


def run_bounded(
    argv: Sequence[str],
    *,
    memory: int = MEMORY_CAP,
    timeout: float = TIMEOUT_S,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    stdin: str = "",
    file_size: int = 0,
) -> Bounded:
    """Run ``argv`` capped at ``memory`` bytes of address space and ``timeout`` seconds (and,
    when given, ``file_size`` bytes per file written)."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", **(env or {})}
    with tempfile.TemporaryDirectory() as tmp:
        files = [Path(tmp) / name for name in ("stdin", "stdout", "stderr")]
        files[0].write_text(stdin)
        report = Path(tmp) / "report.json"
        command = [sys.executable, "-c", WRAPPER, str(memory), str(file_size), str(report), *argv]
        started = time.monotonic()
        pid = _spawn(command, files, environ, cwd)
        status, timed_out = _wait(pid, started + timeout)
        seconds = time.monotonic() - started
        figures = json.loads(report.read_text()) if report.exists() else {}
        return Bounded(
            os.waitstatus_to_exitcode(figures.get("status", status)),
            files[1].read_text(errors="replace"),
            files[2].read_text(errors="replace"),
            int(figures.get("maxrss", 0)),
            seconds,
            timed_out,
        )


def _spawn(command: list[str], files: list[Path], env: dict[str, str], cwd: Path | None) -> int:
    """``command`` in a new session with stdin/stdout/stderr from/to ``files``."""
    modes = (os.O_RDONLY, os.O_WRONLY | os.O_CREAT, os.O_WRONLY | os.O_CREAT)
    actions = [
        (os.POSIX_SPAWN_OPEN, n, str(f), mode, 0o600)
        for n, (f, mode) in enumerate(zip(files, modes, strict=True))
    ]
    if cwd is not None:  # posix_spawn has no working directory of its own: env(1) sets it
        command = ["env", "-C", str(cwd), *command]
    return os.posix_spawnp(command[0], command, env, file_actions=actions, setsid=True)


def _wait(pid: int, deadline: float) -> tuple[int, bool]:
    """Reap ``pid``; kill its whole session at ``deadline``."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status, False
        if time.monotonic() >= deadline:
            os.killpg(pid, signal.SIGKILL)
            return os.waitpid(pid, 0)[1], True
        time.sleep(0.02)


def snapbuild(*args: str, **kwargs: object) -> Bounded:
    """``snapbuild ARGS`` as a bounded child (this checkout's code)."""
    return run_bounded([*SNAPBUILD, *args], **kwargs)  # type: ignore[arg-type]


def python(code: str, *args: str, **kwargs: object) -> Bounded:
    """``python -c CODE ARGS`` as a bounded child."""
    return run_bounded([sys.executable, "-c", code, *args], **kwargs)  # type: ignore[arg-type]
