"""What can be wrong with a model ladder, located on the field that says it.

A ladder's references run through names and quantizations (an artifact's ``option``, an engine's
``quantization`` and ``options``) rather than through the artifact names a single-model manifest
uses, so pydantic alone cannot see a broken one. These checks run on the validated manifest and,
like :func:`snapbuild.manifest.problems.context_problems`, report each problem as ``(loc,
message, fix)`` for the loader to place on a line; views (:mod:`snapbuild.manifest.ladder`) are
built only from a manifest that passed them.
"""

from __future__ import annotations

from collections import Counter

from runtimes.catalog import load_catalog
from snapbuild.manifest.ladder import applies, option_artifacts, option_facts, resolve
from snapbuild.manifest.model import Manifest
from snapbuild.manifest.problems import Located


def ladder_problems(manifest: Manifest) -> list[Located]:
    """Every ladder rule ``manifest`` breaks; for a single model, the ladder keys it misuses."""
    if not manifest.is_ladder:
        return _single_model_keys(manifest)
    return (
        _option_names(manifest)
        + _artifact_options(manifest)
        + _engine_keys(manifest)
        + _per_option(manifest)
        + _engine_reach(manifest)
    )


def _single_model_keys(manifest: Manifest) -> list[Located]:
    fix = "remove it, or list the model's sizes under options: (a ladder)"
    out: list[Located] = [
        (("artifacts", i, "option"), f"artifact {a.name!r} names option {a.option!r}", fix)
        for i, a in enumerate(manifest.artifacts)
        if a.option is not None
    ]
    for i, e in enumerate(manifest.engines):
        for key, given in (("quantization", e.quantization), ("options", e.options)):
            if given:
                msg = f"engine {e.name!r} sets {key}, which only a ladder's engines use"
                out.append((("engines", i, key), msg, fix))
    if manifest.min_tokens_per_second is not None:
        msg = "min-tokens-per-second chooses between model options; this manifest has none"
        out.append((("min-tokens-per-second",), msg, fix))
    return out


def _option_names(manifest: Manifest) -> list[Located]:
    twice = {n for n, k in Counter(o.name for o in manifest.options).items() if k > 1}
    out: list[Located] = [
        (("options", i, "name"), f"two options are named {o.name!r}", "give each a unique name")
        for i, o in enumerate(manifest.options)
        if o.name in twice
    ]
    family = manifest.model.architecture
    for i, o in enumerate(manifest.options):
        if o.model.architecture != family:
            out.append(
                (
                    ("options", i, "model", "architecture"),
                    f"option {o.name!r} says architecture {o.model.architecture!r}; the family's "
                    f"model says {family!r}",
                    "a ladder holds sizes of one architecture: make them agree",
                )
            )
    return out


def _artifact_options(manifest: Manifest) -> list[Located]:
    names = [o.name for o in manifest.options]
    listed = ", ".join(names)
    return [
        (
            ("artifacts", i, "option"),
            f"artifact {a.name!r} belongs to no option"
            if a.option is None
            else f"artifact {a.name!r} names option {a.option!r}, which is not listed",
            f"give it option: NAME, one of {listed}",
        )
        for i, a in enumerate(manifest.artifacts)
        if a.option not in names
    ]


def _engine_keys(manifest: Manifest) -> list[Located]:
    names = {o.name for o in manifest.options}
    out: list[Located] = []
    for i, e in enumerate(manifest.engines):
        if e.quantization is None:
            out.append(
                (
                    ("engines", i, "quantization"),
                    f"engine {e.name!r} names no quantization",
                    "a ladder's engine runs each option's weights in one quantization: add "
                    "quantization: (e.g. Q4_K_M)",
                )
            )
        for key, given in (("artifact", e.artifact), ("projector", e.projector)):
            if given is not None:
                out.append(
                    (
                        ("engines", i, key),
                        f"engine {e.name!r} names {key} {given!r}; a ladder's engines pick each "
                        "option's files by quantization",
                        f"remove {key}: (the option's GGUF projector is loaded with its weights)",
                    )
                )
        unknown = [o for o in e.options if o not in names]
        if unknown:
            out.append(
                (
                    ("engines", i, "options"),
                    f"engine {e.name!r} lists unknown option(s) {', '.join(unknown)}",
                    f"list options of this manifest: {', '.join(sorted(names))}",
                )
            )
    return out


