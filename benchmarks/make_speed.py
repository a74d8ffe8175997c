"""How long `snapbuild make gemma3` takes: the whole process and the in-process work.

Target: well under a second for the whole process. Prints the median of several runs of each,
measured in this run, and the ratio to the one-second budget.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 7
BUDGET_S = 1.0


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _process(_out: Path, argv: list[str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one run of the console script."""
    cpu, start = _children_cpu(), time.perf_counter()
    subprocess.run(
        [str(Path(sys.executable).parent / "snapbuild"), *argv],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start, _children_cpu() - cpu


def _in_process(out: Path) -> float:
    from snapbuild.project.builder import make, summary_text

    start = time.perf_counter()
    summary_text(make("gemma3", out))
    return time.perf_counter() - start


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "gemma3-snap"
        _in_process(out)  # warm the imports and caches once, as a long-lived caller would
        whole = [_process(out, ["make", "gemma3", "-o", str(out)]) for _ in range(RUNS)]
        start_only = [_process(out, ["--version"]) for _ in range(RUNS)]
        inside = [_in_process(out) for _ in range(RUNS)]
    wall, cpu = (statistics.median(x) for x in zip(*whole, strict=True))
    base_wall, base_cpu = (statistics.median(x) for x in zip(*start_only, strict=True))
    i = statistics.median(inside)
    print(f"snapbuild make gemma3, median of {RUNS} runs (machine load matters: see cpu)")
    print(
        f"  whole process: {wall * 1000:.0f} ms wall, {cpu * 1000:.0f} ms cpu "
        f"({wall / BUDGET_S:.2f} / {cpu / BUDGET_S:.2f} of the 1 s budget)"
    )
    print(
        f"  `snapbuild --version` alone: {base_wall * 1000:.0f} ms wall, "
        f"{base_cpu * 1000:.0f} ms cpu (interpreter and CLI start)"
    )
    print(f"  in process:    {i * 1000:.1f} ms wall ({i / BUDGET_S:.3f} of the 1 s budget)")


if __name__ == "__main__":
    main()
