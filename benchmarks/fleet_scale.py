"""Fleet planning at scale: 100,000 hosts in JSON Lines, the whole ``snapbuild fleet plan`` process.

The fleet is built from the shared recorded machines (tests/data/machines), varied into a few
hundred distinct kinds of hardware (RAM sizes, free memory, NPU driver state), and spread over
100,000 hostnames. The script runs the real command as a subprocess (interpreter start, imports,
reading, selection, advice, JSON output) and prints hosts per second against the 10,000 hosts/s
target, then the in-process phases so a regression shows where it went.

    python benchmarks/fleet_scale.py [--hosts 100000] [--model gemma3]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hwprobe

ROOT = Path(__file__).resolve().parent.parent
MACHINES = ROOT / "tests" / "data" / "machines"
GIB = 1024**3
TARGET = 10_000  # hosts per second


def base_profiles() -> list[dict]:
    """One profile per recorded machine."""
    profiles = []
    for folder in sorted(MACHINES.iterdir()):
        if (folder / "machine-root").is_dir():
            data = hwprobe.probe(str(folder / "machine-root")).to_data()
            data.pop("hostname")
            profiles.append(data)
    return profiles


def variants(bases: list[dict]) -> list[dict]:
    """RAM sizes x free-memory levels x NPU driver state over every recorded machine."""
    out = []
    for base in bases:
        for total in (2, 4, 8, 16, 32):
            for free_share in (0.3, 0.6, 0.9):
                for npu_loaded in (None, True) if base["npus"] else (None,):
                    data = json.loads(json.dumps(base))
                    data["memory"]["total"] = total * GIB
                    data["memory"]["available"] = int(total * GIB * free_share)
                    for npu in data["npus"]:
                        npu["driver-loaded"] = npu_loaded
                    out.append(data)
    return out


def write_fleet(path: Path, kinds: list[dict], hosts: int) -> None:
    rng = random.Random(7)
    encoded = [json.dumps(k, separators=(",", ":"))[1:] for k in kinds]
    with path.open("w") as stream:
        for index in range(hosts):
            stream.write(f'{{"hostname":"edge-{index:06d}",{rng.choice(encoded)}\n')


def snapbuild_command() -> list[str]:
    script = Path(sys.executable).parent / "snapbuild"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from snapbuild.cli import main; main()"]


def run_whole(path: Path, model: str, out: Path) -> tuple[float, int]:
    started = time.perf_counter()
    with out.open("w") as stream:
        done = subprocess.run(
            [*snapbuild_command(), "fleet", "plan", model, str(path), "--json"],
            stdout=stream,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 3):
        raise SystemExit(f"fleet plan failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed, done.returncode


def phases(path: Path, model: str) -> dict[str, float]:
    """The same work in-process, timed by phase (imports excluded)."""
    from snapbuild.fleet.advice import advise
    from snapbuild.fleet.planner import default_selector, plan_fleet
    from snapbuild.fleet.readers import read_inventories
    from snapbuild.fleet.report import to_json
    from snapbuild.manifest.loader import load_manifest

    times: dict[str, float] = {}
    mark = time.perf_counter()
    manifest = load_manifest(model)
    inventory = read_inventories([path])
    times["read"] = time.perf_counter() - mark
    mark = time.perf_counter()
    selector = default_selector()
    plan = plan_fleet(manifest, inventory, selector=selector)
    times["select"] = time.perf_counter() - mark
    mark = time.perf_counter()
    advice = advise(plan, selector)
    times["advice"] = time.perf_counter() - mark
    mark = time.perf_counter()
    to_json(plan, advice)
    times["json"] = time.perf_counter() - mark
    times["distinct"] = len(plan.outcomes)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100_000)
    parser.add_argument("--model", default="gemma3")
    args = parser.parse_args()
    kinds = variants(base_profiles())
    with tempfile.TemporaryDirectory() as tmp:
        fleet = Path(tmp) / "fleet.jsonl"
        write_fleet(fleet, kinds, args.hosts)
        size = fleet.stat().st_size
        elapsed, code = run_whole(fleet, args.model, Path(tmp) / "plan.json")
        plan = json.loads((Path(tmp) / "plan.json").read_text())
        assert len(plan["hosts"]) == args.hosts, "the plan lost hosts"
        rate = args.hosts / elapsed
        print(
            f"fleet: {args.hosts} hosts, {len(kinds)} hardware variants, {size / 1e6:.0f} MB JSONL"
        )
        print(
            f"whole process `snapbuild fleet plan {args.model} fleet.jsonl --json`: {elapsed:.2f} s"
            f" (exit {code}), {plan['summary']['distinct-profiles']} distinct profiles"
        )
        print(f"hosts/second: {rate:,.0f}  (target {TARGET:,}: ratio {rate / TARGET:.2f}x)")
        split = phases(fleet, args.model)
        print(
            "in-process phases: "
            + ", ".join(f"{k} {v:.2f} s" for k, v in split.items() if k != "distinct")
        )


if __name__ == "__main__":
    main()
