"""``hwprobe capture DIR``: record a machine in the layout ``hwprobe --root DIR`` replays.

It copies exactly the files the probes read (cpuinfo, meminfo, PCI ids and driver links, kfd
topology, DRM/accel links, Intel local-memory files), keeps symlinks as symlinks, and writes
what cannot be copied as the probes' replay files: NVML's answers as
``run/nvidia-smi/<slot>/...``, free disk as ``run/disk-stats.json``, OpenCL's answer as
``run/clinfo.json``, the Vulkan loader's device list as ``run/vulkan-devices.json`` beside the
drivers' ICD manifests. Capturing a recorded machine gives back the same profile, which the tests
check for every shared machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from hwprobe._fs import RootFS
from hwprobe.intel import CLINFO
from hwprobe.memory import DISK_STATS, SNAP_STORE, probe_disk
from hwprobe.nvidia import MIB, REPLAY_DIR, NvmlAnswers, NvmlFailure, NvmlQuery, gather_answers
from hwprobe.pci import PCI_DEVICES
from hwprobe.tables import pci_table, vulkan_table
from hwprobe.vulkan import DEVICES_FILE, ICD_DIR, icd_paths, query_live

PCI_FILES = (
    "class",
    "vendor",
    "device",
    "subsystem_vendor",
    "subsystem_device",
    "revision",
    "numa_node",
    "mem_info_vram_total",
)


class Recorder:
    """Copies files and links from a source root into a capture directory."""

    def __init__(self, source: RootFS, dest: Path) -> None:
        self.source = source
        self.dest = dest
        self.written: list[str] = []

    def copy(self, rel: str) -> None:
        """Copy one regular file when it exists and reads."""
        rel = rel.lstrip("/")
        if not self.source.exists(rel) or os.path.islink(self.source.path(rel)):
            return
        text = self.source.text(rel, source="capture")
        if text is not None:
            self.write(rel, text)

    def write(self, rel: str, text: str) -> None:
        """Write ``text`` at ``rel`` in the capture."""
        target = self.dest / rel.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        self.written.append(rel.lstrip("/"))

    def link(self, rel: str) -> str | None:
        """Record a link as a link (whatever form the source has it in); its resolved target."""
        rel = rel.lstrip("/")
        full = self.source.path(rel)
        if os.path.islink(full):
            raw = os.readlink(full)
        elif os.path.isfile(full):
            raw = (self.source.text(rel, source="capture") or "").strip()
        else:
            return None
        target = self.dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if not os.path.lexists(target):
            os.symlink(raw.lstrip("/") if raw.startswith("/") else raw, target)
            self.written.append(rel)
        return self.source.link(rel)


def _record_pci(rec: Recorder) -> None:
    fs = rec.source
    for slot in fs.listdir(PCI_DEVICES):
        base = f"{PCI_DEVICES}/{slot}"
        for name in PCI_FILES:
            rec.copy(f"{base}/{name}")
        rec.link(f"{base}/driver")
        for pattern in pci_table().intel_local_memory_files:
            head, _, name = pattern.rpartition("/")
            for sub in fs.listdir(f"{base}/{head.split('/')[0]}") if head else []:
                parent = f"{base}/{head.split('/')[0]}/{sub}"
                if "*" in head or sub == head.split("/")[-1]:
                    rec.copy(f"{parent}/{name}")


def _record_class_links(rec: Recorder, klass: str, prefix: str) -> None:
    """``sys/class/<klass>/<prefix>*`` links and their ``device`` links."""
    for name in rec.source.listdir(f"/sys/class/{klass}"):
        if not name.startswith(prefix):
            continue
        target = rec.link(f"/sys/class/{klass}/{name}") or f"sys/class/{klass}/{name}"
        rec.link(f"{target}/device")


def _record_kfd(rec: Recorder) -> None:
    nodes = "/sys/class/kfd/kfd/topology/nodes"
    for node in rec.source.listdir(nodes):
        for name in ("properties", "name", "gpu_id"):
            rec.copy(f"{nodes}/{node}/{name}")


def _record_accel_nodes(rec: Recorder) -> None:
    for name in rec.source.listdir("/dev/accel"):
        rec.write(f"/dev/accel/{name}", "")  # a stand-in: device nodes are not copied


def _record_disk(rec: Recorder) -> None:
    stats: dict[str, dict[str, int | None]] = {}
    for path in ("/", SNAP_STORE):
        disk = probe_disk(RootFS(rec.source.root), path)
        if disk.path == path and disk.total is not None:
            stats[path] = {"total": disk.total, "avail": disk.free}
    rec.write(DISK_STATS, json.dumps(stats, indent=2) + "\n")


def _record_nvml(rec: Recorder, nvml: NvmlQuery | None) -> None:
    answers = gather_answers(RootFS(rec.source.root), nvml)
    if isinstance(answers, NvmlFailure):
        return
    _write_answers(rec, answers)


def _write_answers(rec: Recorder, answers: NvmlAnswers) -> None:
    for slot, gpu in answers.gpus.items():
        base = f"{REPLAY_DIR}/{slot}"
        values = {
            "memory.total": gpu.memory_total // MIB if gpu.memory_total is not None else None,
            "memory.free": gpu.memory_free // MIB if gpu.memory_free is not None else None,
            "compute_cap": gpu.compute_cap,
            "name": gpu.name,
            "driver_version": answers.driver_version,
            "cuda_version": answers.cuda_version,
        }
        for name, value in values.items():
            if value is not None:
                rec.write(f"{base}/{name}", f"{value}\n")


def _record_clinfo(rec: Recorder) -> None:
    if not rec.source.is_live:
        rec.copy(CLINFO)
        return
    tool = shutil.which("clinfo")
    if tool is None:
        return
    try:
        done = subprocess.run(
            [tool, "--json"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return
    if done.returncode == 0 and done.stdout.strip().startswith("{"):
        rec.write(CLINFO, done.stdout)


def _record_vulkan(rec: Recorder) -> None:
    """The ICD manifests the loader reads (those found through the environment, such as a
    snap's gpu-2404 drivers, land in /usr/share/vulkan/icd.d, where a replay looks) and the
    device list: asked of the loader live, copied from a recording."""
    manifests = icd_paths(rec.source)
    standard = vulkan_table().icd_directories
    for manifest in manifests:
        text = rec.source.text(manifest, source="capture")
        folder, _, name = manifest.rpartition("/")
        if text is not None:
            rec.write(manifest if folder in standard else f"{ICD_DIR}/{name}", text)
    if not rec.source.is_live:
        rec.copy(DEVICES_FILE)
    elif manifests:
        rec.write(DEVICES_FILE, json.dumps(query_live(), indent=2) + "\n")


def capture(dest: str | Path, root: str = "/", *, nvml: NvmlQuery | None = None) -> list[str]:
    """Record the machine under ``root`` into ``dest``; the paths written, relative to it."""
    rec = Recorder(RootFS(root), Path(dest))
    for rel in ("/proc/cpuinfo", "/proc/meminfo", "/proc/sys/kernel/arch"):
        rec.copy(rel)
    _record_pci(rec)
    _record_class_links(rec, "drm", "renderD")
    _record_class_links(rec, "accel", "accel")
    _record_kfd(rec)
    _record_accel_nodes(rec)
    _record_disk(rec)
    if any(
        (rec.source.text(f"{PCI_DEVICES}/{s}/vendor", source="capture") or "").strip()
        in ("0x10de", "0x000010de")
        for s in rec.source.listdir(PCI_DEVICES)
    ):
        _record_nvml(rec, nvml)
    _record_clinfo(rec)
    _record_vulkan(rec)
    return rec.written
