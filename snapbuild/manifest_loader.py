"""Load manifests from YAML with errors that name file, line and field.

pydantic says *what* is wrong and *which* field; YAML's node tree knows *where* that field is.
This module joins the two, adds the checks that need data outside the manifest (the runtime
catalog, the quantization table) and turns every problem into one :class:`ManifestError`
listing them all, so a person fixes a manifest in one pass instead of one error per run.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from runtimes.catalog import load_catalog
from snapbuild.local_artifacts import resolve_local_paths
from snapbuild.manifest import Manifest
from snapbuild.paths import manifests_dir
from snapcommon.errors import ManifestError

Loc = tuple[str | int, ...]

SCHEMA_HINT = "`snapbuild schema` prints the manifest's JSON Schema for editors"


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


def field_name(loc: Loc) -> str:
    """``("engines", 2, "runtime")`` -> ``engines[2].runtime``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _node_at(root: yaml.Node | None, loc: Loc) -> tuple[yaml.Node | None, Loc]:
    """The deepest YAML node along ``loc``, and the part of ``loc`` that was found."""
    node = root
    found: list[str | int] = []
    for part in loc:
        nxt = _child(node, part)
        if nxt is None:
            break
        node = nxt
        found.append(part)
    return node, tuple(found)


def _child(node: yaml.Node | None, part: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode) and isinstance(part, str):
        return next((v for k, v in node.value if getattr(k, "value", None) == part), None)
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int):
        return node.value[part] if 0 <= part < len(node.value) else None
    return None


def _key_line(node: yaml.Node | None, key: str) -> int | None:
    if isinstance(node, yaml.MappingNode):
        for k, _ in node.value:
            if getattr(k, "value", None) == key:
                return int(k.start_mark.line) + 1
    return None


def line_of(root: yaml.Node | None, loc: Loc) -> int:
    """The 1-based line of the field at ``loc`` (its key when it has one), else its parent's."""
    if root is None:
        return 1
    if loc and isinstance(loc[-1], str):
        parent, found = _node_at(root, loc[:-1])
        line = _key_line(parent, loc[-1]) if found == loc[:-1] else None
        if line is not None:
            return line
    node, _ = _node_at(root, loc)
    return int(node.start_mark.line) + 1 if node is not None else 1


