"""The selection commands: JSON contract of select, exit codes, the engines table, why-not,
host profiles from files, the JSON Schema export and validate."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from support.manifests import GEMMA3_4B

import hwprobe
from snapbuild.cli import cli, run_cli
from snapbuild.paths import manifests_dir

MACHINES = Path(__file__).parent / "data" / "machines"
ARC = str(MACHINES / "i7-2600k+arc-a580" / "machine-root")
RISCV = str(MACHINES / "sifive-p550-premier" / "machine-root")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run_cli(cli, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_select_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "select", "smollm2", "--host-root", ARC, "--json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert list(data) == ["model", "selected", "candidates", "warnings", "precedence"]
    assert data["model"] == "smollm2"
    sel = data["selected"]
    assert {k: sel[k] for k in ("engine", "runtime", "device", "vendor", "context-size")} == {
        "engine": "vulkan",
        "runtime": "llama.cpp-vulkan",
        "device": "gpu",
        "vendor": "intel",
        "context-size": 4096,
    }
    assert [(c["engine"], c["compatible"], c["rank"]) for c in data["candidates"]] == [
        ("vulkan", True, 1),
        ("cpu", True, 2),
        ("cuda", False, None),
        ("cpu-avx2", False, None),
    ]
    for cand in data["candidates"]:
        assert isinstance(cand["reasons"], list) and cand["reasons"]
        if cand["memory"] is not None:
            assert set(cand["memory"]) >= {"required", "available"}


def test_select_exits_3_when_no_engine_fits(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "select", "minilm", "--host-root", RISCV)
    assert code == 3
    assert out.splitlines()[0] == "minilm: no compatible engine"
    assert err == (
        "Error: minilm: no compatible engine on this machine\n"
        "  cuda: snap not built for riscv64 (only amd64, arm64); needs an NVIDIA GPU "
        "(onnxruntime-cuda): none found\n"
        "  openvino: experimental: considered only with --experimental; snap not built for "
        "riscv64 (only amd64, arm64); needs an Intel GPU (onnxruntime-openvino): none found\n"
        "  cpu: snap not built for riscv64 (only amd64, arm64)\n"
        "Fix: run on a machine that meets one engine's requirements, free memory, or add an "
        "engine for this hardware to the manifest\n"
    )


def test_engines_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "engines", "smollm2", "--host-root", ARC)
    assert code == 0
    assert out == (
        "engine    runtime           device  quantization  compatible  fit              rank"
        "  active\n"
        "vulkan    llama.cpp-vulkan  gpu     Q4_1          yes         956 MiB/7.5 GiB  1"
        "     *\n"
        "cpu       llama.cpp-cpu     cpu     Q4_1          yes         364 MiB/9.3 GiB  2\n"
        "cuda      llama.cpp-cuda    gpu     Q4_1          no          -                -\n"
        "cpu-avx2  llama.cpp-cpu     cpu     Q4_1          no          364 MiB/9.3 GiB  -\n"
    )


def test_engines_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "engines", "smollm2", "--host-root", ARC, "--json")
    assert code == 0
    assert [(r["engine"], r["active"]) for r in json.loads(out)] == [
        ("vulkan", True),
        ("cpu", False),
        ("cuda", False),
        ("cpu-avx2", False),
    ]


def test_why_not(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "why-not", GEMMA3_4B, "cpu-avx2", "--host-root", ARC) == (
        0,
        "cpu-avx2 cannot run here:\n  - needs AVX2, FMA, F16C: CPU has AVX only\n",
        "",
    )
    code, out, _ = run(capsys, "why-not", GEMMA3_4B, "vulkan", "--host-root", ARC)
    assert out == (
        "vulkan is the selected engine: vulkan and runner-up openvino-gpu both reach the "
        "sufficient 40 tokens/s; Q4_K_M keeps more precision than int4\n"
        "  serving: 10 parallel slots x 8192 tokens, f16 KV cache, flash attention on, "
        "prompt-cache reuse from 256 tokens, 334 MiB prompt cache (10 of the preferred 16 "
        "slots fit (7.35 GiB of 7.54 GiB))\n"
    )
    code, out, err = run(capsys, "why-not", GEMMA3_4B, "metal", "--host-root", ARC)
    assert code == 2
    assert err.startswith("Error: gemma3 has no engine named 'metal'\n")


def test_why_not_a_ladders_option(capsys: pytest.CaptureFixture[str]) -> None:
    """A ladder's option: why that size does not run (each engine's blockers); an engine: on
    the option that runs, or OPTION/ENGINE."""
    code, out, _ = run(capsys, "why-not", "gemma3", "12b", "--host-root", ARC)
    assert code == 0
    assert out.splitlines()[:6] == [
        "12b (12B parameters, 6.8 GiB, text+vision): runs here; vulkan: Intel VRAM 7.5 GiB < "
        "10.7 GiB needed even at the minimum context 2048 (11.1 GiB at 8192); on cpu-x86-64 "
        "~3.7 tokens/s here, below the 5 tokens/s floor",
        "  - cpu-x86-64: rank 8",
        "  - cuda: needs an NVIDIA GPU (llama.cpp-cuda): Intel Arc A580 at 0000:03:00.0 is "
        "Intel, not NVIDIA",
        "  - cuda-q8: needs an NVIDIA GPU (llama.cpp-cuda): Intel Arc A580 at 0000:03:00.0 is "
        "Intel, not NVIDIA",
        "  - rocm: needs an AMD GPU (llama.cpp-rocm): Intel Arc A580 at 0000:03:00.0 is Intel, "
        "not AMD",
        "  - vulkan: Intel VRAM 7.5 GiB < 10.7 GiB needed even at the minimum context 2048 "
        "(11.1 GiB at 8192)",
    ]
    code, out, _ = run(capsys, "why-not", "gemma3", "27b/vulkan", "--host-root", ARC)
    assert out == (
        "27b/vulkan cannot run here:\n  - Intel VRAM 7.5 GiB < 20.3 GiB needed even at the "
        "minimum context 2048 (20.9 GiB at 8192)\n"
    )
    code, out, _ = run(capsys, "why-not", "gemma3", "cpu-x86-64", "--host-root", ARC)
    assert out.splitlines()[0] == "4b/cpu-x86-64 is compatible (rank 3) but 4b/vulkan ranks first:"


def test_host_profile_file_gives_the_same_decision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "host.json"
    profile.write_text(hwprobe.probe(ARC).to_json(), encoding="utf-8")
    _, from_root, _ = run(capsys, "select", "gemma3", "--host-root", ARC, "--json")
    assert json.loads(from_root)["selected"]["option"] == "4b"
    _, from_file, _ = run(capsys, "select", "gemma3", "--host", str(profile), "--json")
    assert json.loads(from_file) == json.loads(from_root)


def test_bad_host_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "host.json"
    bad.write_text('{"cpus": "many"}', encoding="utf-8")
    code, _, err = run(capsys, "select", "gemma3", "--host", str(bad))
    assert code == 2 and err.startswith(f"Error: {bad} is not a host profile\n")
    code, _, err = run(capsys, "select", "gemma3", "--host", str(bad), "--host-root", ARC)
    assert (code, err) == (
        2,
        "Error: --host-root and --host both given\nFix: give one of them, not both\n",
    )
    code, _, err = run(capsys, "select", "gemma3", "--host-root", str(tmp_path / "nope"))
    assert code == 2 and "is not a directory" in err
    binary = tmp_path / "host.bin"
    binary.write_bytes(b"\x00\x01\xff\xfe")
    code, _, err = run(capsys, "select", "gemma3", "--host", str(binary))
    assert (code, err) == (
        2,
        f"Error: {binary} is not a host profile\n  not UTF-8 text (byte 2): a profile is JSON\n"
        "Fix: give a file written by `hwprobe --json`\n",
    )


def test_schema_validates_the_shipped_manifests_and_rejects_typos(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "schema")
    assert code == 0
    schema = json.loads(out)
    assert schema["title"] == "snapbuild model manifest"
    for path in sorted(manifests_dir().glob("*.yaml")):
        jsonschema.validate(yaml.safe_load(path.read_text(encoding="utf-8")), schema)
    data = yaml.safe_load((manifests_dir() / "smollm2.yaml").read_text(encoding="utf-8"))
    data["engines"][0]["runtim"] = "x"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)


def test_validate_the_shipped_manifests(capsys: pytest.CaptureFixture[str]) -> None:
    names = [str(p) for p in sorted(manifests_dir().glob("*.yaml"))]
    code, out, err = run(capsys, "validate", *names)
    assert code == 0
    # gemma3's `license: Gemma` is no SPDX id: a warning (the snap ships the licence as a doc)
    assert err.startswith(f"{names[0]}: warning: license: 'Gemma' is not an SPDX licence id")
    assert out == (
        f"{names[0]}: ok (gemma3, 5 model options, 11 engines, 1 warning)\n"
        f"{names[1]}: ok (minilm, 3 engines)\n"
        f"{names[2]}: ok (smollm2, 4 engines)\n"
    )
