"""The Vulkan engine for real: the catalog's llama.cpp-vulkan recipe built here, SmolLM2 served
through the gateway on Mesa's lavapipe (a conformant software Vulkan device) with every layer
offloaded, as an operator who forces it gets it (`use-engine vulkan --force`).

lavapipe is the CPU, so the selector rejects the Vulkan engine here; forcing it runs the GPU code
path end to end all the same: the forced plan on the device's reported memory (2 GiB), the
component's libggml-vulkan.so loaded from its usr/bin, llama-server held to the device by
GGML_VK_VISIBLE_DEVICES and ``--device Vulkan0``, and its log read back into /health. The
evidence that the work ran on the Vulkan device, not on the CPU backend by accident: llama-server
says it used Vulkan0 (llvmpipe) and put all layers and the KV cache there, and its process maps
the component's libggml-vulkan.so and Mesa's libvulkan_lvp.so.

Needs lavapipe (mesa-vulkan-drivers) and the Vulkan build's tools (libvulkan-dev, glslc,
spirv-headers): skipped with the reason when absent, failed in CI (``.ci/run`` installs them).
The build is cached by recipe; a first one takes about half an hour on two cores.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from hwprobe import probe
from runtimes.component_tree import ComponentTree
from snapbuild.recipes.native import build_component, link_into_venv
from snapbuild.trial.sandbox import Trial

pytestmark = pytest.mark.slow

LVP_ICD = Path("/usr/share/vulkan/icd.d")


def _missing() -> str | None:
    """Why this machine cannot run the test (None: it can)."""
    if not any(LVP_ICD.glob("lvp_icd*.json")):
        return "lavapipe is not installed (apt-get install mesa-vulkan-drivers)"
    for tool, package in (("glslc", "glslc"), ("cmake", "cmake")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install {package})"
    if not Path("/usr/include/vulkan/vulkan.h").is_file():
        return "the Vulkan headers are not installed (apt-get install libvulkan-dev)"
    return None


def _require() -> None:
    reason = _missing()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the Vulkan engine test: {reason}")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def vulkan_tree() -> ComponentTree:
    _require()
    root = build_component("llama.cpp-vulkan")
    link_into_venv("llamacpp-vulkan", root)  # where `snapbuild try` stages components from
    return ComponentTree(root)


@pytest.fixture(scope="module")
def forced(
    vulkan_tree: ComponentTree, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Trial, int]]:
    """`snapbuild try smollm2 --as trial`, then `smollm2 use-engine vulkan --force`, serving
    (the trial: `snapbuild pack` packs no GPU variant here, so the packed snap has no Vulkan
    component to force)."""
    work = tmp_path_factory.mktemp("vulkan") / "smollm2"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAPBUILD_HOST_")}
    tried = subprocess.run(
        [str(Path(sys.executable).parent / "snapbuild"), "try", "smollm2", "--as", "trial",
         "--work-dir", str(work), "--port", str(port)],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    trial = Trial(work=work, name="smollm2")
    try:
        assert tried.returncode == 0, tried.stdout + tried.stderr
        switched = trial.run("use-engine", "vulkan", "--force", "--assume-yes")
        assert switched.returncode == 0, switched.stdout + switched.stderr
        assert switched.stdout.splitlines()[-1] == "Now using vulkan."
        _wait_ready(port, "vulkan")
        yield trial, port
    finally:
        trial.stop()


def _wait_ready(port: int, engine: str, timeout: float = 600) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            resp = requests.get(f"http://127.0.0.1:{port}/health", timeout=5)
            last = resp.json()
            if resp.status_code == 200 and resp.json()["engine"] == engine:
                body: dict[str, object] = resp.json()
                return body
        except (requests.RequestException, ValueError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"no healthy {engine} server on port {port}: {last}")


def _health(port: int) -> dict[str, object]:
    body: dict[str, object] = requests.get(f"http://127.0.0.1:{port}/health", timeout=5).json()
    return body


def test_the_vulkan_recipe_builds_with_its_backend_beside_llama_server(
    vulkan_tree: ComponentTree,
) -> None:
    stamp = json.loads((vulkan_tree.root / "snapbuild-native.json").read_text())
    assert stamp["runtime"] == "llama.cpp-vulkan"
    assert "-DGGML_VULKAN=ON" in stamp["recipe"]["cmake_parameters"]
    assert vulkan_tree.problems() == []
    assert (vulkan_tree.bin_dir / "libggml-vulkan.so").is_file()
    assert (vulkan_tree.bin_dir / "libggml-cpu.so").is_file()  # the CPU module, for what stays


def test_the_prober_calls_lavapipe_a_cpu_device_and_the_selector_rejects_it() -> None:
    _require()
    host = probe()
    assert host.gpus == ()
    assert host.vulkan is not None and host.vulkan.devices
    (device,) = [d for d in host.vulkan.devices if d.driver_name == "llvmpipe"]
    assert (device.device_type, device.software) == ("cpu", True)


def test_a_chat_and_a_streamed_chat_through_the_gateway_on_lavapipe(
    forced: tuple[Trial, int],
) -> None:
    _, port = forced
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    ask = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": "Name a colour."}],
        "max_tokens": 12,
        "temperature": 0,
    }
    answer = requests.post(url, json=ask, timeout=300)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"].strip()
    chunks = []
    with requests.post(url, json={**ask, "stream": True}, stream=True, timeout=300) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                chunks.append(json.loads(line[6:]))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text.strip() and text == answer.json()["choices"][0]["message"]["content"]


def test_llama_server_says_every_layer_and_the_kv_cache_are_on_the_vulkan_device(
    forced: tuple[Trial, int],
) -> None:
    trial, port = forced
    info = _health(port)["runtime_info"]
    assert isinstance(info, dict)
    offload = info["offload"]
    assert offload["backend"] == "vulkan" and offload["device"] == "Vulkan0"
    assert offload["env"] == {"GGML_VK_VISIBLE_DEVICES": "0"}
    report = offload["report"]
    assert report["device"] == "Vulkan0"
    assert report["description"].startswith("llvmpipe")
    assert report["layers"] == report["layers-total"] == 31  # 30 blocks and the output layer
    buffers = report["buffers"]
    assert buffers["Vulkan0 model"] > 80 * 2**20  # the weights (98 MB file) on the device
    assert buffers["Vulkan0 KV"] > 0 and buffers["Vulkan0 compute"] > 0
    # the forced plan was made on the device's reported memory (2 GiB) and ran as planned
    decision = json.loads((trial.work / "var" / "x1" / "decision.json").read_text())
    serving = decision["selected"]["serving"]
    assert info["slots"] == serving["slots"]
    assert buffers["Vulkan0 KV"] == serving["kv-cache"]


def test_the_llama_server_process_maps_the_components_vulkan_backend_and_lavapipe(
    forced: tuple[Trial, int], vulkan_tree: ComponentTree
) -> None:
    _, port = forced
    info = _health(port)["runtime_info"]
    assert isinstance(info, dict)
    pid = info["child"]["pid"]
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    mapped = {line.split()[-1] for line in maps if ".so" in line}
    backend = (vulkan_tree.root / "usr" / "bin" / "libggml-vulkan.so").resolve()
    assert str(backend) in mapped
    assert any(m.endswith("libvulkan_lvp.so") for m in mapped)
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert b"GGML_VK_VISIBLE_DEVICES=0" in environ
    assert Path(f"/proc/{pid}/cwd").resolve() == backend.parent
