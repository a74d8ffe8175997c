"""Broken and odd machines made by the tests: none may crash, each says what it could not read."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pynvml
import pytest
from support.hwprobe import Machine, x86_cpuinfo

import hwprobe
from hwprobe._fs import RootFS
from hwprobe.nvidia import query_nvml
from hwprobe.pci import classify, read_device
from hwprobe.probes import probe_gpus, probe_host


def test_container_without_sys_has_no_gpus_and_says_why(tmp_path: Path) -> None:
    profile = hwprobe.probe(str(Machine(tmp_path).basics().root))
    assert (profile.gpus, profile.npus, profile.displays) == ((), (), ())
    assert [w.source for w in profile.warnings] == ["pci"]
    assert "no PCI bus" in profile.warnings[0].message
    assert profile.x86_64_level == "x86-64-v3"


def test_empty_cpuinfo_keeps_architecture_and_warns(tmp_path: Path) -> None:
    profile = hwprobe.probe(str(Machine(tmp_path).basics(cpuinfo="").root))
    assert [(c.architecture, c.threads, c.flags) for c in profile.cpus] == [("amd64", None, ())]
    assert [w.source for w in profile.warnings] == ["cpu", "pci"]
    assert "lists no processors" in profile.warnings[0].message


def test_garbage_cpuinfo_without_kernel_arch_gives_no_cpu_and_a_warning(tmp_path: Path) -> None:
    machine = Machine(tmp_path)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_bytes(bytes(range(256)) * 20)
    profile = hwprobe.probe(str(machine.root))
    assert profile.cpus == ()
    assert [w.source for w in profile.warnings] == ["cpu", "memory", "pci"]


def test_cpuinfo_that_is_a_directory_is_unreadable_not_a_crash(tmp_path: Path) -> None:
    machine = Machine(tmp_path).basics()
    os.remove(tmp_path / "proc/cpuinfo")
    (tmp_path / "proc/cpuinfo").mkdir()
    profile = hwprobe.probe(str(machine.root))
    assert "is a directory, not a file" in profile.warnings[0].message


def test_meminfo_dangling_link_is_reported(tmp_path: Path) -> None:
    machine = Machine(tmp_path).basics()
    os.remove(tmp_path / "proc/meminfo")
    machine.link("proc/meminfo", "/nowhere/meminfo")
    profile = hwprobe.probe(str(machine.root))
    assert profile.memory.total is None
    assert [w.source for w in profile.warnings] == ["memory", "memory", "pci"]
    assert "dangling symbolic link" in profile.warnings[0].message


def test_fifo_in_place_of_pci_class_does_not_hang(tmp_path: Path) -> None:
    machine = Machine(tmp_path).basics().pci("0000:01:00.0", 0x030000, 0x10DE, 0x2684)
    fifo = tmp_path / "sys/bus/pci/devices/0000:01:00.0/class"
    os.remove(fifo)
    os.mkfifo(fifo)
    profile = hwprobe.probe(str(machine.root))
    assert profile.gpus == ()
    assert "is a named pipe" in profile.warnings[0].message


def test_garbage_pci_vendor_skips_the_device(tmp_path: Path) -> None:
    machine = Machine(tmp_path).basics().pci("0000:01:00.0", 0x030000, 0x10DE, 0x2684)
    (tmp_path / "sys/bus/pci/devices/0000:01:00.0/vendor").write_text("nvidia!\n")
    profile = hwprobe.probe(str(machine.root))
    assert profile.gpus == ()
    assert "not a number" in profile.warnings[0].message


def _npu_machine(tmp_path: Path, driver: str | None, other_driver: bool = True) -> Machine:
    machine = Machine(tmp_path).basics()
    machine.pci("0000:00:0b.0", 0x120000, 0x8086, 0x7D1D, driver=driver, revision="0x04")
    machine.pci(
        "0000:00:14.0", 0x0C0330, 0x8086, 0x7E7D, driver="xhci_hcd" if other_driver else None
    )
    return machine


def test_intel_npu_with_driver_bound_and_accel_node(tmp_path: Path) -> None:
    machine = _npu_machine(tmp_path, "intel_vpu")
    machine.link("sys/class/accel/accel0", "../../devices/pci0000:00/0000:00:0b.0/accel/accel0")
    machine.link("sys/devices/pci0000:00/0000:00:0b.0/accel/accel0/device", "../../../0000:00:0b.0")
    machine.file("dev/accel/accel0", "")
    profile = hwprobe.probe(str(machine.root))
    (npu,) = profile.npus
    assert (npu.vendor, npu.driver, npu.driver_loaded, npu.device_nodes, npu.runtimes) == (
        "intel",
        "intel_vpu",
        True,
        ("/dev/accel/accel0",),
        ("openvino-npu",),
    )
    assert npu.pci is not None and (npu.pci.driver, npu.pci.revision) == ("intel_vpu", "0x04")
    assert profile.warnings == ()


def test_intel_npu_without_driver_bound_says_how_to_load_it(tmp_path: Path) -> None:
    profile = hwprobe.probe(str(_npu_machine(tmp_path, None).root))
    (npu,) = profile.npus
    assert (npu.driver_loaded, npu.device_nodes) == (False, ())
    (warning,) = profile.warnings
    assert (
        warning.resolution
        == "load the driver: `sudo modprobe intel_vpu` (and install its firmware)"
    )


def test_npu_bound_to_vfio_is_not_loaded(tmp_path: Path) -> None:
    profile = hwprobe.probe(str(_npu_machine(tmp_path, "vfio-pci").root))
    assert profile.npus[0].driver_loaded is False
    assert "(bound to vfio-pci)" in profile.warnings[0].message


def test_amd_npu_is_llm_capable_but_no_runtime_here_drives_it(tmp_path: Path) -> None:
    machine = (
        Machine(tmp_path).basics().pci("0000:c5:00.1", 0x118000, 0x1022, 0x17F0, driver="amdxdna")
    )
    (npu,) = hwprobe.probe(str(machine.root)).npus
    assert (npu.vendor, npu.driver, npu.driver_loaded, npu.runtimes, npu.llm_capable) == (
        "amd",
        "amdxdna",
        True,
        (),
        True,
    )


def test_vision_only_and_unknown_accelerators_are_marked_not_llm_capable(tmp_path: Path) -> None:
    machine = Machine(tmp_path).basics()
    machine.pci("0000:02:00.0", 0x120000, 0x1E60, 0x2864)
    machine.pci("0000:03:00.0", 0x120000, 0x1FFF, 0x0001)
    profile = hwprobe.probe(str(machine.root))
    assert [(n.vendor, n.llm_capable, n.runtimes, n.note) for n in profile.npus] == [
        ("hailo", False, (), "runs vision models only; no LLM runtime drives it"),
        ("0x1fff", False, (), "not in hwprobe's table: no known runtime drives it for LLMs"),
    ]


def test_virtual_and_unknown_display_chips_are_displays(tmp_path: Path) -> None:
    machine = Machine(tmp_path).basics()
    machine.pci("0000:00:01.0", 0x030000, 0x1234, 0x1111)
    machine.pci("0000:00:02.0", 0x030000, 0x1EEE, 0x0001)
    profile = hwprobe.probe(str(machine.root))
    assert profile.gpus == ()
    assert [(d.vendor, d.reason) for d in profile.displays] == [
        ("qemu", "emulated video (virtual machine); cannot run models"),
        ("0x1eee", "vendor 0x1eee is not known to run models"),
    ]


def test_arm64_big_little_host_gives_one_entry_per_core_kind(tmp_path: Path) -> None:
    little = "Features\t: fp asimd asimdhp asimddp\nCPU implementer\t: 0x41\nCPU part\t: 0xd05\n"
    big = (
        "Features\t: fp asimd asimdhp asimddp i8mm bf16 sve sve2\n"
        "CPU implementer\t: 0x41\nCPU part\t: 0xd4f\n"
    )
    cpuinfo = "\n".join(
        [f"processor\t: {i}\n{little}" for i in range(4)]
        + [f"processor\t: {i}\n{big}" for i in (4, 5)]
    )
    profile = hwprobe.probe(str(Machine(tmp_path).basics("aarch64", cpuinfo).root))
    assert [(c.model_name, c.arm64_features, c.threads) for c in profile.cpus] == [
        ("Cortex-A55", ("asimd", "dotprod", "fp16"), 4),
        ("Neoverse-V2", ("asimd", "bf16", "dotprod", "fp16", "i8mm", "sve", "sve2"), 2),
    ]
    assert profile.threads == 6


def test_riscv64_host_without_kernel_arch_is_told_by_its_isa(tmp_path: Path) -> None:
    cpuinfo = "".join(f"processor\t: {i}\nisa\t: rv64gcv\nmvendorid\t: 0x5b7\n\n" for i in range(2))
    machine = Machine(tmp_path).basics("riscv64", cpuinfo)
    os.remove(tmp_path / "proc/sys/kernel/arch")
    (cpu,) = hwprobe.probe(str(machine.root)).cpus
    assert (cpu.architecture, cpu.vendor, cpu.riscv_isa, cpu.threads) == (
        "riscv64",
        "T-Head",
        "rv64gcv",
        2,
    )


def test_amd_apu_told_by_kfd_cpu_cores_shares_memory(tmp_path: Path) -> None:
    machine = Machine(tmp_path).basics()
    machine.pci("0000:c4:00.0", 0x030000, 0x1002, 0x9999, mem_info_vram_total="536870912")
    machine.file(
        "sys/class/kfd/kfd/topology/nodes/1/properties",
        "cpu_cores_count 16\nsimd_count 24\ngfx_target_version 110003\n"
        "domain 0\nlocation_id 50176\n",
    )
    (gpu,) = hwprobe.probe(str(machine.root)).gpus
    assert (gpu.integrated, gpu.unified_memory, gpu.vram, gpu.gfx) == (
        True,
        True,
        536870912,
        "gfx1103",
    )


def test_intel_arc_with_xe_reports_local_memory(tmp_path: Path) -> None:
    machine = Machine(tmp_path).basics()
    machine.pci("0000:03:00.0", 0x030000, 0x8086, 0xE20B, driver="xe", numa_node="-1")
    machine.file("sys/bus/pci/devices/0000:03:00.0/tile0/physical_vram_size_bytes", "12884901888")
    (gpu,) = hwprobe.probe(str(machine.root)).gpus
    assert (gpu.integrated, gpu.vram) == (False, 12884901888)
    assert gpu.pci is not None and (gpu.pci.driver, gpu.pci.numa_node) == ("xe", None)


def test_a_gpu_vendor_without_a_probe_gets_the_pci_tables_facts_alone(tmp_path: Path) -> None:
    machine = Machine(tmp_path).basics().pci("0000:01:00.0", 0x030000, 0x1002, 0x73E1)
    fs = RootFS(str(machine.root))
    device = read_device(fs, "0000:01:00.0")
    item = classify(device) if device else None
    assert item is not None and item.vendor is not None
    other = dataclasses.replace(item, vendor=dataclasses.replace(item.vendor, name="newgpu"))
    (gpu,) = probe_gpus(fs, [other], None)
    assert (gpu.vendor, gpu.name, gpu.integrated, gpu.unified_memory, gpu.vram) == (
        "newgpu",
        "Radeon PRO W6600M",
        None,
        False,
        None,
    )
    assert fs.warnings == []  # no vendor source was read for it


def _nvidia_machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path).basics().pci("0000:01:00.0", 0x030200, 0x10DE, 0x28B9, numa_node="0")


def test_nvidia_replay_reads_recorded_nvml_answers(tmp_path: Path) -> None:
    machine = _nvidia_machine(tmp_path)
    machine.file("run/nvidia-smi/00000000:01:00.0/memory.total", "8188 MiB\n")
    machine.file("run/nvidia-smi/00000000:01:00.0/compute_cap", "8.9\n")
    profile = hwprobe.probe(str(machine.root))
    (gpu,) = profile.gpus
    assert (gpu.vendor, gpu.integrated, gpu.vram, gpu.compute_capability) == (
        "nvidia",
        False,
        8188 * 1024 * 1024,
        "8.9",
    )
    assert profile.warnings == ()


class FakeNvml:
    """NVML's library answer layer without a GPU: real pynvml error classes and constants."""

    NVMLError = pynvml.NVMLError

    def __init__(self, init_error: int | None = None, memory_error: int | None = None) -> None:
        self.init_error = init_error
        self.memory_error = memory_error
        self.shut_down = False

    def __getattr__(self, name: str) -> Any:
        return getattr(pynvml, name)  # the NVML_ERROR_* constants

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.120"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 12040

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetPciInfo(self, handle: int) -> Any:
        return type("Pci", (), {"busId": b"00000000:01:00.0"})()

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        if self.memory_error is not None:
            raise pynvml.NVMLError(self.memory_error)
        return type("Mem", (), {"total": 8585740288, "free": 8000000000})()

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return (8, 9)

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA RTX 2000 Ada Generation Laptop GPU"

    def nvmlDeviceGetMinorNumber(self, handle: int) -> int:
        return 0


