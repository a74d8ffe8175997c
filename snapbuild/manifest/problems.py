"""What can be wrong in a manifest beyond YAML syntax, phrased for the person who wrote it.

pydantic finds type and value errors; the checks here add what needs data outside the manifest
(the runtime catalog, the quantization table), cross-references pydantic reports without a
place, and kebab-case. Each problem is a ``(loc, message, fix)`` triple: the loader turns ``loc``
into a file line.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel

from runtimes.catalog import load_catalog
from snapbuild.manifest.model import Manifest
from snapbuild.manifest.yaml_rt import Loc, field_name

SCHEMA_HINT = "`snapbuild schema` prints the manifest's JSON Schema for editors"

Located = tuple[Loc, str, str]


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


def fix_for(err: dict[str, Any]) -> tuple[str, str]:
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
    if "local" in loc and key == "path":
        return message + shown, "give where the file is; rename a file whose name has a newline"
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


def catalog_problems(data: dict[str, Any]) -> list[Located]:
    """Checks that need the runtime catalog and the quantization table."""
    from snapbuild.estimate.common import quantization_table

    catalog = load_catalog()
    quants = quantization_table()
    out: list[Located] = []
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


def reference_problems(data: dict[str, Any]) -> list[Located]:
    """Cross-references, located on the offending entry (pydantic reports them at the top)."""
    out: list[Located] = []
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
        if isinstance(eng, dict) and "artifact" not in eng and not data.get("options"):
            # optional in the model because a ladder's engines name a quantization instead
            message, fix = fix_for({"loc": ("engines", i, "artifact"), "type": "missing"})
            out.append((("engines", i, "artifact"), message, fix))
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


def context_problems(manifest: Manifest) -> list[Located]:
    out: list[Located] = []
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


def snake_case_keys(data: Any, loc: Loc = ()) -> list[Located]:
    """Keys written snake_case: pydantic would accept them by field name; manifests are kebab."""
    out: list[Located] = []
    if isinstance(data, dict):
        allowed = allowed_keys(loc)
        for key, value in data.items():
            key = str(key)
            if "_" in key and key.replace("_", "-") in allowed:
                out.append(
                    (
                        loc + (key,),
                        f"key {key!r} is snake_case",
                        f"write it kebab-case: {key.replace('_', '-')!r}",
                    )
                )
            out.extend(snake_case_keys(value, loc + (key,)))
    elif isinstance(data, list):
        for i, item in enumerate(data):
            out.extend(snake_case_keys(item, loc + (i,)))
    return out
