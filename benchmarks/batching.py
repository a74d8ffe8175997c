"""Many users at once: OpenVINO continuous batching and ONNX Runtime micro-batching, measured
through the API (real servers in subprocesses, real clients), interleaved in one run.

OpenVINO (the tiny generated qwen2 GGUF, CPU): one server with continuous batching (4
sequences) and, for comparison, one serving one request at a time. Each round runs 1 stream,
then 4 concurrent streams, on each server; every request generates exactly ``--tokens`` tokens.
Targets, on the batching server: 4-stream aggregate tokens/s >= 1.3 x one stream; time to first
token of the 4th concurrent request (the slowest to start) <= 2 x the first's.

ONNX Runtime (a random-weight encoder of all-MiniLM-L6-v2's shape, 384 wide, 6 layers; byte
tokens): 32 concurrent single-text embedding requests to a micro-batching server (up to 32
texts, 5 ms window) against the same 32 to a server that runs them one by one, vectors as
base64 (the openai client's default). Target, for short queries: micro-batched throughput >= 2 x
one by one. Short sentences are measured too: longer texts make each run compute-bound, and the
gain of batching shrinks with it.

    python benchmarks/batching.py [--rounds 5] [--tokens 128] [--threads 2]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import openai

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from serve_concurrency import wait_ready  # noqa: E402

CONTEXT = 2048
# Byte tokens: a text takes as many tokens as it has bytes. QUERIES (5 to 11 bytes) take as
# many tokens as two-to-five-word search queries take in MiniLM's WordPiece vocabulary, counting
# [CLS] and [SEP]: what a retrieval service mostly embeds (the target's workload). SENTENCES
# (13 to 30 bytes) are short sentences, shown for comparison.
WORDS = ("red shoes", "rome", "weather", "boil egg", "jazz", "tax form", "cat food", "gym")
QUERIES = [f"{WORDS[i % len(WORDS)]} {i}" for i in range(32)]
PHRASES = ("red shoes", "cheap flights to rome", "weather", "how to boil an egg")
SENTENCES = [f"query {i}: {PHRASES[i % len(PHRASES)]}" for i in range(32)]


# --- servers ----------------------------------------------------------------------------------


def serve(kind: str, model: str, sequences: int, threads: int) -> None:
    """Child process: serve ``model`` and print the base URL on stdout."""
    import uvicorn

    from runtimes.engine import LoadOptions
    from runtimes.gateway.server import bind_socket, create_app
    from runtimes.inprocess.onnx import OnnxAdapter
    from runtimes.inprocess.openvino import OpenVinoAdapter
    from snapbuild.serving.batching import kv_block_tokens

    if kind == "openvino":
        options = LoadOptions(
            artifact=Path(model),
            runtime="openvino-cpu",
            context_size=CONTEXT,
            threads=threads,
            sequences=sequences,
            kv_block_tokens=kv_block_tokens("openvino-cpu"),
        )
        adapter: OpenVinoAdapter | OnnxAdapter = OpenVinoAdapter(options)
    else:
        options = LoadOptions(
            artifact=Path(model),
            runtime="onnxruntime-cpu",
            context_size=512,
            threads=threads,
            sequences=sequences,
        )
        adapter = OnnxAdapter(options)
    app = create_app(
        adapter, model_id="bench", engine_name="cpu", device="cpu", context_size=CONTEXT
    )
    sock = bind_socket("127.0.0.1", 0)
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


def start(
    kind: str, model: Path, sequences: int, threads: int
) -> tuple[subprocess.Popen[str], str]:
    command = [
        sys.executable, __file__, "--serve", kind, "--model", str(model),
        "--sequences", str(sequences), "--threads", str(threads),
    ]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    base = proc.stdout.readline().strip()
    wait_ready(base, timeout=60)
    return proc, base


# --- OpenVINO streams ---------------------------------------------------------------------------


def stream(
    client: openai.OpenAI, prompt: str, tokens: int, start: threading.Barrier
) -> tuple[float, float, float, int]:
    """(start, first token, end times, tokens) of one streamed completion; every client of a
    round is released by ``start`` at the same moment."""
    start.wait()
    began = time.perf_counter()
    chunks = client.completions.create(
        model="bench",
        prompt=prompt,
        max_tokens=tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},  # usage comes only when asked, as with OpenAI
        extra_body={"ignore_eos": True},
    )
    first, produced = 0.0, 0
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].text and not first:
            first = time.perf_counter()
        if chunk.usage is not None:
            produced = chunk.usage.completion_tokens
    return began, first, time.perf_counter(), produced


def streams(base: str, count: int, tokens: int, round_no: int) -> tuple[float, list[float]]:
    """(aggregate tokens/s, sorted times to first token) of ``count`` concurrent streams."""
    prompts = [f"Round {round_no}, client {i}: tell me a long story." for i in range(count)]
    clients = [
        openai.OpenAI(base_url=f"{base}/v1", api_key="-", max_retries=0, timeout=300)
        for _ in prompts
    ]  # made before the clock starts: a client takes tens of ms to build
    start = threading.Barrier(count)
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        results = list(pool.map(lambda c, p: stream(c, p, tokens, start), clients, prompts))
    produced = sum(r[3] for r in results)
    assert produced == count * tokens, f"expected {count * tokens} tokens, got {produced}"
    began = min(r[0] for r in results)
    elapsed = max(r[2] for r in results) - began
    return produced / elapsed, sorted(r[1] - r[0] for r in results)


def openvino_part(rounds: int, tokens: int, threads: int, workdir: Path) -> bool:
    from support.tiny_models import write_tiny_gguf

    model = write_tiny_gguf(workdir / "tiny.gguf", architecture="qwen2", context=CONTEXT)
    servers = {name: start("openvino", model, n, threads) for name, n in (("batch", 4), ("one", 1))}
    figures: dict[str, dict[str, list[float]]] = {
        name: {"one": [], "four": [], "ttft1": [], "ttft4": []} for name in servers
    }
    try:
        for _, base in servers.values():  # warm both
            streams(base, 4, 8, -1)
        for round_no in range(rounds):
            for name, (_, base) in servers.items():
                single, _ = streams(base, 1, tokens, round_no)
                four, ttfts = streams(base, 4, tokens, round_no)
                got = figures[name]
                got["one"].append(single)
                got["four"].append(four)
                got["ttft1"].append(ttfts[0])
                got["ttft4"].append(ttfts[-1])
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait()
    print(f"OpenVINO, tiny qwen2 GGUF, CPU, {threads} threads, {tokens} tokens per request, "
          f"median of {rounds} interleaved rounds")  # fmt: skip
    ok = True
    for name, label in (("batch", "continuous batching (4 sequences)"), ("one", "one at a time")):
        got = {k: statistics.median(v) for k, v in figures[name].items()}
        ratio, ttft = got["four"] / got["one"], got["ttft4"] / got["ttft1"]
        print(f"  {label}: 1 stream {got['one']:.0f} tok/s; 4 streams {got['four']:.0f} tok/s "
              f"aggregate ({ratio:.2f}x); TTFT 1st {got['ttft1'] * 1000:.1f} ms, "
              f"4th {got['ttft4'] * 1000:.1f} ms ({ttft:.2f}x)")  # fmt: skip
        if name == "batch":
            ok = ratio >= 1.3 and ttft <= 2.0
            print(f"  target: 4-stream aggregate >= 1.3x one stream, 4th TTFT <= 2x the 1st: "
                  f"{'met' if ok else 'MISSED'}")  # fmt: skip
    return ok


# --- ONNX Runtime embeddings ------------------------------------------------------------------


async def embed_all(base: str, texts: list[str]) -> float:
    """Seconds for concurrent single-text requests, one per text."""
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:

        async def one(text: str) -> None:
            body = {"model": "bench", "input": text, "encoding_format": "base64"}
            reply = await client.post("/v1/embeddings", json=body)
            assert reply.status_code == 200, reply.text

        began = time.perf_counter()
        await asyncio.gather(*(one(t) for t in texts))
        return time.perf_counter() - began


def onnx_part(rounds: int, threads: int, workdir: Path) -> bool:
    from support.tiny_encoder import write_tiny_onnx_encoder

    model = write_tiny_onnx_encoder(
        workdir / "minilm-shaped.onnx", width=384, layers=6, heads=12, feed_forward=1536
    )
    servers = {name: start("onnx", model, n, threads) for name, n in (("batch", 32), ("one", 1))}
    workloads = {"queries": QUERIES, "sentences": SENTENCES}
    seconds: dict[tuple[str, str], list[float]] = {}
    try:
        for _, base in servers.values():
            asyncio.run(embed_all(base, QUERIES))
        for _ in range(rounds):
            for load, texts in workloads.items():
                for name, (_, base) in servers.items():
                    seconds.setdefault((load, name), []).append(asyncio.run(embed_all(base, texts)))
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait()
    print(f"ONNX Runtime, MiniLM-shaped encoder, CPU, {threads} threads, 32 concurrent "
          f"single-text requests, median of {rounds} interleaved rounds")  # fmt: skip
    ok = True
    for load in workloads:
        batch, one = (32 / statistics.median(seconds[(load, n)]) for n in ("batch", "one"))
        ratio = batch / one
        verdict = ""
        if load == "queries":
            ok = ratio >= 2.0
            verdict = f" (target >= 2x: {'met' if ok else 'MISSED'})"
        print(f"  {load}: micro-batched {batch:.0f} requests/s; one by one {one:.0f} "
              f"requests/s; ratio {ratio:.2f}x{verdict}")  # fmt: skip
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--serve", choices=("openvino", "onnx"), help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--sequences", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.model, args.sequences, args.threads)
        return
    with tempfile.TemporaryDirectory() as tmp:
        ok = openvino_part(args.rounds, args.tokens, args.threads, Path(tmp))
        ok = onnx_part(args.rounds, args.threads, Path(tmp)) and ok
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
