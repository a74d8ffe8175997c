"""Helpers for the builder's tests: golden cases and snapcraft's JSON Schema."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from snapbuild.manifest.loader import load_manifest
from snapbuild.manifest.model import Manifest

DATA = Path(__file__).resolve().parent.parent / "data"
CASES = DATA / "build"
SCHEMA = DATA / "snapcraft.schema.json"


def case_names() -> list[str]:
    """Every golden case directory."""
    return sorted(p.name for p in CASES.iterdir() if (p / "manifest.yaml").is_file())


def case_manifest(case: str) -> Manifest:
    """The case's manifest, loaded like any user's."""
    return load_manifest(str(CASES / case / "manifest.yaml"))


def case_options(case: str) -> dict[str, Any]:
    """Keyword arguments for ``make`` (``options.yaml``, optional)."""
    path = CASES / case / "options.yaml"
    return yaml.safe_load(path.read_text()) if path.is_file() else {}


def tree(root: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Every file under ``root`` by relative path (directories named in ``skip`` left out)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not any(rel == s or rel.startswith(s + "/") for s in skip):
            out[rel] = path.read_text(encoding="utf-8")
    return out


@cache
def core24_schema() -> dict[str, Any]:
    """snapcraft's schema, narrowed to the core24 project branch for readable errors."""
    schema: dict[str, Any] = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return {"$defs": schema["$defs"], "$ref": "#/$defs/Core24Project"}


@cache
def full_schema() -> dict[str, Any]:
    """snapcraft's whole schema, unchanged."""
    data: dict[str, Any] = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return data
