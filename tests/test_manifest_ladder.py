"""A model ladder read as single-model views, and selected over (option x engine): the shipped
gemma3 (270M to 27B) on constructed hosts, so each test says exactly what the machine has."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.hosts import GIB, host, nvidia

import hwprobe
from snapbuild.manifest.ladder import option_view, resolve, views
from snapbuild.manifest.loader import load_manifest
from snapbuild.selection.selector import select
from snapcommon.errors import UsageError

LADDER = load_manifest("gemma3")
PI = Path(__file__).parent / "data" / "machines" / "raspberry-pi-5" / "machine-root"


def test_an_options_view_is_that_size_as_one_model() -> None:
    view = option_view(LADDER, "12b")
    assert (view.name, view.view_of, view.is_ladder, view.options) == ("gemma3", "12b", False, ())
    facts = view.model
    assert (facts.architecture, facts.vocab_size, facts.layers, facts.kv_heads) == (
        "gemma3",
        262144,
        48,
        8,
    )
    assert [a.name for a in view.artifacts] == [
        "gemma3-12b-q4-k-m",
        "gemma3-12b-q8-0",
        "gemma3-12b-mmproj-f16",
    ]
    assert [(e.name, e.artifact, e.projector) for e in view.engines][:2] == [
        ("cuda", "gemma3-12b-q4-k-m", "gemma3-12b-mmproj-f16"),
        ("cuda-q8", "gemma3-12b-q8-0", "gemma3-12b-mmproj-f16"),
    ]
    assert all(e.quantization is None and e.options == () for e in view.engines)


def test_engines_apply_to_the_options_with_their_quantization() -> None:
    openvino = LADDER.engine("openvino-gpu")
    assert openvino is not None and openvino.quantization == "int4"
    runs = {o.name: resolve(LADDER, o.name, openvino) for o in LADDER.options}
    assert {name: r.artifact if r else None for name, r in runs.items()} == {
        "27b": None,
        "12b": None,
        "4b": "gemma3-4b-ov-int4",
        "1b": None,
        "270m": None,
    }
    assert runs["4b"] is not None and runs["4b"].projector is None  # the IR reads images itself
    only_small = openvino.model_copy(update={"options": ("1b",)})
    assert resolve(LADDER, "4b", only_small) is None


def test_a_single_model_is_its_own_view() -> None:
    smollm2 = load_manifest("smollm2")
    assert views(smollm2) == (smollm2,)


def test_an_option_can_be_asked_for_and_an_unknown_one_is_refused() -> None:
    roomy = host(ram=64 * GIB)
    decision = select(LADDER, roomy, option="1b")
    assert decision.selected is not None
    assert (decision.selected.option, decision.selected.engine) == ("1b", "cpu-avx2")
    assert decision.selected.why.startswith("1b on cpu-avx2 was asked for by name")
    assert [(v.option, v.reason) for v in decision.options] == [
        ("27b", "on cpu-avx2 ~1.6 tokens/s here, below the 5 tokens/s floor"),
        ("12b", "on cpu-avx2 ~3.7 tokens/s here, below the 5 tokens/s floor"),
        ("4b", "runs here on cpu-avx2; 1b on cpu-avx2 was asked for"),
        ("1b", "selected"),
        ("270m", "smaller than the selected 1b on cpu-avx2 (runs here on cpu-avx2-q8)"),
    ]
    with pytest.raises(UsageError) as info:
        select(LADDER, roomy, option="70b")
    assert info.value.brief == "gemma3 has no model option named '70b'"
    assert info.value.resolution == "use one of its options (27b, 12b, 4b, 1b, 270m)"


def test_a_gpu_of_unknown_memory_gets_the_smallest_size_not_the_largest() -> None:
    """VRAM nobody reported justifies no larger model: a fit checked on the CPU (1 GiB of RAM
    holds 1b) beats every unchecked one, and with no memory figure at all the smallest option
    wins (on the GPU, the better accelerator)."""
    unknown = nvidia(None, device="0x9999")  # not in the nominal table either
    decision = select(LADDER, host(ram=GIB, gpus=(unknown,)))
    assert decision.selected is not None
    assert (decision.selected.option, decision.selected.engine) == ("1b", "cpu-avx2")
    reasons = {v.option: v.reason for v in decision.options}
    assert reasons["12b"] == (
        "cpu-avx2: RAM available 1.0 GiB < 9.7 GiB needed even at the minimum context 2048 "
        "(10.4 GiB at 8192); its fit on cuda cannot be checked (the device's memory is "
        "unknown): a larger option is chosen only where its fit can be"
    )
    blind = select(LADDER, host(ram=None, gpus=(unknown,))).selected
    assert blind is not None and (blind.option, blind.engine) == ("270m", "cuda")


def test_the_speed_floor_is_the_manifests_unless_overridden() -> None:
    pi = hwprobe.probe(str(PI))
    usual = select(LADDER, pi).selected
    assert usual is not None and usual.option == "1b"
    slower = select(LADDER, pi, min_tokens_per_second=3)
    assert slower.selected is not None and slower.selected.option == "4b"
    assert slower.selected.why.startswith("4b: the best option that fits and decodes at least 3")


def test_when_nothing_fits_the_smallest_options_engines_say_why() -> None:
    decision = select(LADDER, host(ram=GIB // 8))
    assert decision.selected is None
    assert {c.option for c in decision.no_fit_candidates()} == {"270m"}
    assert [v.fits for v in decision.options] == [False] * 5


def test_a_forced_engine_runs_its_best_option_which_the_options_say() -> None:
    decision = select(LADDER, host(ram=16 * GIB), engine="cpu-x86-64")
    assert decision.selected is not None
    assert (decision.selected.option, decision.selected.engine) == ("4b", "cpu-x86-64")
    four = decision.option_verdict("4b")
    assert four is not None
    assert (four.selected, four.engine, four.reason) == (True, "cpu-x86-64", "selected")
