"""Code and data agree for the typed data files outside the selector's own tables (those are
``tests/test_selector_data.py``'s): llama.cpp's memory rules, the sliding-window layouts, snapd's
licence ids and the fleet's counterfactual changes. Each table also refuses a broken copy with a
message that names the key and what is wrong."""

from __future__ import annotations

from typing import Any

import gguf
import pytest
from pydantic import ValidationError
from support.tables import changed

from runtimes.catalog import load_catalog
from snapbuild.estimate.gguf_shape import SwaLayouts, sliding_layers, swa_periods
from snapbuild.estimate.llama import LlamaRun
from snapbuild.estimate.tables import LlamaMemoryTable, llama_memory, read_data
from snapbuild.manifest.spdx import LicenseFile, license_problem, license_table, spdx_id

# --------------------------------------------------------------------------- llama_cpp_memory


def test_llama_run_defaults_are_the_bindings() -> None:
    binding = llama_memory().runs.binding
    run = LlamaRun()
    assert (run.n_batch, run.n_ubatch, run.flash_attn) == (
        binding.n_batch,
        binding.n_ubatch,
        binding.flash_attn,
    )
    server = LlamaRun.server()
    assert (server.n_batch, server.n_ubatch, server.flash_attn) == (2048, 512, True)


def test_every_catalog_runtime_pays_a_device_of_its_class() -> None:
    devices = llama_memory().runtime_devices
    catalog = load_catalog()
    assert sorted(devices) == sorted(catalog.ids)
    for entry in catalog.runtimes:
        device = devices[entry.id]
        assert (device == "cpu") == (entry.device == "cpu"), entry.id
        assert (device == "npu") == (entry.device == "npu"), entry.id


LLAMA_BROKEN = [
    (("runtime-devices", "llama.cpp-cuda"), "cuda-13", "device-overhead lacks: llama.cpp-cuda"),
    (("device-overhead", "cpu"), None, "device-overhead needs a 'cpu' entry"),
    (("kv-cache", "types", "q4_0"), None, "types lacks the block layout of q4_0"),
    (("kv-cache", "types", "q5_1"), {"block-bytes": 24, "block-elements": 32}, "types.q5_1"),
    (("compute", "flash-attn", "output", "logit"), 1, "output.logit\n  Extra inputs"),
    (("runs", "server", "n-batch"), 0, "runs.server.n-batch\n  Input should be greater"),
]


@pytest.mark.parametrize(("path", "value", "message"), LLAMA_BROKEN)
def test_a_broken_llama_memory_table_is_rejected(
    path: tuple[str, ...], value: Any, message: str
) -> None:
    data = read_data("llama_cpp_memory.yaml")
    assert LlamaMemoryTable.model_validate(data) == llama_memory()
    with pytest.raises(ValidationError, match=message):
        LlamaMemoryTable.model_validate(changed(data, path, value))


# --------------------------------------------------------------------------- swa_layouts


def test_swa_layouts_name_gguf_architectures_and_count_local_layers() -> None:
    periods = swa_periods()
    assert set(periods) <= set(gguf.MODEL_ARCH_NAMES.values())
    assert sliding_layers("gemma3", 34, 1024, None) == 29  # Gemma 3 4B, as the data file says
    assert sliding_layers("gemma2", 26, 4096, None) == 13
    assert sliding_layers("llama", 16, 4096, None) == 0  # no fixed layout: none assumed
    assert sliding_layers("gemma3", 34, 1024, 2) == 17  # the GGUF's own period wins


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("architectures", "gemma3", "period"), 1, "gemma3.period\n  Input should be greater"),
        (("architectures", "gemma3", "every"), 6, "gemma3.every\n  Extra inputs"),
        (("schema-version",), 2, "schema-version\n  Input should be 1"),
    ],
)
def test_a_broken_swa_table_is_rejected(path: tuple[str, ...], value: Any, message: str) -> None:
    data = read_data("swa_layouts.yaml")
    assert SwaLayouts.model_validate(data).architectures["gemma3"].period == 6
    with pytest.raises(ValidationError, match=message):
        SwaLayouts.model_validate(changed(data, path, value))


# --------------------------------------------------------------------------- snapd_licenses


def test_licence_table_accepts_the_extra_ids_and_corrects_case() -> None:
    table = license_table()
    assert "Proprietary" in table.licenses and "MIT" in table.licenses
    assert license_problem("Proprietary OR MIT") is None
    assert license_problem("GPL-2.0-or-later WITH Classpath-exception-2.0") is None
    assert spdx_id("gpl-3.0-ONLY") == "GPL-3.0-only"


@pytest.mark.parametrize(
    ("key", "entry", "message"),
    [
        ("licenses", "Apache 2.0", "not a licence id: 'Apache 2.0'"),
        ("licenses", "AND", "not a licence id: 'AND'"),
        ("licenses", "apache-2.0", "listed twice \\(ignoring case\\): Apache-2.0, apache-2.0"),
        ("exceptions", "MIT", "listed twice \\(ignoring case\\): MIT, MIT"),
    ],
)
def test_a_broken_licence_table_is_rejected(key: str, entry: str, message: str) -> None:
    data = read_data("snapd_licenses.yaml")
    assert LicenseFile.model_validate(data).spdx_list_version == "3.11"
    with pytest.raises(ValidationError, match=message):
        LicenseFile.model_validate(changed(data, (key,), [*data[key], entry]))
