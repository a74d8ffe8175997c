"""A model ladder read as single-model manifests: one view per option.

A ladder manifest lists model options (sizes of one family), tags each artifact with its option
and lets each engine name a quantization rather than an artifact, so ``cuda`` is written once and
runs every size. Everything downstream (the memory fit, the serving plan, the components, the
daemon) was built for one model: rather than teach each of them about options, this module
resolves a ladder into one ordinary manifest per option (:func:`option_view`): that option's
facts over the family's, its artifacts, and the engines that apply to it with their artifact and
projector filled in. A manifest without options is its own single view, so callers treat both
kinds alike through :func:`views`.
"""

from __future__ import annotations

from functools import lru_cache

from snapbuild.manifest.model import Artifact, Engine, Manifest, ModelFacts, ModelOption

# The decode speed a larger option must reach to be chosen over a smaller one, when a ladder's
# manifest does not say (min-tokens-per-second): a few tokens per second is about reading speed,
# below it an answer crawls out word by word and a smaller model serves the user better.
DEFAULT_MIN_TOKENS_PER_SECOND = 5.0


def option_facts(manifest: Manifest, option: ModelOption) -> ModelFacts:
    """The option's facts over the family's: what the option's ``model`` says wins."""
    given = {name: getattr(option.model, name) for name in option.model.model_fields_set}
    return manifest.model.model_copy(update=given)


def option_artifacts(manifest: Manifest, option: str) -> tuple[Artifact, ...]:
    """The artifacts of ``option``, in manifest order."""
    return tuple(a for a in manifest.artifacts if a.option == option)


def applies(engine: Engine, option: str) -> bool:
    """Whether ``engine`` lists ``option`` (an engine that lists none applies to every one)."""
    return not engine.options or option in engine.options


def resolve(manifest: Manifest, option: str, engine: Engine) -> Engine | None:
    """``engine`` as it runs ``option``: the option's weights in the engine's quantization and,
    for GGUF weights, the option's projector; None when the engine does not apply to it."""
    if engine.quantization is None or not applies(engine, option):
        return None
    own = option_artifacts(manifest, option)
    weights = [a for a in own if a.role == "weights" and a.quantization == engine.quantization]
    if len(weights) != 1:
        return None  # none in that quantization (or an ambiguous ladder the loader refuses)
    projector = next((a for a in own if a.role == "projector"), None)
    loads = projector if projector is not None and weights[0].format == "gguf" else None
    return engine.model_copy(
        update={
            "artifact": weights[0].name,
            "projector": loads.name if loads else None,
            "quantization": None,
            "options": (),
        }
    )


def option_view(manifest: Manifest, name: str) -> Manifest:
    """The single-model manifest of ladder option ``name``: its facts, artifacts and engines.

    The snap's name, metadata and contexts stay the ladder's (the model id a client sees is the
    snap's name whatever size serves it); :attr:`Manifest.view_of` says which option it is.
    """
    option = manifest.option(name)
    if option is None:
        raise KeyError(f"{manifest.name} has no model option {name!r}")
    engines = tuple(e for e in (resolve(manifest, name, e) for e in manifest.engines) if e)
    view = manifest.model_copy(
        update={
            "model": option_facts(manifest, option),
            "artifacts": option_artifacts(manifest, name),
            "engines": engines,
            "options": (),
        }
    )
    view._view_of = name
    return view


@lru_cache(maxsize=32)
def views(manifest: Manifest) -> tuple[Manifest, ...]:
    """One single-model manifest per option, best option first; a single model: itself.
    Cached (manifests are frozen): a fleet plan selects on the same ladder thousands of
    times."""
    if not manifest.is_ladder:
        return (manifest,)
    return tuple(option_view(manifest, o.name) for o in manifest.options)


def min_tokens_per_second(manifest: Manifest) -> float:
    """The ladder's decode-speed floor (the manifest's, else the default)."""
    return manifest.min_tokens_per_second or DEFAULT_MIN_TOKENS_PER_SECOND


def option_names(manifest: Manifest) -> tuple[str, ...]:
    """The options' names, best first (empty for a single model)."""
    return tuple(o.name for o in manifest.options)


def view_for(manifest: Manifest, option: str | None) -> Manifest:
    """What serves when ``option`` is chosen: that option's view of a ladder, or a single-model
    manifest itself (``option`` None)."""
    return option_view(manifest, option) if option is not None else manifest
