"""Where llama-server computes: the device a GPU engine must use, and what its log says it did.

The selector chooses one device (a PCI GPU, or the software Vulkan device an operator forced);
:class:`DeviceChoice` is how llama-server is held to it: the backend's visible-devices variable
leaves only that device to the backend, and ``--device <Name>0`` makes llama-server refuse to
start rather than quietly compute on the CPU when the device is missing. The GGML backend
itself is the module the component carries (``usr/bin/libggml-<backend>.so``), loaded from
there by path: the child runs with its working directory in ``usr/bin`` (ggml also searches the
working directory) and without ``GGML_BACKEND_PATH``.

After the first start, :func:`read_report` reads llama-server's own log lines (the device it
used and its free memory, the layers offloaded, the buffers on the device) into an
:class:`OffloadReport`, which ``/health`` shows as ``runtime_info.offload``: the evidence of
where the work runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
# llama.cpp's log lines at the pinned commit (src/llama.cpp, llama-model.cpp, llama-kv-cache.cpp,
# llama-context.cpp)
USING = re.compile(r"using device (\S+) \((.*)\) \(([^()]*)\) - (\d+) MiB free")
OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
BUFFER = re.compile(r"(\S+) (model|KV|compute) buffer size =\s+([\d.]+) MiB")
DROPPED = ("GGML_BACKEND_PATH",)  # an out-of-tree backend would not be the component's


@dataclass(frozen=True)
class DeviceChoice:
    """The one device a GPU engine's llama-server must compute on."""

    backend: str  # "vulkan": the component's usr/bin/libggml-vulkan.so
    device: str  # llama.cpp's name for it once only it is visible: "Vulkan0"
    env: tuple[tuple[str, str], ...] = ()  # the backend's visible-devices variable and the like
    why: str = ""  # what was chosen, for /health: "llvmpipe (...) (Vulkan device 0, software)"

    @property
    def module(self) -> str:
        """The backend module the component must carry in ``usr/bin``."""
        return f"libggml-{self.backend}.so"

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with this choice's variables set and out-of-tree backends dropped."""
        env = {k: v for k, v in base.items() if k not in DROPPED}
        env.update(self.env)
        return env

    def to_data(self) -> dict[str, Any]:
        """JSON-ready, for /health."""
        return {
            "backend": self.backend,
            "device": self.device,
            "env": dict(self.env),
            "why": self.why,
        }


def usable(choice: DeviceChoice | None, bin_dir: Path) -> tuple[DeviceChoice | None, str | None]:
    """The choice when the component carries its backend module; otherwise None and a note.

    A trial of a recorded GPU machine stages the CPU build in the GPU component's place
    (``snapbuild try``): that tree has no GPU module, so the engine runs on the CPU and says so.
    """
    if choice is None or (bin_dir / choice.module).is_file():
        return choice, None
    return None, (
        f"the component has no {choice.module} beside llama-server (a CPU build stands in): "
        f"running on the CPU instead of {choice.device}"
    )


def on_device(
    choice: DeviceChoice | None, bin_dir: Path, base: dict[str, str]
) -> tuple[DeviceChoice | None, dict[str, str], str | None]:
    """What :func:`usable` leaves of ``choice``, the child's environment ``base`` held to that
    device, and the note when a CPU build stands in."""
    kept, note = usable(choice, bin_dir)
    return kept, (kept.environment(base) if kept else base), note


def offload_data(choice: DeviceChoice, report: OffloadReport | None) -> dict[str, Any]:
    """``runtime_info.offload`` for /health: the device chosen, and where the model went."""
    return {**choice.to_data(), "report": report.to_data() if report else None}


@dataclass
class OffloadReport:
    """What llama-server's log says about where the model went."""

    device: str | None = None  # "Vulkan0"
    description: str | None = None  # "llvmpipe (LLVM 15.0.6, 256 bits)"
    device_id: str | None = None  # the PCI address, "unknown id" when the driver gives none
    free_at_load: int | None = None  # bytes free on the device when the model loaded
    layers: int | None = None  # layers offloaded
    layers_total: int | None = None  # of this many
    buffers: dict[str, int] = field(default_factory=dict)  # "Vulkan0 KV" -> bytes

    @property
    def complete(self) -> bool:
        """Whether every layer went to the device."""
        return self.layers is not None and self.layers == self.layers_total

    def shortfall(self) -> str | None:
        """A note for /health when fewer layers than all reached the device (None: all did, or
        the log said nothing)."""
        if self.layers is None or self.complete:
            return None
        return (
            f"llama-server put {self.layers} of {self.layers_total} layers on "
            f"{self.device or 'the device'}: "
            "the rest run on the CPU"
        )

    def on_device(self, kind: str) -> int | None:
        """Bytes of ``kind`` (model, KV, compute) buffers on the device used."""
        return self.buffers.get(f"{self.device} {kind}") if self.device else None

    def to_data(self) -> dict[str, Any]:
        """JSON-ready, for /health."""
        return {
            "device": self.device,
            "description": self.description,
            "device-id": self.device_id,
            "free-at-load": self.free_at_load,
            "layers": self.layers,
            "layers-total": self.layers_total,
            "buffers": dict(self.buffers),
        }


def read_report(lines: Iterable[str]) -> OffloadReport:
    """The report from llama-server's log lines (the first of each kind: the first load)."""
    report = OffloadReport()
    for line in lines:
        if report.device is None and (m := USING.search(line)):
            report.device, report.description, report.device_id = m.group(1, 2, 3)
            report.free_at_load = int(m.group(4)) * MIB
        elif report.layers is None and (m := OFFLOADED.search(line)):
            report.layers, report.layers_total = int(m.group(1)), int(m.group(2))
        elif m := BUFFER.search(line):
            key = f"{m.group(1)} {m.group(2)}"
            report.buffers.setdefault(key, round(float(m.group(3)) * MIB))
    return report
