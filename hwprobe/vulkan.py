"""Vulkan facts: the installed drivers and the devices they expose, software ones marked.

Vulkan is how the llama.cpp Vulkan engine reaches a GPU, but not every Vulkan device is a GPU:
Mesa's lavapipe (llvmpipe) and SwiftShader are conformant Vulkan devices that run on the CPU.
llama.cpp computes on them correctly and slower than its own CPU backend, so hwprobe reports them
as what they are (``device-type: cpu``, ``software: true``) and never among the GPUs, which come
from the PCI bus alone.

Two sources, both replayable: the drivers' ICD manifests (JSON files in the loader's search
directories; cheap, read live and from a capture) and the device list the loader enumerates.
Live, the list comes from :mod:`hwprobe.vulkan_query` in a child process (a driver may crash or
print; neither may reach the prober), only when a driver manifest exists; ``hwprobe capture``
records the answer as ``run/vulkan-devices.json``, which a replay reads and never runs a tool for.
"""

from __future__ import annotations

import json
import os
import posixpath
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hwprobe._fs import RootFS
from hwprobe.profile import VulkanDeviceFacts, VulkanDriverFacts, VulkanFacts
from hwprobe.tables import vulkan_table

DEVICES_FILE = "/run/vulkan-devices.json"
ICD_DIR = "/usr/share/vulkan/icd.d"  # where a capture puts manifests found elsewhere
QUERY = Path(__file__).with_name("vulkan_query.py")
QUERY_TIMEOUT_S = 30.0
DEVICE_TYPES = ("discrete-gpu", "integrated-gpu", "virtual-gpu", "cpu", "other")
RESOLUTION = (
    "check the Vulkan driver with `vulkaninfo --summary`; inside a snap, connect the gpu-2404 "
    "interface (mesa-2404) so the drivers are found"
)


def icd_paths(fs: RootFS, environ: Mapping[str, str] | None = None) -> list[str]:
    """The ICD manifests the Vulkan loader would read, in its order.

    Live, the loader's own environment decides (VK_DRIVER_FILES or the older VK_ICD_FILENAMES
    replace the search; VK_ADD_DRIVER_FILES adds to it; XDG_CONFIG_DIRS and XDG_DATA_DIRS extend
    it, which is how the gpu-2404 wrapper exposes mesa-2404's drivers to a snap). A recorded
    machine is read at the table's standard directories under its root.
    """
    env = (os.environ if environ is None else environ) if fs.is_live else {}
    explicit = env.get("VK_DRIVER_FILES") or env.get("VK_ICD_FILENAMES")
    places = _split(explicit) if explicit else _search_dirs(env)
    places += _split(env.get("VK_ADD_DRIVER_FILES", ""))
    found: list[str] = []
    for place in places:
        if fs.is_dir(place):
            names = [n for n in fs.listdir(place) if n.endswith(".json")]
            found += [posixpath.join(place, n) for n in names]
        elif place.endswith(".json") and fs.exists(place):
            found.append(place)
    return list(dict.fromkeys(found))


def _split(value: str) -> list[str]:
    return [p for p in value.split(":") if p]


def _search_dirs(env: Mapping[str, str]) -> list[str]:
    if not env:
        return list(vulkan_table().icd_directories)
    config = _split(env.get("XDG_CONFIG_DIRS", "")) or ["/etc/xdg"]
    data = _split(env.get("XDG_DATA_DIRS", "")) or ["/usr/local/share", "/usr/share"]
    dirs = [f"{d}/vulkan/icd.d" for d in config] + ["/etc/vulkan/icd.d"]
    dirs += [f"{d}/vulkan/icd.d" for d in data]
    return dirs


def read_driver(fs: RootFS, manifest: str) -> VulkanDriverFacts | None:
    """One ICD manifest; None (and a warning) when it is not a manifest."""
    text = fs.text(manifest, source="vulkan")
    try:
        icd = json.loads(text or "")["ICD"]
        library = icd.get("library_path")
        api = icd.get("api_version")
    except (ValueError, KeyError, TypeError, AttributeError):
        fs.warn(
            "vulkan",
            f"{fs.path(manifest)} is not a Vulkan driver manifest (no ICD object)",
            "reinstall the package that owns it, or remove it",
        )
        return None
    library = library if isinstance(library, str) else None
    return VulkanDriverFacts(
        manifest=manifest,
        library=library,
        api_version=api if isinstance(api, str) else None,
        software=is_software_library(library),
    )


def is_software_library(library: str | None) -> bool:
    """True for a driver library the table names as rendering on the CPU."""
    name = posixpath.basename(library or "")
    known = vulkan_table().software_libraries
    return any(name == lib or name.startswith(lib + ".") for lib in known)


