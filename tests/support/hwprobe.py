"""Builders of small machine captures for hwprobe's tests (odd and broken machines)."""

from __future__ import annotations

import os
from pathlib import Path

X86_FLAGS = (
    "fpu cx8 cmov mmx fxsr sse sse2 syscall lm cx16 lahf_lm popcnt sse4_1 sse4_2 ssse3 "
    "avx avx2 bmi1 bmi2 f16c fma abm movbe xsave"
)


def x86_cpuinfo(threads: int = 2, flags: str = X86_FLAGS, model: str = "Test CPU") -> str:
    """A cpuinfo with ``threads`` processors, one core each."""
    blocks = [
        f"processor\t: {i}\nvendor_id\t: GenuineIntel\nmodel name\t: {model}\n"
        f"physical id\t: 0\ncore id\t\t: {i}\nflags\t\t: {flags}\n"
        for i in range(threads)
    ]
    return "\n".join(blocks)


class Machine:
    """A capture under a temporary root, built file by file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def file(self, rel: str, text: str) -> Path:
        """Write a file (parents created)."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def link(self, rel: str, target: str) -> None:
        """Make a symlink (parents created)."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)

    def basics(self, arch: str = "x86_64", cpuinfo: str | None = None) -> Machine:
        """cpuinfo, meminfo and the kernel's architecture."""
        self.file("proc/cpuinfo", x86_cpuinfo() if cpuinfo is None else cpuinfo)
        self.file("proc/meminfo", "MemTotal: 8000000 kB\nMemAvailable: 4000000 kB\n")
        self.file("proc/sys/kernel/arch", arch + "\n")
        return self

    def pci(
        self,
        slot: str,
        klass: int,
        vendor: int,
        device: int,
        *,
        driver: str | None = None,
        **extra: str,
    ) -> Machine:
        """One PCI function, in sysfs's formats; ``driver`` makes the driver link."""
        base = f"sys/bus/pci/devices/{slot}"
        self.file(f"{base}/class", f"0x{klass:06x}\n")
        self.file(f"{base}/vendor", f"0x{vendor:04x}\n")
        self.file(f"{base}/device", f"0x{device:04x}\n")
        for name, value in extra.items():
            self.file(f"{base}/{name}", value + "\n")
        if driver:
            self.link(f"{base}/driver", f"../../../bus/pci/drivers/{driver}")
        return self
