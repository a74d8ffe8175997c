"""``snapbuild pack`` makes the real snap and components, built by craft-parts as snapcraft 9.0.1
builds them and packed by ``snap pack`` and snapd's component packer (snapbuild/pack).

smollm2's CPU variant: the ``.snap`` carries the venv of the ``snapbuild`` part (Python 3.12,
``pyvenv.cfg`` home /usr/bin as on core24) with snaps, runtimes, snapbuild, hwprobe, snapcommon
and the serve extra (httpx, httptools, orjson, uvloop...); the runtime component carries
llama-server, libllama, the GGML CPU modules and libgomp.so.1 and no headers or venv leftovers;
the weights component carries the GGUF. Then every first-party module the snap ships is
imported by core24's Python 3.12 with only the snap's packages (and the runtime component's,
as the daemon adds them): only other engines' packages and toolkit-only ones may be missing.
minilm's CPU variant: the ONNX Runtime component (onnxruntime, tokenizers, numpy) is packed and
imports; its weights are placeholders, so that component is left out and the fix is named.

Skips, saying why, where packing cannot run (no root or mount namespace for Python 3.12, no
mksquashfs, snap, python3-apt or snapcraft); CI has them all. The build is kept in snapbuild's
cache (``<cache>/pack/smollm2-cpu-amd64``), so a later run takes seconds.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import oracle

from snapbuild.pack import Packed, pack
from snapbuild.pack.host import HostError, find_host
from snapbuild.project.builder import make, snap_yaml

pytestmark = pytest.mark.slow
SITE = "lib/python3.12/site-packages"
SNAP_IMPORTS = Path(__file__).parent / "support" / "snap_imports.py"
# third-party modules the shipped code imports that smollm2's CPU snap does not install
OTHER_ENGINES = {"onnxruntime", "tokenizers", "openvino", "openvino_genai"}
TOOLKIT_ONLY = {"tqdm", "gguf", "tomli"}  # see tests/test_snap_requirements.py


def _pack(model: str, out: Path) -> Packed:
    python = oracle.require() / "bin" / "python"
    try:
        find_host(snapcraft=python)
    except HostError as exc:
        pytest.skip(f"snapbuild pack cannot run here: {exc.brief}")
    return pack(model, out, variant="cpu", snapcraft=python)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Packed:
    return _pack("smollm2", tmp_path_factory.mktemp("out"))


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Packed:
    return _pack("minilm", tmp_path_factory.mktemp("out"))


def _listing(path: Path) -> dict[str, str]:
    """``unsquashfs -lln``: path (no leading squashfs-root/) -> the line."""
    out = subprocess.run(
        ["unsquashfs", "-lln", str(path)], capture_output=True, text=True, check=True
    ).stdout
    entries = {}
    for line in out.splitlines():
        if " squashfs-root" in line:
            name = line.split(" squashfs-root", 1)[1].removeprefix("/")
            entries[name.split(" -> ")[0]] = line
    return entries


def test_the_files_are_named_as_snapcraft_names_them(packed: Packed) -> None:
    assert packed.snap.name == f"smollm2_1.0_{packed.architecture}.snap"
    assert {n: p.name for n, p in packed.components.items()} == {
        "llamacpp-cpu": "smollm2+llamacpp-cpu.comp",
        "smollm2-q4-1": "smollm2+smollm2-q4-1.comp",
    }
    assert all(p.parent == packed.snap.parent for p in packed.components.values())
    assert [(s.kind, s.name) for s in packed.skipped] == [("architecture", "arm64")]


def test_the_snap_carries_the_python_part(packed: Packed) -> None:
    entries = _listing(packed.snap)
    for package in ("snaps", "runtimes", "snapbuild", "hwprobe", "snapcommon"):
        assert f"{SITE}/{package}/__init__.py" in entries, package
    for module in ("httpx", "httptools", "orjson", "uvloop", "fastapi", "uvicorn", "PIL"):
        assert f"{SITE}/{module}" in entries, module
    assert not [
        e for e in entries if e.startswith((f"{SITE}/snapbuild/pack", f"{SITE}/snapbuild/trial"))
    ]
    assert entries["bin/python3"].endswith("-> /usr/bin/python3.12")  # snapcraft's core24 link
    pyvenv = subprocess.run(
        ["unsquashfs", "-cat", str(packed.snap), "pyvenv.cfg"], capture_output=True, text=True
    ).stdout
    assert "home = /usr/bin" in pyvenv.splitlines()
    meta = subprocess.run(
        ["unsquashfs", "-cat", str(packed.snap), "meta/snap.yaml"], capture_output=True, text=True
    ).stdout
    built = make("smollm2", packed.work / "again", variant="cpu", architectures=["amd64"])
    # snapcraft's own snap.yaml, as the builder's translation says, except that snapcraft adds
    # the prime tree's library directories to LD_LIBRARY_PATH: the venv's lib/ is one
    written, expected = yaml.safe_load(meta), snap_yaml(built.project, packed.architecture)
    assert written["environment"].pop("LD_LIBRARY_PATH") == (
        expected["environment"].pop("LD_LIBRARY_PATH") + ":$SNAP/lib"
    )
    assert written == expected


def test_the_runtime_component_carries_what_the_loader_loads(packed: Packed) -> None:
    entries = _listing(packed.components["llamacpp-cpu"])
    for path in ("usr/bin/llama-server", "usr/lib/libllama.so", "meta/component.yaml",
                 "lib/python3/site-packages/llama_cpp/__init__.py"):  # fmt: skip
        assert path in entries, path
    assert [e for e in entries if e.startswith("usr/bin/libggml-cpu-")]
    assert [e for e in entries if e.startswith("usr/lib/") and e.endswith("/libgomp.so.1")]
    for leftover in ("usr/include", "usr/lib/cmake", "usr/lib/pkgconfig", "bin", "pyvenv.cfg",
                     "include", "lib/python3.12", "lib/python3/site-packages/pip"):  # fmt: skip
        assert leftover not in entries, leftover
    assert "usr/bin/libggml-cpu-sapphirerapids.so" not in entries  # removed by the recipe
    meta = subprocess.run(
        ["unsquashfs", "-cat", str(packed.components["llamacpp-cpu"]), "meta/component.yaml"],
        capture_output=True,
        text=True,
    ).stdout
    assert yaml.safe_load(meta)["component"] == "smollm2+llamacpp-cpu"


def test_the_weights_component_carries_the_gguf(packed: Packed) -> None:
    entries = _listing(packed.components["smollm2-q4-1"])
    assert sorted(e for e in entries if e) == [
        "SmolLM2-135M-Instruct.Q4_1.gguf", "meta", "meta/component.yaml",
    ]  # fmt: skip


def _imports(snap_file: Path, component: Path, tmp_path: Path) -> dict[str, Any]:
    """tests/support/snap_imports.py's report for the snap plus one runtime component."""
    python = find_host(snapcraft=oracle.require() / "bin" / "python").python312
    snap, runtime = tmp_path / "snap", tmp_path / "runtime"
    for file, dest in ((snap_file, snap), (component, runtime)):
        subprocess.run(["unsquashfs", "-q", "-n", "-d", str(dest), str(file)], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
    done = subprocess.run(
        [str(python), "-I", "-S", str(SNAP_IMPORTS), str(snap / SITE),
         str(runtime / "lib/python3/site-packages")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["packages"]["snaps"] == str(snap / SITE / "snaps")  # the snap's, not ours
    return report


def test_everything_the_snap_imports_is_in_the_snap(packed: Packed, tmp_path: Path) -> None:
    report = _imports(packed.snap, packed.components["llamacpp-cpu"], tmp_path)
    assert set(report["missing"]) <= OTHER_ENGINES | TOOLKIT_ONLY, report["missing"]
    assert report["failures"] == {}


def test_minilm_packs_onnx_runtime_and_says_its_weights_are_placeholders(
    minilm: Packed, tmp_path: Path
) -> None:
    assert sorted(minilm.components) == ["onnxruntime-cpu"]
    assert minilm.components["onnxruntime-cpu"].name == "minilm+onnxruntime-cpu.comp"
    weights = next(s for s in minilm.skipped if s.kind == "component")
    assert (weights.name, weights.resolution) == (
        "minilm-onnx", "snapbuild fetch minilm --engine cpu --record",
    )  # fmt: skip
    entries = _listing(minilm.components["onnxruntime-cpu"])
    for package in ("onnxruntime", "tokenizers", "numpy"):
        assert f"lib/python3/site-packages/{package}/__init__.py" in entries, package
    report = _imports(minilm.snap, minilm.components["onnxruntime-cpu"], tmp_path)
    others = (OTHER_ENGINES - {"onnxruntime", "tokenizers"}) | {"llama_cpp"}
    assert set(report["missing"]) <= others | TOOLKIT_ONLY, report["missing"]
    # the llama.cpp engine's modules need the llama.cpp component; nothing else may fail
    assert {m for m, e in report["failures"].items() if "llama_cpp" not in e} == set()


def test_a_module_deleted_from_the_checkout_leaves_the_snap(
    packed: Packed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """craft-parts' update of a local source copies new files and never deletes: a module once
    packed (deleted since, or another checkout's sharing the work dir) stayed installed beside
    the code that replaced it, and the snap's imports broke (CI saw it). Now the part whose
    pulled source holds such a file is cleaned and pulled again."""
    import snapbuild.pack.packer as packer

    stray = "snapbuild-src/snaps/zz_left_over.py"

    def with_stray(*args: Any, **kwargs: Any) -> Any:
        built = make(*args, **kwargs)
        (Path(args[1]) / stray).write_text("GONE = False\n", encoding="utf-8")
        return built

    monkeypatch.setattr(packer, "make", with_stray)
    first = _pack("smollm2", tmp_path / "with")
    assert f"{SITE}/snaps/zz_left_over.py" in _listing(first.snap)
    monkeypatch.setattr(packer, "make", make)
    (first.work / "render" / stray).unlink()  # the render no longer writes it
    second = _pack("smollm2", tmp_path / "without")
    listing = _listing(second.snap)
    assert f"{SITE}/snaps/zz_left_over.py" not in listing
    assert f"{SITE}/snaps/manager.py" in listing
    assert not (
        second.work / "craft" / "parts" / "snapbuild" / "src" / stray.split("/", 1)[1]
    ).exists()
