"""Code and data agree for the typed data files outside the selector's own tables (those are
``tests/test_selector_data.py``'s): llama.cpp's memory rules, the sliding-window layouts, snapd's
licence ids and the fleet's counterfactual changes. Each table also refuses a broken copy with a
message that names the key and what is wrong."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from runtimes.catalog import load_catalog
from snapbuild.estimate_llama import LlamaRun
from snapbuild.estimate_tables import LlamaMemoryTable, llama_memory, read_data


def _changed(data: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A deep copy of ``data`` with the value at ``path`` replaced (None: the key removed)."""
    out = copy.deepcopy(data)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


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
        LlamaMemoryTable.model_validate(_changed(data, path, value))
