"""The one rule for the file names a manifest gives its artifacts, shared by every command.

An artifact file's ``path`` becomes a file name in the snap project (``local-artifacts/...``),
a key of snapcraft.yaml's ``organize``, a path in the component, and a word in hooks and shell
commands. A name YAML or a shell would read differently (``$(...)``, a newline, ``: ``, a
leading ``-``), one that names a directory (``.``, a trailing ``/``) or leaves it (``..``) is
refused by the manifest model, so ``validate``, ``make`` and ``try`` refuse it alike, and
``make`` joins names to its output directory through :func:`inside` only. ``snapbuild new``
renames such a file in the manifest (:func:`safe_file_name`) and keeps its real name in
``local.path``, which is only ever read by Python, never written into a file.
"""

from __future__ import annotations

import re
from pathlib import Path

SAFE_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,254}")
MAX_PATH = 1024
RULE = (
    "a relative path of names made of letters, digits, '.', '_', '+' and '-' (not starting "
    "with '.' or '-'), separated by '/'"
)
CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")  # YAML 1.1 also breaks lines at these


def file_path_problem(value: str) -> str | None:
    """Why ``value`` cannot be an artifact file's path, or None when it can."""
    parts = value.split("/")
    if not value or len(value) > MAX_PATH:
        return f"path must be {RULE}, at most {MAX_PATH} characters"
    bad = next((p for p in parts if not SAFE_PART.fullmatch(p)), None)
    if bad is None:
        return None
    if value.startswith("/"):
        why = "it is absolute"
    elif ".." in parts:
        why = "'..' leaves the artifact directory"
    elif bad in ("", "."):
        why = "it names a directory (an empty or '.' name, or a '/' at either end)"
    else:
        why = f"{one_line(bad)!r} is not such a name"
    return f"path must be {RULE}: {why}"


def check_file_path(value: str) -> str:
    """The pydantic validator of an artifact file's ``path``."""
    problem = file_path_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def check_local_path(value: str) -> str:
    """The validator of ``local.path``: any name the file system has, but a file's (no control
    characters, no trailing '/')."""
    if not value or CONTROL.search(value) or value.endswith("/"):
        raise ValueError(
            "local.path must name a file: no control characters (newline, NUL), no trailing '/'"
        )
    return value


def inside(root: Path, *relative: str) -> Path:
    """``root`` joined with paths that follow the rule: never ``root`` itself, never outside."""
    for part in relative:
        check_file_path(part)
    return root.joinpath(*relative)


def safe_file_name(name: str) -> str:
    """``name`` with every character the rule refuses turned into '-' (for ``new``)."""
    cleaned = re.sub(r"[^A-Za-z0-9._+-]+", "-", name).lstrip(".-") or "file"
    return cleaned[:255]


def one_line(text: str) -> str:
    """``text`` safe inside a YAML comment: line breaks and control characters escaped."""
    return CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
