"""gemma3's CPU snap, packed by `snapbuild pack` and run as snapd runs it, with tiny generated
GGUFs standing in for its weights (the upstream files are gigabytes and their checksums are
placeholders here): a tiny decoder for every size and quantization, and a tiny Gemma 3
projector for the sizes that read images (tests/support/tiny_vision.py). Everything else is the
shipped manifest: the model ladder (270M to 27B), its engines, its licence, its ports.

What it shows beyond smollm2 (tests/test_snap_confined.py): a ladder's components (one per size
and quantization, the projectors) packed and installed only for the size the selector chose,
and images read through the projector inside the packed snap.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from support.confined import harness_or_skip, pack_or_skip, port_of, wait_ready
from support.tiny_vision import write_png, write_tiny_vision_model

from snapbuild.pack import Packed
from snapbuild.paths import manifests_dir
from snapbuild.trial.snapd import RunResult, SnapRun

pytestmark = pytest.mark.slow


def _file(path: str, local: Path) -> dict[str, Any]:
    return {
        "path": path,
        "url": f"https://example.invalid/{path}",
        "sha256": hashlib.sha256(local.read_bytes()).hexdigest(),
        "size": local.stat().st_size,
        "local": {"path": str(local)},
    }


def tiny_gemma3(directory: Path) -> Path:
    """The shipped gemma3 manifest, every GGUF replaced by a tiny one under its own name; the
    OpenVINO IR (and its engines) left out: the CPU snap does not carry them."""
    model, projector = write_tiny_vision_model(directory / "tiny")
    data = yaml.safe_load((manifests_dir() / "gemma3.yaml").read_text())
    kept = []
    for artifact in data["artifacts"]:
        if artifact["format"] != "gguf":
            continue
        source = projector if artifact.get("role") == "projector" else model
        name = artifact["files"][0]["path"]
        local = directory / "weights" / name
        local.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, local)
        artifact["files"] = [_file(name, local)]
        kept.append(artifact)
    data["artifacts"] = kept
    data["engines"] = [e for e in data["engines"] if not e["runtime"].startswith("openvino")]
    path = directory / "gemma3.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def life(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Packed, SnapRun, list[Any]]]:
    harness_or_skip()
    where = tmp_path_factory.mktemp("gemma3")
    packed = pack_or_skip(tiny_gemma3(where), where / "out")
    with SnapRun(packed.snap, where / "run", components=dict(packed.components)) as run:
        yield packed, run, run.install()


def _chosen(install: list[RunResult]) -> str:
    """The size the install hook chose (`selected model option X ...` or the engine line)."""
    for line in install[0].stderr.splitlines():
        if line.startswith("selected "):
            return line
    raise AssertionError(install[0].stderr)


def test_the_ladder_packs_one_component_per_size_and_quantization(
    life: tuple[Packed, SnapRun, list[Any]],
) -> None:
    packed, _, _ = life
    weights = sorted(name for name in packed.components if name.startswith("gemma3-"))
    assert weights == sorted(
        [
            *(f"gemma3-{size}-{q}" for size in ("27b", "12b", "4b") for q in ("q4-k-m", "q8-0")),
            *(f"gemma3-{size}-mmproj-f16" for size in ("27b", "12b", "4b")),
            *(f"gemma3-{size}-{q}" for size in ("1b", "270m") for q in ("q4-k-m", "q8-0")),
        ]
    )
    assert "llamacpp-cpu" in packed.components


def test_install_takes_only_the_chosen_sizes_components(
    life: tuple[Packed, SnapRun, list[Any]],
) -> None:
    _, run, install = life
    assert [(Path(r.argv[0]).name, r.returncode) for r in install] == [
        ("install", 0),
        ("configure", 0),
    ], install
    _chosen(install)
    status = run.run_app("gemma3", ["status", "--json"])
    assert status.returncode == 0, status
    data = yaml.safe_load(status.stdout)
    option, engine = data["option"]["name"], data["engine"]
    installed = sorted(run.installed_components())
    quant = "q8-0" if engine.endswith("q8") else "q4-k-m"
    expected = ["llamacpp-cpu", f"gemma3-{option}-{quant}"]
    if "vision" in data["option"]["reads"]:
        expected.append(f"gemma3-{option}-mmproj-f16")
    assert installed == sorted(expected)
    models = run.run_app("gemma3", ["models"])
    assert models.returncode == 0, models
    for size in ("27b", "12b", "4b", "1b", "270m"):
        assert size in models.stdout


def test_it_reads_an_image_through_the_packed_projector(
    life: tuple[Packed, SnapRun, list[Any]], tmp_path: Path
) -> None:
    _, run, _ = life
    port = port_of(run)
    health = wait_ready(run, port)
    if "vision" not in health["inputs"]:
        pytest.skip(f"the chosen size reads text only here: {health['inputs']}")
    png = base64.b64encode(write_png(tmp_path / "p.png").read_bytes()).decode()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
    answer = client.chat.completions.create(
        model="gemma3",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
                ],
            }
        ],
        max_tokens=4,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 4
    text_only = client.chat.completions.create(
        model="gemma3",
        messages=[{"role": "user", "content": "What is this?"}],
        max_tokens=1,
        temperature=0,
    )
    assert text_only.usage is not None
    assert answer.usage.prompt_tokens > text_only.usage.prompt_tokens  # the image's tokens