def device_facts(entry: Mapping[str, Any]) -> VulkanDeviceFacts:
    """A device from the query's (or the recording's) entry; raises on a malformed one."""
    kind = entry["device-type"]
    if kind not in DEVICE_TYPES:
        raise ValueError(f"unknown device-type {kind!r}")
    driver_id = entry.get("driver-id")
    software = kind == "cpu" or driver_id in vulkan_table().software_driver_ids
    memory = entry.get("memory")
    return VulkanDeviceFacts(
        index=int(entry["index"]),
        name=str(entry["name"]),
        device_type=kind,
        software=software,
        vendor_id=str(entry["vendor-id"]),
        device_id=str(entry["device-id"]),
        api_version=entry.get("api-version"),
        driver_name=entry.get("driver-name"),
        driver_info=entry.get("driver-info"),
        memory=int(memory) if isinstance(memory, int) else None,
        pci_slot=entry.get("pci-slot"),
    )


def start_query(environ: Mapping[str, str] | None = None) -> Callable[[], dict[str, Any]]:
    """Start :mod:`hwprobe.vulkan_query` in an isolated child (in ``environ``, default this
    process's: the loader reads the same variables the manifests were found by); the returned
    function waits for its answer, or an error. Starting early lets the rest of the probe run
    while the drivers load (about 0.1 s)."""
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(QUERY)],
            env=dict(os.environ if environ is None else environ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    except OSError as exc:
        failed = {"error": f"the Vulkan device query could not start: {exc}"}
        return lambda: failed

    def answer() -> dict[str, Any]:
        try:
            out, err = proc.communicate(timeout=QUERY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return {"error": f"the Vulkan device query did not finish in {QUERY_TIMEOUT_S:g}s"}
        return _parse_answer(proc.returncode, out, err)

    return answer


def query_live(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The live device query's answer (:func:`start_query`, waited for)."""
    return start_query(environ)()


def _parse_answer(code: int, out: str, err: str) -> dict[str, Any]:
    if code != 0:
        last = (err.strip().splitlines() or ["no message"])[-1]
        return {"error": f"the Vulkan device query exited with status {code}: {last}"}
    try:
        answer = json.loads(out)
    except ValueError:
        return {"error": "the Vulkan device query printed no JSON"}
    return answer if isinstance(answer, dict) else {"error": "the Vulkan device query's answer"}


def read_answer(fs: RootFS) -> dict[str, Any] | None:
    """The recorded answer of a capture (None: none recorded)."""
    if not fs.exists(DEVICES_FILE):
        return None
    try:
        answer = json.loads(fs.text(DEVICES_FILE, source="vulkan") or "")
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        fs.warn("vulkan", f"{fs.path(DEVICES_FILE)} is not JSON", "record it: hwprobe capture")
        return None
    return answer


def devices_from(fs: RootFS, answer: Mapping[str, Any]) -> tuple[VulkanDeviceFacts, ...] | None:
    """The devices of an answer; None with a warning for an error or a malformed entry."""
    if "error" in answer:
        fs.warn("vulkan", f"could not list the Vulkan devices: {answer['error']}", RESOLUTION)
        return None
    try:
        return tuple(device_facts(e) for e in answer.get("devices", []))
    except (KeyError, TypeError, ValueError) as exc:
        fs.warn("vulkan", f"a Vulkan device entry is malformed ({exc})", RESOLUTION)
        return None


def start_vulkan(
    fs: RootFS, environ: Mapping[str, str] | None = None
) -> Callable[[], VulkanFacts | None]:
    """Read the drivers now and start the live device query; the returned function completes
    the facts (None when the machine shows no Vulkan). A replay reads the record instead."""
    drivers = tuple(d for p in icd_paths(fs, environ) if (d := read_driver(fs, p)))
    if not fs.is_live:
        recorded = read_answer(fs)
        return lambda: _facts(fs, drivers, recorded)
    if not drivers:
        return lambda: None
    pending = start_query(environ)
    return lambda: _facts(fs, drivers, pending())


def probe_vulkan(fs: RootFS, environ: Mapping[str, str] | None = None) -> VulkanFacts | None:
    """The drivers, and the devices when enumerated; None when the machine shows no Vulkan."""
    return start_vulkan(fs, environ)()


def _facts(
    fs: RootFS, drivers: tuple[VulkanDriverFacts, ...], answer: Mapping[str, Any] | None
) -> VulkanFacts | None:
    if not drivers and answer is None:
        return None
    devices = devices_from(fs, answer) if answer is not None else None
    return VulkanFacts(drivers=drivers, devices=devices)
