"""Memory estimate vs what llama.cpp really makes resident: steady state and full-context peak.

For the real SmolLM2-135M GGUF and generated GGUFs of other shapes (32k, 128k and 262k-token
vocabularies, grouped-query and multi-head attention, gemma3 sliding-window layers), each
measurement runs in a fresh subprocess: import llama_cpp, read VmRSS, load the model with
use_mmap=False (the weights are really read) and swa_full=False (as runtimes/inprocess/llamacpp.py
does),
then either run a short prompt and decode a few tokens (steady state: VmRSS growth) or evaluate
a prompt that fills the whole context (peak: VmHWM growth). Runs are interleaved over
``--repeat`` rounds and the median is compared with ``snapbuild.estimate.llama.plan_memory``
(binding defaults, CPU, no headroom). Targets: steady within 5 %; the peak never
under-estimated by more than 3 % nor over-estimated by more than 10 %.

Run: python benchmarks/memory_fit.py [--repeat N] [--shape NAME ...] [--no-smollm2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.gguf_shapes import write_shape_gguf  # noqa: E402
from support.tiny_models import smollm2_gguf_path  # noqa: E402

from snapbuild.estimate.gguf_shape import read_gguf_shape  # noqa: E402
from snapbuild.estimate.memory import plan_memory  # noqa: E402

CHILD = r"""
import json, sys
def status(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
sys.path.insert(0, sys.argv[4])
from runtimes.component_tree import import_llama_cpp
llama_cpp = import_llama_cpp()
path, ctx, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
before = status("VmRSS")
llm = llama_cpp.Llama(model_path=path, n_ctx=ctx, use_mmap=False, verbose=False,
                      n_threads=2, swa_full=False)
if mode == "steady":
    llm.create_completion("The capital of France is", max_tokens=4, temperature=0.0)
    after = status("VmRSS")
else:
    n_vocab = llm.n_vocab()
    tokens = [(i * 7919) % (n_vocab - 8) + 4 for i in range(ctx - 1)]
    llm.eval(tokens)
    after = status("VmHWM")
print(json.dumps({"grown": after - before}))
"""

# name: (generator keyword arguments, contexts); narrow embeddings keep big vocabularies small
SHAPES: dict[str, tuple[dict[str, object], tuple[int, ...]]] = {
    "v32k-gqa-f16": (
        dict(embedding=512, layers=8, heads=8, kv_heads=2, feed_forward=1536, vocab=32000),
        (1024, 8192),
    ),
    "v128k-gqa-q8_0": (
        dict(
            embedding=256, layers=6, heads=4, kv_heads=2, feed_forward=768,
            vocab=128256, dtype="Q8_0", tied=True,
        ),
        (1024, 8192),
    ),
    "v262k-gemma3-swa512": (
        dict(
            architecture="gemma3", sliding_window=512, embedding=128, layers=12, heads=4,
            kv_heads=1, feed_forward=512, vocab=262144, tied=True,
        ),
        (1024, 16384),
    ),
    "v1k-mha-24l-f16": (
        dict(embedding=512, layers=24, heads=8, kv_heads=8, feed_forward=1024),
        (1024, 8192),
    ),
}  # fmt: skip


def measure(path: Path, ctx: int, mode: str) -> int:
    """Bytes llama-cpp-python made resident for one model, context and mode."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(ctx), mode, str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return int(json.loads(out.stdout.strip().splitlines()[-1])["grown"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES))
    parser.add_argument("--no-smollm2", action="store_true")
    args = parser.parse_args()
    cases: list[tuple[str, Path, int]] = []
    smol = smollm2_gguf_path()
    if smol is not None and not args.no_smollm2 and not args.shape:
        cases += [("smollm2-135m-q4_1", smol, ctx) for ctx in (1024, 4096)]
    mib = 1024 * 1024
    with tempfile.TemporaryDirectory() as tmp:
        for name, (kwargs, contexts) in SHAPES.items():
            if args.shape and name not in args.shape:
                continue
            path = write_shape_gguf(Path(tmp) / f"{name}.gguf", **kwargs)  # type: ignore[arg-type]
            cases += [(name, path, ctx) for ctx in contexts]
        got: dict[tuple[int, str], list[int]] = {}
        for _ in range(args.repeat):  # interleaved: one of every case per round
            for i, (_, path, ctx) in enumerate(cases):
                for mode in ("steady", "peak"):
                    got.setdefault((i, mode), []).append(measure(path, ctx, mode))
        print(
            f"{'model':<22} {'ctx':>6} | {'steady':>8} {'est':>8} {'err':>6} | "
            f"{'peak':>8} {'est':>8} {'err':>6} | {'kv':>7} {'compute':>8}"
        )
        ok = True
        for i, (name, path, ctx) in enumerate(cases):
            plan = plan_memory(read_gguf_shape(path), ctx)
            steady = statistics.median(got[(i, "steady")])
            peak = statistics.median(got[(i, "peak")])
            es = (plan.steady.total - steady) / steady
            ep = (plan.peak.total - peak) / peak
            ok &= abs(es) <= 0.05 and -0.03 <= ep <= 0.10
            print(
                f"{name:<22} {ctx:>6} | {steady / mib:>6.1f}Mi {plan.steady.total / mib:>6.1f}Mi "
                f"{es:>+6.1%} | {peak / mib:>6.1f}Mi {plan.peak.total / mib:>6.1f}Mi {ep:>+6.1%} | "
                f"{plan.peak.kv_cache / mib:>5.1f}Mi {plan.peak.compute / mib:>6.1f}Mi"
            )
    print("all within target" if ok else "OUTSIDE TARGET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
