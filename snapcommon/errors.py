"""The one error base of the project.

Every failure a user can cause or fix is raised as a :class:`SnapbuildError` carrying a short
``brief`` (what went wrong), optional ``details`` (where, with which values) and a
``resolution`` (how to fix it), plus the process exit code. The CLIs catch it in one place
(:func:`snapbuild.cli.main` and :func:`hwprobe.cli.main`) and print it without a traceback,
in the spirit of craft-application's ``CraftError``.
"""

from __future__ import annotations

import importlib
import json
import sys
from types import ModuleType
from typing import IO, Any

# Exit codes shared by every command.
EXIT_OK = 0
EXIT_FAILURE = 1  # something broke that the user did not cause (I/O, a runtime crash)
EXIT_USAGE = 2  # bad arguments or bad input files (manifests, profiles, options)
EXIT_NO_ENGINE = 3  # the command worked but no engine fits (select, fleet plan)


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


def optional_module(name: str, purpose: str) -> ModuleType:
    """Import ``name``, a package of an optional extra; without it, a :class:`UsageError`
    saying that ``purpose`` (e.g. "reading GGUF files") needs it and how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise UsageError(
            f"{purpose} needs the {name} package", resolution=f"pip install {name}"
        ) from exc
