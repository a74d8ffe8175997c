"""Whole-process `hwprobe --json` against whole-process py-cpuinfo `get_cpu_info()`.

Runs are interleaved (so machine load hits both alike) and the median of each is compared.
Target: hwprobe's default probe at least 5x faster. Usage: python benchmarks/probe_speed.py [N]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

HWPROBE = [sys.executable, "-c", "from runtimes.probe_cli import main; main()", "--json"]
PY_CPUINFO = [sys.executable, "-c", "import cpuinfo; cpuinfo.get_cpu_info()"]


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    timed(HWPROBE)  # warm the page cache and bytecode
    ours, theirs = [], []
    for _ in range(runs):
        ours.append(timed(HWPROBE))
        theirs.append(timed(PY_CPUINFO))
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"hwprobe --json:        median {a * 1000:.0f} ms over {runs} runs")
    print(f"py-cpuinfo get_cpu_info: median {b * 1000:.0f} ms over {runs} runs")
    print(f"ratio: hwprobe is {b / a:.1f}x faster (target >= 5x)")


if __name__ == "__main__":
    main()