def _per_option(manifest: Manifest) -> list[Located]:
    """Each option: weights of one quantization each, at most one projector, engines that run
    it, and context sizes within its trained length."""
    out: list[Located] = []
    index = {a.name: i for i, a in enumerate(manifest.artifacts)}
    for k, option in enumerate(manifest.options):
        own = option_artifacts(manifest, option.name)
        weights = [a for a in own if a.role == "weights"]
        twice = {q for q, n in Counter(a.quantization for a in weights).items() if n > 1}
        for a in weights:
            if a.quantization in twice:
                out.append(
                    (
                        ("artifacts", index[a.name], "quantization"),
                        f"option {option.name!r} has two weights artifacts in {a.quantization}",
                        "an engine picks an option's weights by quantization: keep one",
                    )
                )
        for a in [a for a in own if a.role == "projector"][1:]:
            out.append(
                (
                    ("artifacts", index[a.name], "role"),
                    f"option {option.name!r} has more than one projector",
                    "keep one projector per option (the GGUF engines load it)",
                )
            )
        runs = [e for e in manifest.engines if resolve(manifest, option.name, e)]
        if not runs and not twice:  # with two weights in one quantization, that is the problem
            out.append(
                (
                    ("options", k, "name"),
                    f"no engine runs option {option.name!r}",
                    "give the option weights in a quantization an engine names",
                )
            )
        out += _contexts(manifest, option.name, k)
    return out


def _contexts(manifest: Manifest, option: str, k: int) -> list[Located]:
    chosen = manifest.option(option)
    assert chosen is not None
    limit = option_facts(manifest, chosen).context_length
    out: list[Located] = []
    for i, e in enumerate(manifest.engines):
        ctx = e.context_size or manifest.default_context_size
        if limit is not None and ctx > limit and resolve(manifest, option, e):
            where: tuple[str | int, ...] = ("engines", i, "context-size")
            if e.context_size is None:
                where = ("options", k, "model", "context-length")
            out.append(
                (
                    where,
                    f"context {ctx} ({e.name}) is over option {option!r}'s trained "
                    f"context-length {limit}",
                    f"use a context-size of at most {limit}, or leave {e.name} off this option",
                )
            )
    return out


def _engine_reach(manifest: Manifest) -> list[Located]:
    """Each engine runs some option, in a format its runtime reads."""
    catalog = load_catalog()
    out: list[Located] = []
    for i, e in enumerate(manifest.engines):
        if e.quantization is None:
            continue  # reported by _engine_keys
        runs = [(o.name, resolve(manifest, o.name, e)) for o in manifest.options]
        resolved = [(name, r) for name, r in runs if r is not None]
        having = {a.option for a in manifest.artifacts if a.quantization == e.quantization}
        if not having & {o.name for o in manifest.options if applies(e, o.name)}:
            out.append(
                (
                    ("engines", i, "quantization"),
                    f"engine {e.name!r} runs no option: none has weights in {e.quantization}"
                    + (f" among {', '.join(e.options)}" if e.options else ""),
                    "add such weights to an option, or change the quantization",
                )
            )
        entry = catalog.get(e.runtime)
        for name, r in resolved:
            fmt = manifest.weights(r).format
            if entry is not None and fmt not in entry.formats:
                out.append(
                    (
                        ("engines", i, "runtime"),
                        f"runtime {e.runtime!r} cannot read option {name!r}'s {e.quantization} "
                        f"weights (format {fmt}; it reads {', '.join(entry.formats)})",
                        "list the options whose weights it reads under options:, or pick a "
                        "runtime that reads them",
                    )
                )
    return out