def test_nvml_answers_become_facts_through_the_live_path(tmp_path: Path) -> None:
    fake = FakeNvml()
    profile = probe_host(str(_nvidia_machine(tmp_path).root), nvml=lambda: query_nvml(fake))
    (gpu,) = profile.gpus
    assert (gpu.name, gpu.vram, gpu.vram_free, gpu.compute_capability) == (
        "NVIDIA RTX 2000 Ada Generation Laptop GPU",
        8585740288,
        8000000000,
        "8.9",
    )
    assert (gpu.driver_version, gpu.cuda_version, gpu.device_nodes) == (
        "550.120",
        "12.4",
        ("/dev/nvidia0",),
    )
    assert fake.shut_down and profile.warnings == ()


@pytest.mark.parametrize(
    ("code", "fix"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "install the NVIDIA driver"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "sudo modprobe nvidia"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "/dev/nvidia*"),
        (pynvml.NVML_ERROR_UNKNOWN, "nvidia-smi"),
        (pynvml.NVML_ERROR_GPU_IS_LOST, "Xid"),
        (pynvml.NVML_ERROR_INSUFFICIENT_POWER, "power cables"),
    ],
    ids=["library-not-found", "driver-not-loaded", "no-permission", "unknown", "gpu-lost", "power"],
)
def test_nvml_init_error_gives_unknown_vram_and_a_fix(tmp_path: Path, code: int, fix: str) -> None:
    profile = probe_host(
        str(_nvidia_machine(tmp_path).root), nvml=lambda: query_nvml(FakeNvml(code))
    )
    (gpu,) = profile.gpus
    assert (gpu.vendor, gpu.vram, gpu.compute_capability) == ("nvidia", None, None)
    (warning,) = profile.warnings
    assert warning.source == "nvml"
    assert str(pynvml.NVMLError(code)) in warning.message
    assert warning.resolution is not None and fix in warning.resolution


