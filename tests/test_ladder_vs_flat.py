"""docs/selection.md's comparison with Canonical's flat rule is computed, not written by hand:
the table between its markers is exactly what tests/support/flat_rule.py computes from the
shipped gemma3 ladder, the recorded machines, the selector and the estimator. Regenerate it with
``python benchmarks/ladder_vs_flat.py`` (or ``SNAPBUILD_UPDATE_GOLDEN=1``) and review the diff."""

from __future__ import annotations

import os
from pathlib import Path

from support.flat_rule import Budget, budget, compare, declared, flat_pick, markdown

import hwprobe
from snapbuild.manifest.loader import load_manifest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "selection.md"
MACHINES = ROOT / "tests" / "data" / "machines"
START, END = "<!-- ladder-vs-flat: tests/test_ladder_vs_flat.py -->\n", "<!-- /ladder-vs-flat -->"


def test_the_documented_table_is_the_computed_one() -> None:
    table = markdown(compare(load_manifest("gemma3"), MACHINES))
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    if os.environ.get("SNAPBUILD_UPDATE_GOLDEN") == "1":
        DOC.write_text(head + START + table + END + tail, encoding="utf-8")
        return
    assert rest.split(END, 1)[0] == table


def test_the_flat_rule_reads_the_best_gpus_vram_else_total_ram() -> None:
    ladder = load_manifest("gemma3")
    assert [declared(ladder, o.name) for o in ladder.options] == [
        16_500_000_000 + 858_000_000,
        7_300_000_000 + 854_000_000,
        2_490_000_000 + 851_000_000,
        806_000_000,
        253_000_000,
    ]
    pavilion = hwprobe.probe(str(MACHINES / "hp-pavilion-15-cs-3037nl" / "machine-root"))
    assert budget(pavilion) == Budget("NVIDIA VRAM 2.0 GiB", 2 << 30, "gpu")
    pi = hwprobe.probe(str(MACHINES / "raspberry-pi-5" / "machine-root"))
    found, pick = flat_pick(ladder, pi)
    assert (found and found.device, pick) == ("cpu", "4b")
