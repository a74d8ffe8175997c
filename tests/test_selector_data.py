"""Code and data agree: the selector's tables cover every runtime, vendor and quantization
the catalog and the shipped manifests name."""

from __future__ import annotations

from runtimes.catalog import load_catalog
from snapbuild.estimate import _data, quantization_table
from snapbuild.manifest_loader import load_manifest
from snapbuild.paths import manifests_dir
from snapbuild.selector import ACCEL_LABELS, hardware_table


def test_every_catalog_runtime_has_an_efficiency() -> None:
    assert sorted(hardware_table()["runtime-efficiency"]) == sorted(load_catalog().ids)
    for entry in hardware_table()["runtime-efficiency"].values():
        assert 0 < entry["default"] <= 1


def test_every_gpu_vendor_of_the_catalog_has_a_bandwidth_and_a_name() -> None:
    vendors = {v for r in load_catalog().runtimes for v in (*r.gpu_vendors, *r.npu_vendors)}
    assert vendors <= set(hardware_table()["bandwidth"]["gpu-by-vendor"])
    assert vendors <= set(hardware_table()["vendor-names"])
    npu_vendors = {v for r in load_catalog().runtimes for v in r.npu_vendors}
    assert npu_vendors <= set(hardware_table()["npu-driver-hints"])


def test_accelerator_classes_match_the_code() -> None:
    assert hardware_table()["accelerator-classes"] == list(ACCEL_LABELS)


def test_every_estimate_family_is_a_catalog_family() -> None:
    families = {r.family for r in load_catalog().runtimes}
    assert set(_data("estimate.yaml")["families"]) == families


def test_shipped_quantizations_are_in_the_table_with_a_matching_format() -> None:
    table = _data("quantization.yaml")["quantizations"]
    for path in sorted(manifests_dir().glob("*.yaml")):
        for artifact in load_manifest(path.stem).artifacts:
            assert artifact.quantization in quantization_table()
            assert artifact.format in table[artifact.quantization]["formats"]


def test_nominal_vram_devices_have_a_bandwidth() -> None:
    assert set(hardware_table()["nominal-vram"]) <= set(
        hardware_table()["bandwidth"]["gpu-by-device"]
    )
