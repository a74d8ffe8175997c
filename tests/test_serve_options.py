"""What `serve` and the snap daemon hand the server (snapbuild.serving.launch ->
runtimes.ServeOptions):
the Decision's context, slots and batching plan as chosen, the operator's overrides on top, and
nothing re-derived in the runtime layer."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from support.manifests import GEMMA3_4B

from hwprobe import probe
from runtimes.engine import LoadOptions
from runtimes.gateway.images import ImagePolicy
from runtimes.gateway.server import ServeOptions
from runtimes.llamaserver.supervisor import ServingConfig
from snapbuild.manifest.loader import load_manifest
from snapbuild.selection.decision import Selected
from snapbuild.selection.selector import select
from snapbuild.serving.batching import kv_block_tokens
from snapbuild.serving.launch import serve_options
from snapcommon.errors import UsageError

MACHINES = Path(__file__).parent / "data" / "machines"
WEIGHTS = Path("/models/weights.gguf")


def _selected(model: str, machine: str, engine: str) -> Selected:
    host = probe(root=str(MACHINES / machine / "machine-root"))
    decision = select(load_manifest(model), host, engine=engine)
    assert decision.selected is not None
    return decision.selected


def test_a_llama_cpp_engine_serves_the_decisions_slots_and_context() -> None:
    manifest = load_manifest("smollm2")
    selected = _selected("smollm2", "i7-2600k+arc-a580", "cpu")
    plan = selected.serving
    assert plan is not None and plan.context_per_slot == selected.context_size
    options = serve_options(manifest, selected, artifact=WEIGHTS, threads=4)
    assert options == ServeOptions(
        model_id="smollm2",
        engine_name="cpu",
        load=LoadOptions(
            artifact=WEIGHTS,
            runtime=selected.runtime,
            device="cpu",
            context_size=selected.context_size,
            threads=4,
            chat_template=manifest.model.chat_template,
        ),
        serving=ServingConfig(
            slots=plan.slots,
            context_per_slot=selected.context_size,
            kv_cache_type=plan.kv_cache_type,
            flash_attention=plan.flash_attention,
            cache_reuse=plan.cache_reuse,
            threads=4,
            prompt_cache_mib=plan.prompt_cache >> 20,
        ),
        port=manifest.default_port,
        declared=("text",),  # smollm2 declares neither images nor tools
    )


def test_the_operators_overrides_win_and_never_pass_the_trained_context() -> None:
    manifest = load_manifest("smollm2")
    assert manifest.model.context_length == 8192
    selected = _selected("smollm2", "i7-2600k+arc-a580", "cpu")
    options = serve_options(
        manifest, selected, artifact=WEIGHTS, context_size=1024, slots=3, port="auto"
    )
    assert options.load.context_size == 1024
    assert options.serving is not None
    assert (options.serving.context_per_slot, options.serving.slots) == (1024, 3)
    assert options.port == str(manifest.default_port)  # the first free port from the default
    capped = serve_options(manifest, selected, artifact=WEIGHTS, context_size=100_000, port=9)
    assert capped.load.context_size == capped.serving.context_per_slot == 8192  # type: ignore[union-attr]
    assert capped.port == 9


def test_the_decision_is_not_second_guessed() -> None:
    """A Decision whose context differs from the manifest's defaults is served as it says: the
    server no longer recomputes "engine context or default, capped at the trained length"."""
    manifest = load_manifest("smollm2")
    selected = _selected("smollm2", "i7-2600k+arc-a580", "cpu")
    assert selected.serving is not None
    odd = selected.model_copy(
        update={
            "context_size": 777,
            "serving": selected.serving.model_copy(update={"context_per_slot": 777}),
        }
    )
    options = serve_options(manifest, odd, artifact=WEIGHTS)
    assert options.load.context_size == 777
    assert options.serving is not None and options.serving.context_per_slot == 777


def test_a_continuous_batching_engine_gets_its_plan_and_block_size() -> None:
    manifest = load_manifest(GEMMA3_4B)
    selected = _selected(GEMMA3_4B, "i7-2600k+arc-a580", "openvino-gpu")
    assert selected.batching is not None and selected.batching.mode == "continuous"
    options = serve_options(
        manifest,
        selected,
        artifact=WEIGHTS,
        projector=Path("/models/mmproj.gguf"),
        cors_origins=["https://app.example"],
        images=ImagePolicy(remote_urls=True),
    )
    assert options.serving is None
    assert options.load.device == "gpu"
    assert options.load.sequences == selected.batching.sequences == 15
    assert options.load.kv_block_tokens == kv_block_tokens("openvino-gpu") == 16
    assert options.load.projector == Path("/models/mmproj.gguf")
    assert options.cors_origins == ("https://app.example",)
    assert options.images == ImagePolicy(remote_urls=True)


def test_an_engine_the_manifest_lacks_is_a_usage_error() -> None:
    selected = _selected("smollm2", "i7-2600k+arc-a580", "cpu")
    with pytest.raises(UsageError, match="manifest 'gemma3' has no engine 'cpu'"):
        serve_options(load_manifest(GEMMA3_4B), selected, artifact=WEIGHTS)


def test_serve_options_refuse_a_slot_context_that_is_not_the_served_one() -> None:
    load = LoadOptions(artifact=WEIGHTS, runtime="llama.cpp-cpu", context_size=2048)
    ServeOptions(model_id="m", engine_name="cpu", load=load, serving=ServingConfig(2, 2048))
    with pytest.raises(ValueError, match=r"context per slot \(4096\) differs .* \(2048\)"):
        ServeOptions(model_id="m", engine_name="cpu", load=load, serving=ServingConfig(2, 4096))
    frozen = ServeOptions(model_id="m", engine_name="cpu", load=load)
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen.port = 1  # type: ignore[misc]
