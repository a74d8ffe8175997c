"""Which inference runtimes work here: slow (it imports them), so only on request.

This is the one probe that loads native libraries, which is why ``hwprobe.probe`` leaves it out
unless asked (``runtimes=True``, ``hwprobe --runtimes``). Every import or query that fails is a
warning and a null, never a crash.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any

from hwprobe._fs import RootFS
from hwprobe.profile import RuntimeFacts

# import name -> distribution name (for its version)
PACKAGES = {
    "llama_cpp": "llama-cpp-python",
    "openvino": "openvino",
    "openvino_genai": "openvino-genai",
    "onnxruntime": "onnxruntime",
}


def _import(fs: RootFS, name: str) -> Any | None:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - a broken native package must not crash the probe
        if not isinstance(exc, ModuleNotFoundError):
            fs.warn("runtimes", f"{name} is installed but does not import: {exc}", "reinstall it")
        return None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def probe_runtimes(fs: RootFS) -> RuntimeFacts:
    """Runtime packages that import, and the devices each one sees."""
    modules = {name: _import(fs, name) for name in PACKAGES}
    packages = {
        name: (_version(dist) or "unknown") if modules[name] is not None else None
        for name, dist in PACKAGES.items()
    }
    return RuntimeFacts(
        packages=packages,
        openvino_devices=_openvino_devices(fs, modules["openvino"]),
        onnxruntime_providers=_onnx_providers(fs, modules["onnxruntime"]),
        llama_cpp_gpu_offload=_llama_offload(fs, modules["llama_cpp"]),
    )


def _openvino_devices(fs: RootFS, ov: Any | None) -> tuple[str, ...]:
    if ov is None:
        return ()
    try:
        return tuple(str(d) for d in ov.Core().available_devices)
    except Exception as exc:  # noqa: BLE001
        fs.warn("runtimes", f"OpenVINO could not list its devices: {exc}", "reinstall openvino")
        return ()


def _onnx_providers(fs: RootFS, ort: Any | None) -> tuple[str, ...]:
    if ort is None:
        return ()
    try:
        return tuple(str(p) for p in ort.get_available_providers())
    except Exception as exc:  # noqa: BLE001
        fs.warn(
            "runtimes", f"ONNX Runtime could not list providers: {exc}", "reinstall onnxruntime"
        )
        return ()


def _llama_offload(fs: RootFS, llama: Any | None) -> bool | None:
    if llama is None:
        return None
    try:
        return bool(llama.llama_supports_gpu_offload())
    except Exception as exc:  # noqa: BLE001
        fs.warn("runtimes", f"llama.cpp could not say whether it offloads to GPUs: {exc}", None)
        return None
