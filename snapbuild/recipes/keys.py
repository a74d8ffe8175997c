"""What a cached native build depends on, and how a finished tree is recognised.

A tree built by :mod:`snapbuild.recipes.native` is cached under a key made of the recipe's build
inputs, the source archive's digest, the machine and the build machine's own inputs (a toolkit
stand-in, ``--define``); its stamp records the same facts, so a tree stored under an older key
of the same build (the commit pin lengthened, say) is found again instead of recompiled.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runtimes.catalog import NativeBuild
from snapbuild.recipes.toolkits import Toolkit

GENERATOR = "Unix Makefiles"  # snapcraft's cmake plugin default (cmake-generator unset)
STAMP = "snapbuild-native.json"


@dataclass(frozen=True)
class NativeSource:
    """An unpacked source tree and the digest of the archive it came from."""

    tree: Path
    digest: str


def built_from(recipe: NativeBuild) -> dict[str, object]:
    """The part of a recipe that decides what cmake builds (package lists do not: the machine
    provides them here, snapcraft stages them in a real build)."""
    fields = {"source", "source_commit", "cmake_parameters", "remove_after_install"}
    return recipe.model_dump(mode="json", include=fields)


def build_key(
    recipe: NativeBuild, source: NativeSource, machine: dict[str, object] | None = None
) -> str:
    """What a cached tree depends on: the recipe's build inputs, the source archive, the machine
    (and ``machine``: a toolkit stand-in's pins and extra definitions, when there are any)."""
    facts: dict[str, object] = {
        "recipe": built_from(recipe),
        "source": source.digest,
        "generator": GENERATOR,
        "machine": platform.machine(),
    }
    facts.update(machine or {})
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def machine_inputs(toolkit: Toolkit | None, defines: tuple[str, ...]) -> dict[str, object]:
    """The build machine's own inputs (empty for a plain build, so its key is unchanged)."""
    found: dict[str, object] = {}
    if toolkit is not None:
        found["toolkit"] = ", ".join(toolkit.pins)
    if defines:
        found["defines"] = list(defines)
    return found


def built_before(
    components: Path,
    component: str,
    recipe: NativeBuild,
    source: NativeSource,
    machine: Mapping[str, object] | None = None,
) -> Path | None:
    """A finished tree of the same build stored under another key: same source archive, same
    build inputs (and the same ``machine`` inputs: toolkit stand-in, definitions), the commit
    written abbreviated in its stamp (``0c1e57098``) where the recipe now gives it in full. One
    commit, one archive digest: the same tree, so lengthening a pin does not recompile llama.cpp
    (tens of minutes)."""
    wanted = built_from(recipe)
    rest = {k: v for k, v in wanted.items() if k != "source_commit"}
    for stamp in sorted(components.glob(f"{component}-*/{STAMP}")):
        try:
            record = json.loads(stamp.read_text(encoding="utf-8"))
            built = dict(record["recipe"])
            commit = str(built.pop("source_commit"))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        inputs = {k: v for k, v in record.items() if k not in ("runtime", "recipe", "source")}
        if (
            record.get("source") == source.digest
            and built == rest
            and inputs == dict(machine or {})
            and len(commit) >= 7
            and recipe.source_commit.startswith(commit)
        ):
            return stamp.parent
    return None
