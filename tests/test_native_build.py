"""The contract between the llama.cpp recipe and the loader, proven by building the recipe.

The catalog's cmake recipe for ``llama.cpp-cpu`` is built exactly as snapcraft's cmake plugin
would build it (same source at the pinned commit, same parameters, DESTDIR install organized as
the component), then the real daemon runs SmolLM2 from that tree through ``snapbuild try``,
with the environment the snap gets. The build is cached by recipe (``make install`` already built
it, so this finds it); the first build on a new machine takes tens of minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtimes.catalog import load_catalog
from runtimes.component_tree import ROOT_VAR, ComponentTree, multiarch_triplet
from snapbuild.recipes.native import STAMP, build_component, built_from, recipe_for

pytestmark = pytest.mark.slow

# llama.cpp's GGML_CPU_ALL_VARIANTS list for x86 at the pinned commit (ggml/src/CMakeLists.txt):
# one backend module per ISA level, the best one chosen at load time.
X86_VARIANTS = [
    "alderlake", "cannonlake", "cascadelake", "cooperlake", "haswell", "icelake", "ivybridge",
    "piledriver", "sandybridge", "sapphirerapids", "skylakex", "sse42", "x64", "zen4",
]  # fmt: skip


@pytest.fixture(scope="module")
def tree() -> ComponentTree:
    return ComponentTree(build_component("llama.cpp-cpu"))


def test_the_tree_has_the_recipe_and_the_layout_the_loader_reads(tree: ComponentTree) -> None:
    stamp = json.loads((tree.root / STAMP).read_text())
    _, recipe, _ = recipe_for(load_catalog(), "llama.cpp-cpu")
    built, wanted = dict(stamp["recipe"]), built_from(recipe)
    # a tree built when the pin was abbreviated is the same build (native.built_before)
    assert recipe.source_commit.startswith(built.pop("source_commit"))
    wanted.pop("source_commit")
    assert built == wanted
    assert tree.problems() == []
    assert tree.library_dirs[0] == tree.root / "usr" / "lib"
    libs = sorted(p.name for p in (tree.root / "usr" / "lib").glob("lib*.so"))
    assert {"libllama.so", "libggml.so", "libggml-base.so", "libmtmd.so"} <= set(libs)
    if platform.machine() == "x86_64":
        backends = sorted(p.name for p in tree.backend_dir.glob("libggml-cpu-*.so"))
        kept = [v for v in X86_VARIANTS if v != "sapphirerapids"]  # removed: see the catalog
        assert backends == sorted(f"libggml-cpu-{v}.so" for v in kept)


def test_llama_server_runs_from_the_tree(tree: ComponentTree) -> None:
    env = {**os.environ, "LD_LIBRARY_PATH": tree.library_path()}
    done = subprocess.run(
        [str(tree.server), "--version"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "version:" in done.stdout + done.stderr


def test_library_path_puts_the_tree_first_and_keeps_what_was_there(tmp_path: Path) -> None:
    (tmp_path / "usr" / "lib" / multiarch_triplet()).mkdir(parents=True)
    staged = ComponentTree(tmp_path)
    assert staged.library_path("/x") == os.pathsep.join(
        [str(tmp_path / "usr" / "lib"), str(tmp_path / "usr" / "lib" / multiarch_triplet()), "/x"]
    )
    assert staged.problems() == [
        f"{tmp_path}/usr/bin/llama-server (llama-server)",
        f"{tmp_path}/usr/lib/libllama.so",
        f"{tmp_path}/usr/bin/libggml-cpu*.so (GGML CPU backends)",
    ]


def _trial_processes(work: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(work) in (proc / "environ").read_bytes().decode(errors="replace"):
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def _mapped(pid: int) -> set[str]:
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return set()
    return {line.split()[-1] for line in lines if line.endswith(".so") or ".so." in line}


@pytest.fixture
def running_try(tmp_path: Path, tree: ComponentTree) -> Iterator[tuple[Path, list[str]]]:
    work = tmp_path / "smollm2"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if k != ROOT_VAR}  # found through the venv link
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "snapbuild"), "try", "smollm2", "--as", "trial",
         "--port", port, "--work-dir", str(work), "--keep-running"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    lines: list[str] = []
    deadline = time.monotonic() + 240
    try:
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if line.startswith("Endpoint: "):  # the whole answer has been printed
                break
        yield work, lines
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_the_daemon_serves_smollm2_from_the_built_component(
    running_try: tuple[Path, list[str]], tree: ComponentTree
) -> None:
    work, lines = running_try
    printed = "\n".join(lines)
    assert "\nsmollm2: " in printed and "\nEndpoint: " in printed, printed
    answer = printed.split("\nsmollm2: ", 1)[1].split("\nEndpoint: ", 1)[0]
    assert len(answer.split()) >= 3  # a real sentence came back, whatever its line breaks
    staged = work / "staged-components" / "llamacpp-cpu"
    assert (staged / "usr").resolve() == (tree.root / "usr").resolve()
    mapped = set().union(*(_mapped(pid) for pid in _trial_processes(work)))
    real = tree.root.resolve()
    libllama = (real / "usr" / "lib" / "libllama.so").resolve()  # maps names the real file
    assert str(libllama) in mapped, sorted(mapped)
    assert any(m.startswith(str(real / "usr" / "bin" / "libggml-cpu-")) for m in mapped)
