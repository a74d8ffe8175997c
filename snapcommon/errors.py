"""The one error base of the project.

Every failure a user can cause or fix is raised as a :class:`SnapbuildError` carrying a short
``brief`` (what went wrong), optional ``details`` (where, with which values) and a
``resolution`` (how to fix it), plus the process exit code. The CLIs catch it in one place
(:func:`snapbuild.cli.run_cli` and :func:`hwprobe.cli.run`) and print it without a traceback,
in the spirit of craft-application's ``CraftError``. Anything else that escapes is a bug of ours:
:func:`report_unexpected` writes its traceback to a log file and prints where, so a user still
sees a message and an exit code rather than a stack dump (craft-application does the same).
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import IO, Any

# Exit codes shared by every command.
EXIT_OK = 0
EXIT_FAILURE = 1  # something broke that the user did not cause (I/O, a runtime crash)
EXIT_USAGE = 2  # bad arguments or bad input files (manifests, profiles, options)
EXIT_NO_ENGINE = 3  # the command worked but no engine fits (select, fleet plan)
EXIT_INTERNAL = 70  # a bug of ours (sysexits' EX_SOFTWARE); the traceback went to a log file


class SnapbuildError(Exception):
    """An error meant for a person: what happened, where, and how to fix it."""

    exit_code: int = EXIT_FAILURE

    def __init__(
        self,
        brief: str,
        *,
        details: str | None = None,
        resolution: str | None = None,
        exit_code: int | None = None,
    ) -> None:
        super().__init__(brief)
        self.brief = brief
        self.details = details
        self.resolution = resolution
        if exit_code is not None:
            self.exit_code = exit_code

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form, for commands run with ``--json``."""
        return {
            "error": self.brief,
            "details": self.details,
            "resolution": self.resolution,
            "exit-code": self.exit_code,
        }

    def format(self) -> str:
        """The text printed to stderr: brief, then details and resolution when present."""
        lines = [f"Error: {self.brief}"]
        if self.details:
            lines.extend(f"  {line}" for line in self.details.splitlines())
        if self.resolution:
            lines.append(f"Fix: {self.resolution}")
        return "\n".join(lines)

    def report(self, stream: IO[str] | None = None, *, as_json: bool = False) -> None:
        """Print this error once, as text or JSON."""
        out = stream if stream is not None else sys.stderr
        out.write((json.dumps(self.to_dict(), indent=2) if as_json else self.format()) + "\n")


class UsageError(SnapbuildError):
    """Bad arguments or bad input files (exit 2)."""

    exit_code = EXIT_USAGE


class ManifestError(UsageError):
    """A manifest that does not load or validate; ``details`` names file, line and field."""


class NoEngineError(SnapbuildError):
    """No engine of the manifest fits this host (exit 3)."""

    exit_code = EXIT_NO_ENGINE


# What an OSError means when it is the machine's state, the user's to change (a full disk, a
# read-only or forbidden place), and how to fix it: a message and exit 2, never a traceback.
USER_ERRNOS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("the disk is full", "free some space on that disk, or write elsewhere"),
    errno.EDQUOT: ("the disk quota is used up", "free some space, or write elsewhere"),
    errno.EFBIG: ("the file is too large for this file system", "write it elsewhere"),
    errno.EROFS: ("the file system is read-only", "give a writable location"),
    errno.EACCES: ("permission denied", "check the permissions, or give another location"),
    errno.EPERM: ("operation not permitted", "check the permissions, or give another location"),
}


def user_os_error(exc: OSError) -> UsageError | None:
    """The :class:`UsageError` for an OSError the user can fix (:data:`USER_ERRNOS`), naming the
    file; None for any other (a bug of ours)."""
    meaning = USER_ERRNOS.get(exc.errno or 0)
    if meaning is None:
        return None
    where = f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 else "")
    return UsageError(
        f"{where}: {meaning[0]}" if exc.filename else meaning[0],
        details=exc.strerror,
        resolution=meaning[1],
    )


def optional_module(name: str, purpose: str) -> ModuleType:
    """Import ``name``, a package of an optional extra; without it, a :class:`UsageError`
    saying that ``purpose`` (e.g. "reading GGUF files") needs it and how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise UsageError(
            f"{purpose} needs the {name} package", resolution=f"pip install {name}"
        ) from exc


def crash_log_dir(program: str) -> Path:
    """Where tracebacks of unexpected errors go: ``$XDG_STATE_HOME/<program>/log`` (by default
    ``~/.local/state``; inside a snap, HOME is the snap's own per-user folder)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / program / "log"


def report_unexpected(exc: BaseException, program: str, stream: IO[str] | None = None) -> int:
    """Print a short message for an exception no code path expected, keep its traceback in a
    log file (the temporary directory when the state directory is not writable), and return
    :data:`EXIT_INTERNAL`."""
    import tempfile  # only on this path: hwprobe's start-up time matters in hooks
    import time
    import traceback

    text = "".join(traceback.format_exception(exc))
    name = f"{program}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    written: Path | None = None
    for folder in (crash_log_dir(program), Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
        except OSError:
            continue
        written = folder / name
        break
    where = f"the traceback is in {written}" if written else "the traceback could not be saved"
    error = SnapbuildError(
        f"internal error: {type(exc).__name__}: {exc}",
        details=where,
        resolution=f"this is a bug in {program}; please report it with that file",
        exit_code=EXIT_INTERNAL,
    )
    error.report(stream)
    return EXIT_INTERNAL
