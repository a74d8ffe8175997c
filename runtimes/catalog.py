"""The runtime catalog (``runtimes/catalog.yaml``) as typed data.

Manifests name runtimes by id; the selector reads their device class, the server their adapter,
the builder their build recipe. Keeping this as one table means adding a runtime is a data change
that every part sees at once.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml

from hwprobe.profile import KebabModel

CATALOG_PATH = Path(__file__).with_name("catalog.yaml")

Capability = Literal["chat", "completion", "embeddings"]


class RuntimeEntry(KebabModel):
    """One runtime id: a family (llama.cpp, openvino, onnxruntime) on one device class."""

    id: str
    family: Literal["llama.cpp", "openvino", "onnxruntime"]
    device: Literal["cpu", "gpu", "npu"]
    gpu_vendors: tuple[str, ...] = ()
    npu_vendors: tuple[str, ...] = ()
    formats: tuple[Literal["gguf", "openvino-ir", "onnx"], ...]
    adapter: str  # "module:Class"
    capabilities: tuple[Capability, ...]
    component: str  # the snap component holding this runtime build
    interfaces: tuple[str, ...] = ()  # snap interfaces the runtime needs beyond the base set
    build: dict[str, Any] | None = None  # the builder's part recipe (see templates/)


class RuntimeCatalog(KebabModel):
    """The whole table."""

    schema_version: Literal[1] = 1
    runtimes: tuple[RuntimeEntry, ...]

    def get(self, runtime_id: str) -> RuntimeEntry | None:
        """The entry for ``runtime_id``, or None when the id is unknown."""
        return next((r for r in self.runtimes if r.id == runtime_id), None)

    @property
    def ids(self) -> tuple[str, ...]:
        """Every known runtime id, in table order."""
        return tuple(r.id for r in self.runtimes)


@cache
def load_catalog(path: Path = CATALOG_PATH) -> RuntimeCatalog:
    """Load and validate the catalog (cached: it is read-only data)."""
    with path.open(encoding="utf-8") as fh:
        return RuntimeCatalog.model_validate(yaml.safe_load(fh))
