"""Code and data agree: the selector's typed tables (``snapbuild/selection/hardware.py`` is the
schema of ``hardware.yaml``) cover every runtime, vendor, accelerator class and quantization the
code, the catalog and the shipped manifests name."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from pydantic import ValidationError

from runtimes.catalog import load_catalog
from snapbuild.estimate.common import quantization_table
from snapbuild.estimate.tables import (
    EstimateTable,
    QuantizationTable,
    estimate_table,
    quantizations,
)
from snapbuild.manifest.loader import load_manifest
from snapbuild.paths import manifests_dir
from snapbuild.selection.hardware import Accel, HardwareTable, hardware_table
from snapbuild.selection.ranking import CRITERIA, LADDER_PRECEDENCE, PRECEDENCE

REPO = Path(__file__).resolve().parent.parent


def test_every_catalog_runtime_has_an_efficiency() -> None:
    assert sorted(hardware_table().runtime_efficiency) == sorted(load_catalog().ids)


def test_every_gpu_vendor_of_the_catalog_has_a_bandwidth_and_a_name() -> None:
    vendors = {v for r in load_catalog().runtimes for v in (*r.gpu_vendors, *r.npu_vendors)}
    assert vendors <= set(hardware_table().bandwidth.gpu_by_vendor)
    assert vendors <= set(hardware_table().vendor_names)
    npu_vendors = {v for r in load_catalog().runtimes for v in r.npu_vendors}
    assert npu_vendors <= set(hardware_table().npu_driver_hints)


def test_accelerator_classes_match_the_code() -> None:
    ids = [c.id for c in hardware_table().accelerator_classes]
    assert ids == ["gpu-discrete", "gpu-integrated", "npu", "cpu"]
    assert set(ids) == set(get_args(Accel))


def test_flag_ladders_use_the_names_the_probe_reads() -> None:
    """The arm64 ladder names cpuinfo features hwprobe knows; the x86 one is best first by the
    x86-64 levels (a v4 flag before a v3 one before a v2 one)."""
    cpu = yaml.safe_load(resources.files("hwprobe").joinpath("data", "cpu.yaml").read_text())
    ladders = hardware_table().flag_ladders
    assert set(ladders.arm64) <= set(cpu["arm64-llm-features"])
    level_of = {f: n for n, lv in enumerate(cpu["x86-64-levels"]) for f in lv["flags"]}
    levels = [level_of[f] for f in ladders.x86 if f in level_of]
    assert levels == sorted(levels, reverse=True) and len(levels) >= 6


GOOD: dict[str, Any] = hardware_table().to_data()


@pytest.mark.parametrize(
    "change",
    [
        {"accelerator-classes": [{"id": "cpu", "label": "CPU"}] * 4},  # a class twice
        {"bandwidth": {**GOOD["bandwidth"], "gpu-by-vendor": {"amd": 1e9}}},  # no "other"
        {"runtime-efficiency": {"llama.cpp-cpu": {"intel": 0.5}}},  # no "default"
        {"runtime-efficiency": {"llama.cpp-cpu": {"default": 1.5}}},  # above 1
        {"bandwidths": {}},  # a misspelt key
    ],
)
def test_the_hardware_table_rejects_what_the_code_cannot_use(change: dict[str, Any]) -> None:
    HardwareTable.model_validate(GOOD)
    with pytest.raises(ValidationError):
        HardwareTable.model_validate({**GOOD, **change})


def test_every_estimate_family_is_a_catalog_family() -> None:
    families = {r.family for r in load_catalog().runtimes}
    assert set(estimate_table().families) == families


def test_shipped_quantizations_are_in_the_table_with_a_matching_format() -> None:
    table = quantizations()
    for path in sorted(manifests_dir().glob("*.yaml")):
        for artifact in load_manifest(path.stem).artifacts:
            assert artifact.quantization in quantization_table()
            assert artifact.format in table[artifact.quantization].formats


def test_the_estimate_tables_reject_what_the_code_cannot_use() -> None:
    good = estimate_table().to_data()
    llama = good["families"]["llama.cpp"]
    EstimateTable.model_validate(good)
    for families in (
        {"openvino": good["families"]["openvino"]},  # no llama.cpp, the fallback
        {"llama.cpp": {**llama, "vocabulary": None}},  # its vocabulary rule is counted
        {"llama.cpp": {**llama, "context-padding": 0}},
        {"llama.cpp": {**llama, "ubatch": "512 tokens"}},
    ):
        with pytest.raises(ValidationError):
            EstimateTable.model_validate({**good, "families": families})
    quant = {"schema-version": 1, "quantizations": {"Q4_0": {"bits": 4.5, "formats": ["gguf"]}}}
    QuantizationTable.model_validate(quant)
    with pytest.raises(ValidationError):
        QuantizationTable.model_validate(
            {**quant, "quantizations": {"Q4_0": {"bits": 4.5, "formats": ["safetensors"]}}}
        )


def test_nominal_vram_devices_have_a_bandwidth() -> None:
    assert set(hardware_table().nominal_vram) <= set(hardware_table().bandwidth.gpu_by_device)


def test_the_ranking_criteria_are_the_documented_precedence() -> None:
    """One criterion per numbered item of docs/selection.md's ranking, names unique, and the
    precedence recorded in decisions is read from the criteria: a single model's without the
    ladder's two, which come first."""
    doc = (REPO / "docs" / "selection.md").read_text(encoding="utf-8")
    section = doc.split("### Ranking", 1)[1].split("\n## ", 1)[0]
    assert len(re.findall(r"^\d+\. ", section, re.MULTILINE)) == len(CRITERIA)
    assert len({c.name for c in CRITERIA}) == len(CRITERIA)
    assert tuple(c.precedence for c in CRITERIA if not c.ladder) == PRECEDENCE
    assert tuple(c.precedence for c in CRITERIA) == LADDER_PRECEDENCE
    assert [c.name for c in CRITERIA if c.ladder] == ["speed-floor", "model-option"]
    assert CRITERIA[-1].name == "manifest-order"


def test_every_vendor_a_message_names_has_a_name() -> None:
    """hardware.yaml's vendor-names is the one source: the fleet advice and `snapbuild new`
    name the vendors of the counterfactual drivers and of the catalog with it."""
    from snapbuild.fleet.advice import counterfactuals

    drivers = {v for cf in counterfactuals() for v in cf.params.drivers or {}}
    assert drivers
    assert drivers <= set(hardware_table().vendor_names)
    assert {v for r in load_catalog().runtimes for v in r.vendors} <= set(
        hardware_table().vendor_names
    )