# --------------------------------------------------------------------------- model walking


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The pydantic model class that holds the keys at ``loc`` (for "allowed keys" hints)."""
    model: type[BaseModel] = Manifest
    for part in loc:
        if isinstance(part, int):
            continue
        field = next(
            (f for n, f in model.model_fields.items() if (f.alias or n) == part or n == part),
            None,
        )
        if field is None:
            return None
        nested = _nested_model(field.annotation)
        if nested is None:
            return None
        model = nested
    return model


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def allowed_keys(loc: Loc) -> list[str]:
    """The keys a mapping at ``loc`` accepts, kebab-case, in model order."""
    model = _model_at(loc)
    if model is None:
        return []
    return [f.alias or n for n, f in model.model_fields.items()]


# --------------------------------------------------------------------------- pydantic errors


def _fix_for(err: dict[str, Any]) -> tuple[str, str]:
    """(message, fix) for one pydantic error, phrased for a manifest author."""
    loc: Loc = tuple(err["loc"])
    kind = err["type"]
    key = str(loc[-1]) if loc else ""
    if kind == "missing":
        return f"required key {key!r} is missing", f"add {key!r} here. {SCHEMA_HINT}"
    if kind == "extra_forbidden":
        keys = allowed_keys(loc[:-1])
        close = difflib.get_close_matches(key, keys, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return (
            f"unknown key {key!r}",
            f"{hint}remove it or use one of: {', '.join(keys)}",
        )
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        return (
            f"{err['input']!r} is not allowed; expected {expected}",
            f"use one of {expected}",
        )
    field = field_name(loc) or "the manifest"
    got = err.get("input")
    shown = "" if isinstance(got, dict | list) else f" (got {got!r})"
    noun = _TYPE_NOUNS.get(kind)
    if noun is not None:
        return f"expected {noun}{shown}", f"write {field} as {noun}"
    message = str(err["msg"]).removeprefix("Value error, ")
    ctx = err.get("ctx") or {}
    bound_fixes = {
        "greater_than": lambda: f"use a number greater than {ctx.get('gt')}",
        "greater_than_equal": lambda: f"use a number of at least {ctx.get('ge')}",
        "less_than_equal": lambda: f"use a number of at most {ctx.get('le')}",
        "string_too_long": lambda: f"shorten it to at most {ctx.get('max_length')} characters",
        "too_short": lambda: f"list at least {ctx.get('min_length')} item(s) under {field}",
    }
    if kind in bound_fixes:
        return message + shown, bound_fixes[kind]()
    if (
        isinstance(loc[-1] if loc else None, int)
        and len(loc) >= 2
        and loc[-2]
        in (
            "all-of",
            "any-of",
        )
    ):
        return message + shown, "split it into one condition per list item"
    if "files" in loc and "shards" in message:
        return message + shown, "split the file into pieces under 5 GB and list them as shards"
    return message + shown, _VALUE_FIXES.get(key, f"correct {field}. {SCHEMA_HINT}")


_VALUE_FIXES: dict[str, str] = {
    "name": "use 2-40 lowercase letters, digits and single hyphens, e.g. 'gemma3' or 'cpu-avx2'",
    "sha256": "paste the file's 64-character lowercase hex digest (`sha256sum FILE`)",
    "path": "use a file name relative to the artifact's directory, e.g. 'model.gguf'",
    "url": "use an https:// URL",
}


_TYPE_NOUNS: dict[str, str] = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "string_type": "a string (quote it if YAML reads it as a number or boolean)",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "float_type": "a number",
    "float_parsing": "a number",
    "tuple_type": "a list",
    "list_type": "a list",
    "model_type": "a mapping of keys",
    "model_attributes_type": "a mapping of keys",
    "dict_type": "a mapping of keys",
}


# --------------------------------------------------------------------------- catalog checks


def _catalog_problems(data: dict[str, Any]) -> list[tuple[Loc, str, str]]:
    """Checks that need the runtime catalog and the quantization table."""
    from snapbuild.estimate import quantization_table

    catalog = load_catalog()
    quants = quantization_table()
    out: list[tuple[Loc, str, str]] = []
    artifacts = data.get("artifacts") or []
    formats = {a.get("name"): a.get("format") for a in artifacts if isinstance(a, dict)}
    model = data.get("model")
    kind = model.get("kind", "chat") if isinstance(model, dict) else "chat"
    for i, art in enumerate(artifacts):
        if isinstance(art, dict) and isinstance(art.get("quantization"), str):
            q = art["quantization"]
            if q not in quants:
                close = difflib.get_close_matches(q, list(quants), n=1)
                out.append(
                    (
                        ("artifacts", i, "quantization"),
                        f"unknown quantization {q!r}",
                        (f"did you mean {close[0]!r}? " if close else "")
                        + f"use one of: {', '.join(quants)} (snapbuild/data/quantization.yaml)",
                    )
                )
    for i, eng in enumerate(data.get("engines") or []):
        if not isinstance(eng, dict) or not isinstance(eng.get("runtime"), str):
            continue
        rid = eng["runtime"]
        entry = catalog.get(rid)
        if entry is None:
            close = difflib.get_close_matches(rid, list(catalog.ids), n=1)
            out.append(
                (
                    ("engines", i, "runtime"),
                    f"unknown runtime {rid!r}",
                    (f"did you mean {close[0]!r}? " if close else "")
                    + f"use a runtime id of runtimes/catalog.yaml: {', '.join(catalog.ids)}",
                )
            )
            continue
        fmt = formats.get(eng.get("artifact"))
        if fmt in ("gguf", "openvino-ir", "onnx") and fmt not in entry.formats:
            out.append(
                (
                    ("engines", i, "runtime"),
                    f"runtime {rid!r} cannot read artifact {eng.get('artifact')!r} "
                    f"(format {fmt}; it reads {', '.join(entry.formats)})",
                    "point the engine at an artifact in a format this runtime reads, "
                    f"or pick a runtime that reads {fmt}",
                )
            )
        if isinstance(kind, str) and kind not in entry.capabilities:
            out.append(
                (
                    ("engines", i, "runtime"),
                    f"runtime {rid!r} cannot serve a {kind} model "
                    f"(it serves {', '.join(entry.capabilities)})",
                    f"pick a runtime whose capabilities include {kind}",
                )
            )
    return out


def _reference_problems(data: dict[str, Any]) -> list[tuple[Loc, str, str]]:
    """Cross-references, located on the offending entry (pydantic reports them at the top)."""
    out: list[tuple[Loc, str, str]] = []
    for section, what in (("artifacts", "artifact"), ("engines", "engine")):
        seen: dict[str, int] = {}
        for i, item in enumerate(data.get(section) or []):
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(name, str):
                continue
            if name in seen:
                out.append(
                    (
                        (section, i, "name"),
                        f"{what} name {name!r} is already used by {section}[{seen[name]}]",
                        f"give each {what} a unique name",
                    )
                )
            seen.setdefault(name, i)
    names = [a.get("name") for a in data.get("artifacts") or [] if isinstance(a, dict)]
    for i, eng in enumerate(data.get("engines") or []):
        if (
            isinstance(eng, dict)
            and isinstance(eng.get("artifact"), str)
            and eng["artifact"] not in names
        ):
            out.append(
                (
                    ("engines", i, "artifact"),
                    f"artifact {eng['artifact']!r} is not defined",
                    "name one of the artifacts: "
                    + ", ".join(str(n) for n in names if isinstance(n, str)),
                )
            )
    return out


def _context_problems(manifest: Manifest) -> list[tuple[Loc, str, str]]:
    out: list[tuple[Loc, str, str]] = []
    limit = manifest.model.context_length
    for i, eng in enumerate(manifest.engines):
        ctx = eng.context_size or manifest.default_context_size
        low = eng.min_context_size or manifest.min_context_size
        if limit is not None and ctx > limit:
            out.append(
                (
                    ("engines", i, "context-size"),
                    f"context {ctx} is over the model's trained context-length {limit}",
                    f"use a context-size of at most {limit}",
                )
            )
        if low > ctx:
            out.append(
                (
                    ("engines", i, "min-context-size"),
                    f"minimum context {low} is above the default context {ctx}",
                    "lower min-context-size or raise context-size",
                )
            )
    return out


# --------------------------------------------------------------------------- YAML reading


def _duplicate_keys(node: yaml.Node, path: Loc = ()) -> list[tuple[Loc, int, str]]:
    out: list[tuple[Loc, int, str]] = []
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            key = str(getattr(k, "value", ""))
            if key in seen:
                out.append((path + (key,), int(k.start_mark.line) + 1, key))
            seen.add(key)
            out.extend(_duplicate_keys(v, path + (key,)))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out.extend(_duplicate_keys(item, path + (i,)))
    return out


def _read(path: Path, shown: str) -> tuple[Any, yaml.Node | None]:
    try:
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
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = int(mark.line) + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError(
            f"{shown} is not valid YAML",
            details=f"{shown}:{line}: YAML syntax error: {problem}",
            resolution="fix the YAML syntax at that line (indentation, quoting, colons)",
        ) from None
    return data, root


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


def _load(path: Path, shown: str) -> Manifest:
    data, root = _read(path, shown)
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
    problems = (
        [
            Problem(shown, line, field_name(loc), f"key {key!r} appears twice", "keep one of them")
            for loc, line, key in _duplicate_keys(root)
        ]
        if root is not None
        else []
    )
    located = _reference_problems(data) + _catalog_problems(data)
    manifest: Manifest | None = None
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc: Loc = tuple(err["loc"])
            if not loc and located:
                continue  # a cross-reference error the located checks already report
            message, fix = _fix_for(dict(err))
            problems.append(Problem(shown, line_of(root, loc), field_name(loc), message, fix))
    problems = _drop_parent_noise(problems)
    located += _snake_case_keys(root)
    if manifest is not None:
        located += _context_problems(manifest)
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


def _snake_case_keys(root: yaml.Node | None, loc: Loc = ()) -> list[tuple[Loc, str, str]]:
    """Keys written snake_case: pydantic would accept them by field name; manifests are kebab."""
    out: list[tuple[Loc, str, str]] = []
    if isinstance(root, yaml.MappingNode):
        allowed = allowed_keys(loc)
        for k, v in root.value:
            key = str(getattr(k, "value", ""))
            if "_" in key and key.replace("_", "-") in allowed:
                out.append(
                    (
                        loc + (key,),
                        f"key {key!r} is snake_case",
                        f"write it kebab-case: {key.replace('_', '-')!r}",
                    )
                )
            out.extend(_snake_case_keys(v, loc + (key,)))
    elif isinstance(root, yaml.SequenceNode):
        for i, item in enumerate(root.value):
            out.extend(_snake_case_keys(item, loc + (i,)))
    return out


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
