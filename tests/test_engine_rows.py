"""The one engine-row builder behind `snapbuild engines` and a snap's `engines`: both faces of
the memory fit (figures and verdict) come from the same row, in rank or manifest order."""

from __future__ import annotations

from dataclasses import astuple
from pathlib import Path

import hwprobe
from snapbuild.manifest.loader import load_manifest
from snapbuild.selection.rows import EngineRow, engine_rows
from snapbuild.selection.selector import select

ARC = Path(__file__).parent / "data" / "machines" / "i7-2600k+arc-a580" / "machine-root"


def test_rows_in_rank_order_and_in_manifest_order() -> None:
    manifest = load_manifest("smollm2")
    decision = select(manifest, hwprobe.probe(str(ARC)))
    table = [
        (r.engine, r.device, r.compatible, r.memory, r.fits, r.rank, r.active)
        for r in engine_rows(decision)
    ]
    assert table == [
        ("vulkan", "gpu", True, "956 MiB/7.5 GiB", "yes", 1, True),
        ("cpu", "cpu", True, "364 MiB/9.3 GiB", "yes", 2, False),
        ("cuda", "gpu", False, "-", "unknown", None, False),
        ("cpu-avx2", "cpu", False, "364 MiB/9.3 GiB", "yes", None, False),
    ]
    by_manifest = engine_rows(decision, manifest.engines)
    assert [r.engine for r in by_manifest] == ["cuda", "vulkan", "cpu-avx2", "cpu"]
    assert [r.summary for r in by_manifest] == [e.summary for e in manifest.engines]
    assert by_manifest[3].to_data(fit="verdict") == {
        "engine": "cpu",
        "runtime": "llama.cpp-cpu",
        "device": "cpu",
        "quantization": "Q4_1",
        "compatible": True,
        "fit": "yes",
        "rank": 2,
        "active": False,
    }
    assert by_manifest[3].to_data(fit="memory")["fit"] == "364 MiB/9.3 GiB"


def test_an_engine_the_decision_does_not_know_is_listed_as_unknown() -> None:
    manifest = load_manifest("smollm2")
    decision = select(manifest, hwprobe.probe(str(ARC)))
    assert decision.candidates[0].engine == "vulkan"
    stale = decision.model_copy(update={"candidates": decision.candidates[:1]})
    rows = engine_rows(stale, manifest.engines)
    assert rows[1].compatible and rows[1].active
    # engine, runtime, device, quantization, compatible, rank, active, required, available,
    # summary, option (a single model's rows run none)
    unknown = ("cuda", "llama.cpp-cuda", None, None, False, None, False, None, None)
    assert astuple(rows[0]) == (*unknown, manifest.engines[0].summary, None)
    assert (rows[0].memory, rows[0].fits) == ("-", "unknown")


def test_the_verdict_follows_the_figures() -> None:
    row = EngineRow("e", "llama.cpp-cpu", "cpu", "Q4_1", False, None, False, 2 << 30, 1 << 30)
    assert (row.memory, row.fits) == ("2.0 GiB/1.0 GiB", "no")
    unknown = EngineRow("e", "llama.cpp-cpu", "cpu", "Q4_1", True, 1, True, 2 << 30, None)
    assert (unknown.memory, unknown.fits) == ("2.0 GiB/?", "unknown")
