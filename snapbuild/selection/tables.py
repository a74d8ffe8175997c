"""Every table the selector reads, as one value: ``select(manifest, host, tables=...)``.

The selector is a pure function, so the tables are arguments like the manifest and the host: a
test, a fleet planner or a third party can judge a manifest under its own runtime catalog or
hardware figures without touching the packaged ones (whose loaders cache one validated copy per
process). Left out are the estimator's constants (``llama_cpp_memory.yaml``, ``estimate.yaml``,
``quantization.yaml``): they are measured facts about a pinned llama.cpp build and the
quantization formats, reproduced by :mod:`snapbuild.estimate` and checked against that build, not
a choice of which runtimes or hardware to consider; changing them changes the estimator.
"""

from __future__ import annotations

from functools import cache

from runtimes.catalog import RuntimeCatalog, load_catalog
from snapbuild.selection.hardware import HardwareTable, hardware_table
from snapbuild.serving.batching import BatchingTable, batching_table
from snapbuild.serving.plan import ServingTable, serving_table
from snapcommon.model import KebabModel


class SelectionTables(KebabModel):
    """The runtime catalog, the hardware table and the serving and batching plans' tables.

    Build one from the packaged tables and replace a part (``model_copy(update=...)``), or
    validate a whole set from data; each part keeps its own schema."""

    catalog: RuntimeCatalog
    hardware: HardwareTable
    serving: ServingTable
    batching: BatchingTable


@cache
def packaged_tables() -> SelectionTables:
    """The tables shipped with snapbuild, each validated once per process by its own loader."""
    return SelectionTables(
        catalog=load_catalog(),
        hardware=hardware_table(),
        serving=serving_table(),
        batching=batching_table(),
    )
