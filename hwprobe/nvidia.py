"""NVIDIA GPU facts through NVML (nvidia-ml-py), or NVML's recorded answers in a replay.

Two sources give the same :class:`NvmlAnswers`: :func:`query_nvml` asks the driver through a
``pynvml``-like library object (the real module, or a test's stand-in that raises
``pynvml.NVMLError`` with real error codes), and :func:`recorded_answers` reads
``run/nvidia-smi/<slot>/{memory.total,compute_cap,...}`` from a capture. :func:`nvidia_facts`
turns either into facts and warnings, so replay and live share one path. An NVML failure is a
warning with a fix, never a crash: VRAM is then null (unknown).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hwprobe._fs import RootFS
from hwprobe.gpu import GpuPart, GpuProbe
from hwprobe.pci import PciDevice
from hwprobe.tables import nvml_table

REPLAY_DIR = "/run/nvidia-smi"
MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuAnswer:
    """NVML's answers about one GPU (None where it did not answer)."""

    name: str | None = None
    memory_total: int | None = None  # bytes
    memory_free: int | None = None
    compute_cap: str | None = None  # "8.9"
    minor: int | None = None  # /dev/nvidia<minor>
    errors: tuple[str, ...] = ()  # NVML_ERROR_* names of the queries that failed


@dataclass(frozen=True)
class NvmlAnswers:
    """Everything NVML answered, GPUs keyed by normalized PCI slot ("0000:01:00.0")."""

    gpus: dict[str, GpuAnswer] = field(default_factory=dict)
    driver_version: str | None = None
    cuda_version: str | None = None


class NvmlFailure(Exception):
    """NVML could not be used at all; ``code`` is the NVML_ERROR_* name (or a local reason)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


NvmlQuery = Callable[[], NvmlAnswers]


def normalize_slot(bus_id: str) -> str:
    """NVML's "00000000:01:00.0" (8-digit domain) as sysfs's "0000:01:00.0"."""
    text = bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep or not rest:
        return text
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return text


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def error_name(exc: BaseException, lib: Any) -> str:
    """The NVML_ERROR_* name of an NVMLError, by its numeric value."""
    value = getattr(exc, "value", None)
    for name in nvml_table().errors:
        if getattr(lib, name, None) == value:
            return name
    return f"NVML error {value}"


def _ask(lib: Any, errors: list[str], call: Callable[[], Any]) -> Any:
    """One per-GPU query; an NVMLError is remembered, not raised."""
    try:
        return call()
    except lib.NVMLError as exc:
        errors.append(error_name(exc, lib))
        return None


def _gpu_answer(lib: Any, handle: Any) -> tuple[str | None, GpuAnswer]:
    errors: list[str] = []
    pci = _ask(lib, errors, lambda: lib.nvmlDeviceGetPciInfo(handle))
    memory = _ask(lib, errors, lambda: lib.nvmlDeviceGetMemoryInfo(handle))
    cap = _ask(lib, errors, lambda: lib.nvmlDeviceGetCudaComputeCapability(handle))
    cosmetic: list[str] = []  # a missing name or node number is not worth a warning
    name = _ask(lib, cosmetic, lambda: lib.nvmlDeviceGetName(handle))
    minor = _ask(lib, cosmetic, lambda: lib.nvmlDeviceGetMinorNumber(handle))
    slot = normalize_slot(_text(pci.busId)) if pci is not None else None
    answer = GpuAnswer(
        name=_text(name) if name is not None else None,
        memory_total=int(memory.total) if memory is not None else None,
        memory_free=int(memory.free) if memory is not None else None,
        compute_cap=f"{cap[0]}.{cap[1]}" if cap is not None else None,
        minor=int(minor) if minor is not None else None,
        errors=tuple(errors),
    )
    return slot, answer


def _import_pynvml() -> Any:
    try:
        import pynvml  # the nvidia-ml-py package
    except ImportError as exc:
        raise NvmlFailure("not-installed", str(exc)) from exc
    return pynvml


def query_nvml(lib: Any = None) -> NvmlAnswers:
    """Ask the NVIDIA driver through NVML. Raises :class:`NvmlFailure` when NVML is unusable."""
    if lib is None:
        lib = _import_pynvml()
    try:
        lib.nvmlInit()
    except lib.NVMLError as exc:
        raise NvmlFailure(error_name(exc, lib), str(exc)) from exc
    try:
        errors: list[str] = []
        driver = _ask(lib, errors, lib.nvmlSystemGetDriverVersion)
        cuda = _ask(lib, errors, lib.nvmlSystemGetCudaDriverVersion_v2)
        count = _ask(lib, errors, lib.nvmlDeviceGetCount)
        if count is None:
            raise NvmlFailure(errors[-1], "NVML could not count the GPUs")
        gpus: dict[str, GpuAnswer] = {}
        for index in range(int(count)):
            handle = _ask(lib, errors, functools.partial(lib.nvmlDeviceGetHandleByIndex, index))
            if handle is None:
                continue
            slot, answer = _gpu_answer(lib, handle)
            if slot:
                gpus[slot] = answer
        return NvmlAnswers(
            gpus=gpus,
            driver_version=_text(driver) if driver is not None else None,
            cuda_version=f"{int(cuda) // 1000}.{int(cuda) % 1000 // 10}" if cuda else None,
        )
    finally:
        with contextlib.suppress(lib.NVMLError):
            lib.nvmlShutdown()


def recorded_answers(fs: RootFS) -> NvmlAnswers:
    """NVML's answers as a capture recorded them (``run/nvidia-smi/<slot>/...``)."""
    gpus: dict[str, GpuAnswer] = {}
    driver = cuda = None
    for entry in fs.listdir(REPLAY_DIR):
        base = f"{REPLAY_DIR}/{entry}"
        if not fs.is_dir(base):
            continue

        def value(name: str, base: str = base) -> str | None:
            text = fs.text(f"{base}/{name}", source="nvml") if fs.exists(f"{base}/{name}") else None
            return text.strip() if text and text.strip() else None

        gpus[normalize_slot(entry)] = GpuAnswer(
            name=value("name"),
            memory_total=_mib(fs, f"{base}/memory.total", value("memory.total")),
            memory_free=_mib(fs, f"{base}/memory.free", value("memory.free")),
            compute_cap=value("compute_cap"),
        )
        driver = driver or value("driver_version")
        cuda = cuda or value("cuda_version")
    return NvmlAnswers(gpus=gpus, driver_version=driver, cuda_version=cuda)


