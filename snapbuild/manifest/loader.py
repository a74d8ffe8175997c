"""Load manifests from YAML with errors that name file, line and field.

pydantic says *what* is wrong and *which* field; ruamel.yaml's round-trip tree knows *where*
that field is (:mod:`snapbuild.manifest.yaml_rt`). This module joins the two with the checks of
:mod:`snapbuild.manifest.problems` and turns every problem into one :class:`ManifestError`
listing them all, so a person fixes a manifest in one pass instead of one error per run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from snapbuild.fetch.local import resolve_local_paths
from snapbuild.manifest import yaml_rt
from snapbuild.manifest.ladder_problems import ladder_problems
from snapbuild.manifest.model import Manifest
from snapbuild.manifest.problems import (
    SCHEMA_HINT,
    catalog_problems,
    context_problems,
    fix_for,
    reference_problems,
    snake_case_keys,
)
from snapbuild.manifest.yaml_rt import Loc, field_name, line_of
from snapbuild.paths import manifests_dir
from snapcommon.errors import ManifestError

__all__ = [
    "Problem",
    "field_name",
    "load_manifest",
    "load_manifest_as",
    "manifest_schema",
    "manifest_to_data",
    "manifest_to_yaml",
    "parse_manifest",
    "resolve",
]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a manifest: where, what, and how to fix it."""

    file: str
    line: int
    field: str
    message: str
    fix: str

    def format(self) -> str:
        where = f"{self.file}:{self.line}"
        return f"{where}: {self.field or '(top level)'}: {self.message}\n  fix: {self.fix}"


# --------------------------------------------------------------------------- locating


def resolve(name_or_path: str) -> Path:
    """A bare name means ``manifests_dir()/<name>.yaml``; anything else is a path."""
    candidate = Path(name_or_path)
    looks_like_path = (
        "/" in name_or_path or candidate.suffix in {".yaml", ".yml"} or candidate.exists()
    )
    if looks_like_path:
        return candidate
    return manifests_dir() / f"{name_or_path}.yaml"


# --------------------------------------------------------------------------- YAML reading


MAX_MANIFEST_BYTES = 1 << 20  # hand-written files of a few KB; a chat template fits many times


