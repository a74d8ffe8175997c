"""The conditions a manifest writes for an engine, other than its device's.

A CPU flag, x86-64 level or architecture that could not be read rejects the engine: guessing
wrong there is a SIGILL at load time, and the reason says "unknown" so the fix is to probe
properly, not to edit the manifest. GPU and NPU conditions are judged with the device choice
(:mod:`snapbuild.selection.devices`), because they must hold for one and the same device; inside
``any-of`` they only need some device to meet them.
"""

from __future__ import annotations

from collections.abc import Sequence

from hwprobe.profile import HostProfile
from snapbuild.manifest.model import Condition
from snapbuild.selection.devices import gpu_problems
from snapbuild.selection.hardware import HardwareTable
from snapbuild.selection.verdicts import Verdicts


def _best_simd(flags: frozenset[str], ladder: Sequence[str]) -> str:
    best = next((f for f in ladder if f in flags), None)
    return best.upper() if best else "none of " + ", ".join(f.upper() for f in ladder[:3])


def _check_flags(
    v: Verdicts, wanted: Sequence[str], have: frozenset[str], ladder: Sequence[str], what: str
) -> None:
    names = ", ".join(f.upper() for f in wanted)
    if not have:
        v.fail(f"needs {names}: {what} flags unknown (no CPU facts); not risking SIGILL")
        return
    missing = [f for f in wanted if f not in have]
    if missing:
        lacking = ", ".join(f.upper() for f in missing)
        v.fail(f"needs {lacking}: CPU has {_best_simd(have, ladder)} only")
    else:
        v.ok(f"CPU has {names}")


def check_architecture(
    v: Verdicts,
    arch: str | None,
    allowed: Sequence[str],
    *,
    unknown: str,
    passed: str,
    failed: str,
) -> None:
    """``arch`` must be one of ``allowed``; an unknown one fails (a wrong guess cannot load)."""
    if arch is None:
        v.fail(unknown)
    else:
        v.check(arch in allowed, passed if arch in allowed else failed)


def judge_condition(v: Verdicts, cond: Condition, host: HostProfile, hw: HardwareTable) -> bool:
    """Judge one non-device condition; True when it holds. GPU/NPU ones are judged by the
    device choice (they must hold for one and the same device). ``hw``'s flag ladders name the
    best extension a CPU has when one is missing."""
    before = len(v.blockers)
    arch = host.architecture
    if cond.architecture is not None:
        allowed = ", ".join(cond.architecture)
        check_architecture(
            v,
            arch,
            cond.architecture,
            unknown=f"needs {allowed}: architecture unknown (no CPU facts)",
            passed=f"runs on {allowed}: machine is {arch}",
            failed=f"needs {allowed}: machine is {arch}",
        )
    elif cond.cpu_flags is not None:
        if arch is not None and arch not in ("amd64", "i386"):
            v.fail(
                f"needs x86 flags {', '.join(f.upper() for f in cond.cpu_flags)}: machine is {arch}"
            )
        else:
            _check_flags(v, cond.cpu_flags, host.cpu_flags, hw.flag_ladders.x86, "CPU")
    elif cond.arm64_features is not None:
        have = frozenset(f for c in host.cpus for f in (*c.arm64_features, *c.flags))
        if arch is not None and arch != "arm64":
            v.fail(f"needs arm64 features {', '.join(cond.arm64_features)}: machine is {arch}")
        else:
            _check_flags(v, cond.arm64_features, have, hw.flag_ladders.arm64, "arm64")
    elif cond.x86_64_level is not None:
        level = host.x86_64_level
        if level is None:
            v.fail(f"needs {cond.x86_64_level}: CPU level unknown; not risking SIGILL")
        else:
            v.check(
                level >= cond.x86_64_level,
                f"CPU is {level} ≥ {cond.x86_64_level}"
                if level >= cond.x86_64_level
                else f"needs {cond.x86_64_level}: CPU is {level}",
            )
    return len(v.blockers) == before


def judge_any_of(
    v: Verdicts, conds: Sequence[Condition], host: HostProfile, hw: HardwareTable
) -> None:
    """At least one of ``conds`` holds; a device condition only needs some device to meet it."""
    if not conds:
        return
    trial = Verdicts()
    for cond in conds:
        if cond.gpu is not None or cond.npu is not None:
            ok = _device_condition_holds(cond, host, hw)
            trial.check(ok, f"{'a matching GPU' if cond.gpu else 'a matching NPU'}")
        else:
            judge_condition(trial, cond, host, hw)
    if len(trial.blockers) < len(conds):
        v.ok("one of: " + "; ".join(r for r in trial.reasons if r not in trial.blockers))
    else:
        v.fail("needs one of: " + "; ".join(trial.blockers))


def _device_condition_holds(cond: Condition, host: HostProfile, hw: HardwareTable) -> bool:
    if cond.gpu is not None:
        return any(not gpu_problems(g, cond.gpu, (), hw) for g in host.gpus)
    if cond.npu is not None:
        return any(n.vendor == cond.npu.vendor and n.driver_loaded for n in host.npus)
    return False
