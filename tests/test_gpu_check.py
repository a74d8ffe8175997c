"""benchmarks/gpu_check.py's own logic, without a GPU: the CUDA architecture taken from the
probed GPU, and the direct llama-server twin started with the very flags and environment the
gateway gave its child (the comparison serve_concurrency makes). The whole check ran here on
lavapipe (docs/serving.md); on an NVIDIA host it is one command."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from hwprobe.profile import GpuFacts, HostProfile, PciIds

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", BENCHMARKS / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


def test_the_cuda_architecture_is_the_probed_gpus() -> None:
    pci = PciIds(slot="0000:00:06.0", pci_class="0x0302", vendor_id="0x10de", device_id="0x2330")
    h100 = GpuFacts(vendor="nvidia", pci=pci, compute_capability="9.0", vram=80 * 2**30)
    assert _gpu_check().cuda_architecture(HostProfile(gpus=(h100,))) == "90-real"
    assert _gpu_check().cuda_architecture(HostProfile()) is None


def test_the_direct_twin_runs_with_the_gateways_flags_and_device(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "usr" / "bin").mkdir(parents=True)
    (tree / "usr" / "lib").mkdir()
    (tree / "usr" / "bin" / "llama-server").write_text("")
    (tree / "usr" / "bin" / "libggml-cpu.so").write_text("")
    (tree / "usr" / "lib" / "libllama.so").write_text("")
    info = {
        "slots": 16, "context-per-slot": 4096, "kv-cache-type": "f16", "flash-attention": True,
        "cache-reuse": 256, "threads": 8, "device": "gpu",
        "offload": {"backend": "cuda", "device": "CUDA0", "why": "the GPU at 0000:00:06.0",
                    "env": {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0"}},
    }  # fmt: skip
    argv, env, base = _gpu_check().direct_twin(info, tree, Path("/m.gguf"))
    assert argv[argv.index("--parallel") + 1] == "16"
    assert argv[argv.index("--ctx-size") + 1] == str(16 * 4096)
    assert argv[argv.index("--device") + 1] == "CUDA0"
    assert argv[argv.index("--gpu-layers") + 1] == "999"
    assert (env["CUDA_VISIBLE_DEVICES"], env["CUDA_DEVICE_ORDER"]) == ("0", "PCI_BUS_ID")
    assert base.startswith("http://127.0.0.1:")