def test_nvml_memory_query_refused_for_one_gpu_keeps_the_rest(tmp_path: Path) -> None:
    fake = FakeNvml(memory_error=pynvml.NVML_ERROR_NO_PERMISSION)
    profile = probe_host(str(_nvidia_machine(tmp_path).root), nvml=lambda: query_nvml(fake))
    (gpu,) = profile.gpus
    assert (gpu.vram, gpu.compute_capability) == (None, "8.9")
    assert [w.message for w in profile.warnings] == [
        "NVIDIA GPU 0000:01:00.0: no permission to query the NVIDIA driver, so GPU memory is "
        "unknown (NVML_ERROR_NO_PERMISSION)"
    ]


def test_nvml_binding_missing_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)
    profile = probe_host(str(_nvidia_machine(tmp_path).root), nvml=query_nvml)
    assert profile.gpus[0].vram is None
    assert profile.warnings[0].resolution == "install nvidia-ml-py (`pip install nvidia-ml-py`)"


def test_real_nvml_without_a_driver_here_fails_cleanly() -> None:
    """This machine has no NVIDIA driver: the real binding must answer with an NVMLFailure."""
    from hwprobe.nvidia import NvmlFailure

    with pytest.raises(NvmlFailure) as info:
        query_nvml()
    assert info.value.code in ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED")


def test_disk_path_under_root_without_recording_uses_statvfs(tmp_path: Path) -> None:
    machine = Machine(tmp_path).basics()
    (tmp_path / "var/lib/snapd/snaps").mkdir(parents=True)
    disk = hwprobe.probe(str(machine.root)).disk
    assert disk is not None and disk.path == "/var/lib/snapd/snaps"
    assert disk.total is not None and disk.free is not None and 0 <= disk.free <= disk.total


def test_many_threads_cpuinfo_counts_cores(tmp_path: Path) -> None:
    (cpu,) = hwprobe.probe(str(Machine(tmp_path).basics(cpuinfo=x86_cpuinfo(6)).root)).cpus
    assert (cpu.threads, cpu.cores, cpu.x86_64_level) == (6, 6, "x86-64-v3")