def _mib(fs: RootFS, path: str, text: str | None) -> int | None:
    """nvidia-smi's "8188" or "8188 MiB" as bytes."""
    if text is None:
        return None
    words = text.split()
    if not words or not words[0].isdigit():
        fs.warn("nvml", f"{fs.path(path)} holds {text[:40]!r}, not a number of MiB", None)
        return None
    return int(words[0]) * MIB


def failure_warning(fs: RootFS, failure: NvmlFailure) -> None:
    """One warning saying why NVML failed and how to fix it."""
    table = nvml_table()
    if failure.code == "not-installed":
        fs.warn(
            "nvml",
            f"the nvidia-ml-py package is not installed ({failure.detail}), "
            "so NVIDIA GPU memory is unknown",
            "install nvidia-ml-py (`pip install nvidia-ml-py`)",
        )
        return
    entry = table.errors.get(failure.code)
    if entry is None:
        fs.warn(
            "nvml", table.fallback.message.format(error=failure.detail), table.fallback.resolution
        )
    else:
        fs.warn("nvml", f"{entry.message} (NVML: {failure.detail})", entry.resolution)


def nvidia_gpus(fs: RootFS, devices: Sequence[PciDevice], nvml: NvmlQuery | None) -> GpuProbe:
    """The probe of NVIDIA GPUs: NVML (``nvml``, else the driver or the capture's recording) is
    asked once about all of them, its warnings recorded before any other GPU's."""
    answers = gather_answers(fs, nvml)
    replay = not fs.is_live and nvml is None
    facts = nvidia_facts(fs, [d.ids.slot for d in devices], answers, replay=replay)
    return lambda device: facts[device.ids.slot]


def nvidia_facts(
    fs: RootFS, slots: list[str], answers: NvmlAnswers | NvmlFailure, *, replay: bool
) -> dict[str, GpuPart]:
    """Per PCI slot, what NVML (or its recording) says; warnings for every GPU it did not.

    Every NVIDIA GPU on the PCI bus has memory of its own, so each is ``integrated: false``
    even when NVML could not say how much.
    """
    if isinstance(answers, NvmlFailure):
        failure_warning(fs, answers)
        return {slot: GpuPart(integrated=False) for slot in slots}
    return {slot: _gpu_part(fs, slot, answers, replay=replay) for slot in slots}


def _gpu_part(fs: RootFS, slot: str, answers: NvmlAnswers, *, replay: bool) -> GpuPart:
    """One GPU's NVML facts (the driver's versions alone when NVML does not list it)."""
    answer = answers.gpus.get(slot)
    if answer is None:
        _missing_warning(fs, slot, replay=replay)
        answer = GpuAnswer()
    else:
        _answer_warnings(fs, slot, answer)
    return GpuPart(
        integrated=False,
        name=answer.name,
        vram=answer.memory_total,
        vram_free=answer.memory_free,
        compute_capability=answer.compute_cap,
        driver_version=answers.driver_version,
        cuda_version=answers.cuda_version,
        device_nodes=(f"/dev/nvidia{answer.minor}",) if answer.minor is not None else (),
    )


def _answer_warnings(fs: RootFS, slot: str, answer: GpuAnswer) -> None:
    """A warning for each query NVML refused about this GPU, or for a memory size not recorded."""
    for code in answer.errors:
        entry = nvml_table().errors.get(code, nvml_table().fallback)
        fs.warn(
            "nvml",
            f"NVIDIA GPU {slot}: {entry.message.format(error=code)} ({code})",
            entry.resolution,
        )
    if answer.memory_total is None and not answer.errors:
        fs.warn("nvml", f"no memory size recorded for the NVIDIA GPU at {slot}", None)


def _missing_warning(fs: RootFS, slot: str, *, replay: bool) -> None:
    if replay:
        fs.warn(
            "nvml",
            f"the capture has no NVML answers for the NVIDIA GPU at {slot} "
            f"({fs.path(REPLAY_DIR)}/{slot}/memory.total), so its VRAM is unknown",
            "record the machine with `hwprobe capture DIR` while the NVIDIA driver is loaded",
        )
    else:
        fs.warn(
            "nvml",
            f"NVML does not list the NVIDIA GPU at {slot}, so its VRAM is unknown",
            "check that the NVIDIA driver supports this GPU (`nvidia-smi -L`)",
        )


def gather_answers(fs: RootFS, query: NvmlQuery | None) -> NvmlAnswers | NvmlFailure:
    """NVML's answers: the given query, the live driver, or the capture's recording."""
    if query is None and not fs.is_live:
        return recorded_answers(fs)
    try:
        return (query or query_nvml)()
    except NvmlFailure as failure:
        return failure
    except Exception as exc:  # noqa: BLE001 - a broken binding must not crash the probe
        return NvmlFailure("NVML_ERROR_UNKNOWN", f"{type(exc).__name__}: {exc}")
