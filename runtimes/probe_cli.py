"""The installed ``hwprobe`` command: hwprobe's CLI, with what each GPU is good for.

hwprobe is facts only and sits below this package, so it cannot read the runtime catalog; the
summary's "good for llama.cpp-vulkan, openvino-gpu..." is the catalog's knowledge and is added
here, where both are in reach. The catalog is imported only when a summary is printed, so
``hwprobe --json`` (install hooks, fleet agents) does not pay for pydantic and the YAML load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hwprobe.cli import main as hwprobe_main

if TYPE_CHECKING:
    from hwprobe.profile import GpuFacts


def gpu_uses(gpu: GpuFacts) -> list[str]:
    """The catalog's GPU runtimes that drive ``gpu``'s vendor, in catalog order (none when the
    catalog cannot be read: the summary still states the facts)."""
    try:
        from runtimes.catalog import load_catalog

        catalog = load_catalog()
    except Exception:  # noqa: BLE001 - the summary works without the catalog
        return []
    return [r.id for r in catalog.runtimes if r.device == "gpu" and gpu.vendor in r.gpu_vendors]


def main() -> None:
    """Console-script entry point (``hwprobe``)."""
    hwprobe_main(gpu_uses)