def _read(path: Path, shown: str) -> yaml_rt.Document:
    try:
        if path.is_file() and path.stat().st_size > MAX_MANIFEST_BYTES:
            raise ManifestError(
                f"{shown} is {path.stat().st_size} bytes; a manifest may be at most "
                f"{MAX_MANIFEST_BYTES} bytes",
                resolution="give the manifest file, not a model or data file",
            )
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(
            f"no manifest at {shown}",
            details=f"looked for {path}",
            resolution="give a manifest name from manifests/ ("
            + ", ".join(sorted(p.stem for p in manifests_dir().glob("*.yaml")))
            + ") or a path to a manifest file",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(
            f"cannot read manifest {shown}",
            details=str(exc),
            resolution="check the file's permissions and that it is UTF-8 text",
        ) from None
    try:
        return yaml_rt.load(text)
    except yaml_rt.YamlLimitError as exc:
        raise ManifestError(
            f"{shown} is refused: {exc.problem}",
            details=f"at {shown}:{_line(exc)}",
            resolution="write the values out with fewer levels and fewer aliases (*name); a "
            "manifest needs neither",
        ) from None
    except yaml_rt.YAMLError as exc:
        line = _line(exc)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError(
            f"{shown} is not valid YAML",
            details=f"{shown}:{line}: YAML syntax error: {problem}",
            resolution="fix the YAML syntax at that line (indentation, quoting, colons)",
        ) from None


def _line(exc: Exception) -> int:
    mark = getattr(exc, "problem_mark", None)
    return int(mark.line) + 1 if mark is not None else 1


def parse_manifest(text: str, *, source: str = "<manifest>") -> Manifest:
    """Validate manifest YAML text (for tests and round-trips); errors name ``source``."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "manifest.yaml"
        path.write_text(text, encoding="utf-8")
        return _load(path, source)


def load_manifest(name_or_path: str | Path) -> Manifest:
    """Load and validate one manifest; raise :class:`ManifestError` listing every problem."""
    path = resolve(str(name_or_path))
    return _load(path, str(path))


def load_manifest_as(path: Path, shown: str) -> Manifest:
    """:func:`load_manifest` of ``path``, its problems named as ``shown``'s (a file about to
    become ``shown``: ``new`` checks what it wrote before it takes the final name)."""
    return _load(path, shown)


def _load(path: Path, shown: str) -> Manifest:
    document = _read(path, shown)
    root = document.tree
    data = yaml_rt.plain(root)
    if data is None:
        raise ManifestError(
            f"{shown} is empty",
            details=f"{shown}:1: (top level): the file holds no YAML document",
            resolution="write a manifest mapping (name, title, model, artifacts, engines...); "
            + SCHEMA_HINT,
        )
    if not isinstance(data, dict):
        raise ManifestError(
            f"{shown} is not a manifest",
            details=f"{shown}:1: (top level): expected a mapping of keys, "
            f"got a {type(data).__name__}",
            resolution="the top level must be `key: value` lines (name:, title:, engines:...)",
        )
    resolve_local_paths(data, path.resolve().parent)
    problems = [
        Problem(shown, line, field_name(loc), f"key {loc[-1]!r} appears twice", "keep one of them")
        for loc, line in document.duplicates
    ]
    located = reference_problems(data) + catalog_problems(data)
    manifest: Manifest | None = None
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc: Loc = tuple(err["loc"])
            if not loc and located:
                continue  # a cross-reference error the located checks already report
            message, fix = fix_for(dict(err))
            problems.append(Problem(shown, line_of(root, loc), field_name(loc), message, fix))
    problems = _drop_parent_noise(problems)
    located += snake_case_keys(root)
    if manifest is not None:
        located += context_problems(manifest) + ladder_problems(manifest)
    problems += [
        Problem(shown, line_of(root, loc), field_name(loc), msg, fix) for loc, msg, fix in located
    ]
    if problems or manifest is None:
        raise _error(shown, problems)
    return manifest


def _drop_parent_noise(problems: list[Problem]) -> list[Problem]:
    """pydantic also reports "at least 1 item" on a list whose only item failed: drop it."""
    fields = [p.field for p in problems]
    return [
        p
        for p in problems
        if not (
            "at least 1 item" in p.message
            and any(f != p.field and f.startswith(p.field + "[") for f in fields)
        )
    ]


def _error(shown: str, problems: list[Problem]) -> ManifestError:
    problems = sorted(set(problems), key=lambda p: (p.line, p.field, p.message))
    count = len(problems)
    err = ManifestError(
        f"{shown} is not a valid manifest ({count} problem{'s' if count != 1 else ''})",
        details="\n".join(p.format() for p in problems),
        resolution=problems[0].fix
        if count == 1
        else "fix each problem listed above; " + SCHEMA_HINT,
    )
    err.problems = tuple(problems)  # type: ignore[attr-defined]
    return err


# --------------------------------------------------------------------------- writing


def manifest_to_data(manifest: Manifest) -> dict[str, Any]:
    """Plain data with kebab-case keys, defaults left out (what a person would write)."""
    return manifest.model_dump(mode="json", by_alias=True, exclude_defaults=True)


def manifest_to_yaml(manifest: Manifest) -> str:
    """YAML that :func:`load_manifest` reads back to an equal manifest."""
    return yaml.safe_dump(
        manifest_to_data(manifest), sort_keys=False, allow_unicode=True, width=100
    )


def manifest_schema() -> dict[str, Any]:
    """The JSON Schema of a manifest (kebab-case keys), for editors and validators."""
    schema = Manifest.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "snapbuild model manifest"
    return schema
