"""What `serve` and the snap daemon hand the server: :class:`runtimes.gateway.server.ServeOptions`.

The runtime layer sits below the toolkit and must not read manifests or repeat selection rules,
so the one place that turns a Decision into serving options is here, used by both callers. The
selector already chose the context, the llama-server slots and the batching plan
(:class:`~snapbuild.selection.decision.Selected`); the operator may override the context, threads
and
slots. What this adds is only what the Decision does not carry: the manifest's chat template,
the runtime's paged-KV block size (:mod:`snapbuild.serving.batching`), the files found on this
machine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from hwprobe.profile import HostProfile
from runtimes.engine import LoadOptions
from runtimes.gateway.images import ImagePolicy
from runtimes.gateway.outage import Advice
from runtimes.gateway.server import ServeOptions
from runtimes.llamaserver.supervisor import ServingConfig, from_plan
from snapbuild.manifest.model import Manifest
from snapbuild.selection.decision import MemoryEstimate, Selected
from snapbuild.serving.batching import load_options
from snapbuild.serving.discovery import declared_capabilities
from snapbuild.serving.offload import device_choice
from snapbuild.serving.plan import serving_plan
from snapcommon.errors import UsageError


def served_context(manifest: Manifest, selected: Selected, override: int | None) -> int:
    """The selector's context, or the operator's ``override``, which never exceeds the model's
    trained context (the snap's settings refuse more; ``serve --context-size`` is capped)."""
    if override is None:
        return selected.context_size
    limit = manifest.model.context_length
    return min(override, limit) if limit else override


def serve_options(
    manifest: Manifest,
    selected: Selected,
    *,
    artifact: Path,
    projector: Path | None = None,
    context_size: int | None = None,
    threads: int | None = None,
    slots: int | None = None,
    host: str = "127.0.0.1",
    port: int | str | None = None,
    llama_root: Path | None = None,
    cors_origins: Sequence[str] | None = None,
    images: ImagePolicy | None = None,
    memory: MemoryEstimate | None = None,
    advice: Advice | None = None,
    unix_socket: Path | None = None,
    machine: HostProfile | None = None,
) -> ServeOptions:
    """Serve ``selected`` (an engine of ``manifest``) from ``artifact`` (and its ``projector``).

    ``context_size``, ``threads`` and ``slots`` are the operator's overrides (None: the
    Decision's, the runtime's default threads); ``slots`` is llama-server's slots or the
    sequences an in-process engine batches (1: one request at a time). ``port``: None for the
    manifest's default port, ``"auto"`` for the first free one from it up. ``memory``: the
    winner's memory estimate (its Candidate's), for planning the slots again at an operator's
    context. ``advice``: what to do when the engine cannot serve, in the caller's words;
    ``unix_socket``: where the API listens besides the port. ``machine``: the host profile, to
    name a GPU engine's device as its backend counts (:mod:`snapbuild.serving.offload`).
    """
    engine = manifest.engine(selected.engine)
    if engine is None:
        raise UsageError(
            f"manifest {manifest.name!r} has no engine {selected.engine!r}",
            details="engines: " + ", ".join(e.name for e in manifest.engines),
        )
    context = served_context(manifest, selected, context_size)
    serving = None
    planned = serving_plan(manifest, selected, context, memory)
    if planned is not None:
        serving = from_plan(planned, threads)
        serving = dataclasses.replace(serving, slots=slots or serving.slots)
    choice = device_choice(engine.runtime, selected, machine)
    if choice is not None:  # a GPU engine: llama-server is held to the selector's device
        base = serving or ServingConfig(context_per_slot=context, threads=threads)
        serving = dataclasses.replace(base, offload=choice)
    if port is None:
        port = manifest.default_port
    elif port == "auto":
        port = str(manifest.default_port)  # bind_socket: the first free port from this one
    load = LoadOptions(
        artifact=artifact,
        runtime=engine.runtime,
        device=selected.device,
        context_size=context,
        threads=threads,
        llama_root=llama_root,
        chat_template=manifest.model.chat_template,
        projector=projector,
        **load_options(engine.runtime, selected.batching, slots),
    )
    return ServeOptions(
        model_id=manifest.name,
        engine_name=engine.name,
        load=load,
        serving=serving,
        host=host,
        port=port,
        cors_origins=tuple(cors_origins) if cors_origins is not None else None,
        images=images or ImagePolicy(),
        declared=declared_capabilities(manifest, selected),
        advice=advice or Advice(),
        unix_socket=unix_socket,
        option=selected.option,
    )
