"""Where the project's data lives: manifests/, templates/ and the artifact cache.

The repository layout keeps ``manifests/`` and ``templates/`` beside the packages. Inside a snap
they sit under ``$SNAP/snapbuild`` (the builder copies them there). ``SNAPBUILD_HOME`` overrides
both, for tests and packagers with their own trees.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

import yaml


def project_root() -> Path:
    """The directory holding manifests/ and templates/."""
    override = os.environ.get("SNAPBUILD_HOME")
    if override:
        return Path(override)
    return Path(__file__).resolve().parent.parent


def manifests_dir() -> Path:
    """The shipped manifests."""
    return project_root() / "manifests"


def templates_dir() -> Path:
    """The jinja2 templates of rendered snapcraft projects."""
    return project_root() / "templates"


def cache_dir() -> Path:
    """Where fetched artifacts live: $SNAPBUILD_CACHE, else $XDG_CACHE_HOME/snapbuild."""
    override = os.environ.get("SNAPBUILD_CACHE")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "snapbuild"


def read_data(name: str, package: str = "snapbuild") -> Any:
    """A YAML file of ``<package>/data`` (``snapbuild/data`` by default) as plain data
    (validate it before use)."""
    text = resources.files(package).joinpath("data", name).read_text(encoding="utf-8")
    return yaml.safe_load(text)
