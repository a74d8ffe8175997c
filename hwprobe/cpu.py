"""CPU facts from ``/proc/cpuinfo`` (and ``/proc/sys/kernel/arch``).

cpuinfo is read directly: it is one small file, where py-cpuinfo spawns processes and takes over
a second. py-cpuinfo stays as the fallback for a live system without ``/proc/cpuinfo``.
Processors are grouped into *kinds* by their identity (vendor, model, arm64 implementer/part,
RISC-V ISA), so big.LITTLE arm64 gives one entry per core type. Flags of a kind are the ones
every processor of the kind has: the kernel clears a few housekeeping flags on single CPUs
(``intel_ppin`` on cpu0), which must not split one kind in two.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable

from hwprobe._fs import RootFS
from hwprobe.profile import CpuFacts, X86Level
from hwprobe.tables import cpu_table

Block = dict[str, str]


def parse_cpuinfo(text: str) -> list[Block]:
    """Split cpuinfo into per-processor blocks of ``key: value`` (blocks without a processor
    number, like the Raspberry Pi's board lines, are dropped)."""
    blocks: list[Block] = []
    current: Block = {}
    for line in text.splitlines() + [""]:
        if not line.strip():
            if "processor" in current:
                blocks.append(current)
            current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current.setdefault(key.strip(), value.strip())
    return blocks


def architecture(fs: RootFS, blocks: list[Block]) -> str | None:
    """The snap architecture: the kernel's word first, then what cpuinfo looks like."""
    arches = cpu_table().architectures
    kernel = fs.text("/proc/sys/kernel/arch", source="cpu")
    if kernel and kernel.strip() in arches:
        return arches[kernel.strip()]
    guessed = _arch_from_cpuinfo(blocks)
    if guessed:
        return guessed
    if fs.is_live:
        return arches.get(platform.machine())
    return None


def _arch_from_cpuinfo(blocks: list[Block]) -> str | None:
    if not blocks:
        return None
    first = blocks[0]
    if "flags" in first:
        return "amd64" if "lm" in first["flags"].split() else "i386"
    if first.get("isa", "").startswith("rv64"):
        return "riscv64"
    if "CPU implementer" in first or "Features" in first:
        return (
            "arm64"
            if first.get("CPU architecture", "8").strip() in ("8", "9", "AArch64")
            else "armhf"
        )
    return None


def x86_64_level(flags: Iterable[str]) -> X86Level | None:
    """The highest x86-64 level whose flags (and all lower levels' flags) are present."""
    have = set(flags)
    level: X86Level | None = None
    for entry in cpu_table().x86_64_levels:
        if not have.issuperset(entry.flags):
            break
        level = entry.level
    return level


def _kind_key(block: Block) -> tuple[str | None, ...]:
    return (
        block.get("vendor_id"),
        block.get("model name"),
        block.get("CPU implementer", "").lower() or None,
        block.get("CPU part", "").lower() or None,
        block.get("isa"),
        block.get("mvendorid"),
        block.get("cpu"),
    )


def _common_words(blocks: list[Block], key: str) -> tuple[str, ...]:
    sets = [set(b.get(key, "").split()) for b in blocks]
    return tuple(sorted(set.intersection(*sets))) if sets else ()


def _cores(blocks: list[Block]) -> int | None:
    ids = {(b.get("physical id"), b.get("core id")) for b in blocks}
    return len(ids) if all(b.get("core id") is not None for b in blocks) else None


def _kind_facts(arch: str, blocks: list[Block]) -> CpuFacts:
    first = blocks[0]
    table = cpu_table()
    facts: dict[str, object] = {
        "architecture": arch,
        "threads": len(blocks),
        "cores": _cores(blocks),
    }
    if "flags" in first:
        flags = _common_words(blocks, "flags")
        facts.update(vendor=first.get("vendor_id"), model_name=first.get("model name"), flags=flags)
        if arch == "amd64":
            facts["x86_64_level"] = x86_64_level(flags)
    elif "Features" in first or "CPU implementer" in first:
        implementer = first.get("CPU implementer", "").lower() or None
        part = first.get("CPU part", "").lower() or None
        features = _common_words(blocks, "Features")
        wanted = table.arm64_llm_features
        facts.update(
            vendor=table.arm64_implementers.get(implementer or "", implementer),
            model_name=table.arm64_parts.get(implementer or "", {}).get(part or ""),
            flags=features,
            arm64_implementer=implementer,
            arm64_part=part,
            arm64_features=tuple(sorted({wanted[f] for f in features if f in wanted})),
        )
    elif "isa" in first:
        mvendor = first.get("mvendorid", "").lower()
        facts.update(
            vendor=table.riscv_vendors.get(mvendor, mvendor or None),
            model_name=first.get("uarch") or first.get("model name"),
            riscv_isa=first.get("isa"),
        )
    else:
        facts.update(model_name=first.get("model name") or first.get("cpu"))
    return CpuFacts(**facts)  # type: ignore[arg-type]


def cpus_from_cpuinfo(arch: str, blocks: list[Block]) -> tuple[CpuFacts, ...]:
    """One :class:`CpuFacts` per kind of processor, in the order cpuinfo lists them."""
    kinds: dict[tuple[str | None, ...], list[Block]] = {}
    for block in blocks:
        kinds.setdefault(_kind_key(block), []).append(block)
    return tuple(_kind_facts(arch, group) for group in kinds.values())


def probe_cpus(fs: RootFS) -> tuple[CpuFacts, ...]:
    """CPU facts of the machine under ``fs``; warnings say what could not be read."""
    text = fs.text("/proc/cpuinfo", source="cpu")
    if text is None and fs.is_live and not fs.exists("/proc/cpuinfo"):
        return _from_py_cpuinfo(fs)
    blocks = parse_cpuinfo(text or "")
    arch = architecture(fs, blocks)
    if arch is None:
        fs.warn(
            "cpu",
            f"could not tell the CPU architecture from {fs.path('/proc/cpuinfo')} "
            f"or {fs.path('/proc/sys/kernel/arch')}",
            "make sure /proc is mounted (or captured) and readable",
        )
        return ()
    if not blocks:
        fs.warn(
            "cpu",
            f"{fs.path('/proc/cpuinfo')} lists no processors, "
            "so the CPU model, flags and counts are unknown",
            "make sure /proc is mounted (or captured) and readable",
        )
        return (CpuFacts(architecture=arch, threads=_live_threads(fs)),)
    cpus = cpus_from_cpuinfo(arch, blocks)
    if arch == "amd64" and any(c.x86_64_level is None for c in cpus):
        fs.warn(
            "cpu",
            "the CPU flags do not even cover the x86-64 baseline, so the x86-64 level is unknown",
            "the cpuinfo looks truncated; check /proc/cpuinfo (or the capture)",
        )
    return cpus


def _live_threads(fs: RootFS) -> int | None:
    return os.cpu_count() if fs.is_live else None


def _from_py_cpuinfo(fs: RootFS) -> tuple[CpuFacts, ...]:
    """The slow fallback for a live system without /proc/cpuinfo (py-cpuinfo runs tools)."""
    try:
        import cpuinfo  # type: ignore[import-untyped]

        info = cpuinfo.get_cpu_info()
    except Exception as exc:  # noqa: BLE001 - a fallback must never crash the probe
        fs.warn("cpu", f"/proc/cpuinfo is missing and py-cpuinfo failed: {exc}", "mount /proc")
        return ()
    arch = cpu_table().architectures.get(platform.machine())
    if arch is None:
        fs.warn("cpu", f"unknown CPU architecture {platform.machine()!r}", None)
        return ()
    flags = tuple(sorted(info.get("flags", [])))
    return (
        CpuFacts(
            architecture=arch,
            vendor=info.get("vendor_id_raw"),
            model_name=info.get("brand_raw"),
            flags=flags,
            x86_64_level=x86_64_level(flags) if arch == "amd64" else None,
            threads=info.get("count"),
        ),
    )
