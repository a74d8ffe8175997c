"""`validate`, `make` and `try` check a manifest against the model files on this machine and
the licence against what snapd accepts; each difference names the field and what the file says."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.new_models import write_chat_gguf
from support.tiny_models import CHATML_TEMPLATE

from snapbuild.cli import cli, run_cli
from snapbuild.manifest.spdx import license_problem, license_table
from snaps.daemon import ModelUnloadable, check_loadable


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run_cli(cli, list(argv), prog_name="snapbuild")
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def made(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Path:
    model = write_chat_gguf(tmp_path / "tiny-chat-F16.gguf", chat_template=CHATML_TEMPLATE)
    code, _, err = _run(capsys, "new", str(model), "-o", str(tmp_path / "m.yaml"))
    assert code == 0, err
    return tmp_path / "m.yaml"


def _edit(path: Path, change: str, to: str) -> None:
    text = path.read_text()
    assert change in text
    path.write_text(text.replace(change, to, 1))


def test_a_wrong_fact_is_named_with_what_the_file_says(
    capsys: pytest.CaptureFixture[str], made: Path
) -> None:
    _edit(made, "  layers: 2\n", "  layers: 32\n")
    _edit(made, "quantization: F16", "quantization: Q8_0")
    code, _, err = _run(capsys, "validate", str(made))
    assert code == 2
    assert (
        "error: model.layers: the manifest says 32; tiny-chat-F16.gguf says 2 (llama.block_count)"
        "\n  fix: set model.layers: 2" in err
    )
    assert (
        "error: artifacts[0].quantization: the manifest says Q8_0; tiny-chat-F16.gguf is F16 "
        "(general.file_type)" in err
    )
    code, _, err = _run(capsys, "make", str(made), "-o", str(made.parent / "out"))
    assert code == 2 and "does not match its model files (2 problems)" in err
    assert not (made.parent / "out").exists()


def test_wrong_size_sha256_and_a_text_file_are_caught(
    capsys: pytest.CaptureFixture[str], made: Path
) -> None:
    model = made.parent / "tiny-chat-F16.gguf"
    data = yaml.safe_load(made.read_text())
    real = data["artifacts"][0]["files"][0]
    _edit(made, real["sha256"], "ab" * 32)
    code, _, err = _run(capsys, "validate", str(made))
    assert code == 2
    assert (
        f"artifacts[0].files[0].sha256: the manifest says {'ab' * 32}; {model} has sha256 " in err
    )
    assert f"set sha256: {real['sha256']}" in err
    _edit(made, "ab" * 32, real["sha256"])
    model.write_bytes(b"not a model\n" * (real["size"] // 12) + b"x" * (real["size"] % 12))
    code, _, err = _run(capsys, "validate", str(made))
    assert code == 2 and "artifacts[0].files[0].sha256" in err  # same size, other bytes
    code, _, err = _run(capsys, "validate", str(made))
    model.write_text("hello")
    code, _, err = _run(capsys, "validate", str(made))
    assert (
        f"artifacts[0].files[0].size: the manifest says {real['size']} bytes; {model} is 5" in err
    )


def test_text_file_with_the_right_hash_fails_on_format(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A manifest written for a text file renamed .gguf (hash and size agree) still fails."""
    import hashlib

    fake = tmp_path / "fake.gguf"
    fake.write_text("not a model\n")
    manifest = {
        "name": "fake",
        "title": "Fake",
        "summary": "A text file",
        "description": "x",
        "license": "MIT",
        "version": "1",
        "architectures": ["amd64"],
        "model": {"architecture": "llama"},
        "artifacts": [
            {
                "name": "weights",
                "format": "gguf",
                "quantization": "F16",
                "files": [
                    {
                        "path": "fake.gguf",
                        "sha256": hashlib.sha256(fake.read_bytes()).hexdigest(),
                        "size": fake.stat().st_size,
                        "local": {"path": "fake.gguf"},
                    }
                ],
            }
        ],
        "engines": [
            {"name": "cpu", "summary": "s", "runtime": "llama.cpp-cpu", "artifact": "weights"}
        ],
    }
    (tmp_path / "fake.yaml").write_text(yaml.safe_dump(manifest))
    code, _, err = _run(capsys, "validate", str(tmp_path / "fake.yaml"))
    assert code == 2
    assert f"error: artifacts[0].files[0].path: {fake} is not a GGUF file: it starts with " in err
    with pytest.raises(ModelUnloadable, match="is not a GGUF file"):
        check_loadable(fake, "gguf")


def test_file_urls_and_sourceless_files_are_refused(
    capsys: pytest.CaptureFixture[str], made: Path
) -> None:
    _edit(made, "    sha256:", "    url: file:///tmp/x.gguf\n    sha256:")
    code, _, err = _run(capsys, "validate", str(made))
    assert code == 2
    assert "url 'file:///tmp/x.gguf' is not an http(s) URL; for a file on this machine" in err


def test_licences_snapd_accepts(capsys: pytest.CaptureFixture[str], made: Path) -> None:
    assert license_problem("Apache-2.0") is None
    assert license_problem("(MIT OR Apache-2.0) AND BSD-3-Clause") is None
    assert license_problem("GPL-2.0+ WITH Classpath-exception-2.0") is None
    assert license_problem("Proprietary") is None
    assert license_problem("Gemma") == "'Gemma' is not an SPDX licence id snapd knows"
    assert license_problem("apache-2.0") == (
        "'apache-2.0' is not an SPDX licence id snapd knows (did you mean 'Apache-2.0'?)"
    )
    assert license_problem("MIT Apache-2.0") == "missing AND or OR before 'Apache-2.0'"
    assert license_problem("MIT AND") == "the expression ends with AND"
    assert license_problem("(MIT") == "unbalanced '('"
    table = license_table()
    assert table.list_version == "3.11" and len(table.licenses) == 449
    assert "Apache-2.0" in table.licenses and "GCC-exception-3.1" in table.exceptions
    _edit(made, "license: Apache-2.0", "license: Gemma")
    code, out, err = _run(capsys, "validate", str(made))
    assert code == 0  # a warning: the builder leaves license: out and ships the text
    assert "warning: license: 'Gemma' is not an SPDX licence id snapd knows" in err
    assert "1 warning" in out


def test_shipped_manifests_still_validate(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "validate", "gemma3", "smollm2", "minilm")
    assert code == 0, err
    assert "warning: license: 'Gemma' is not an SPDX licence id snapd knows" in err
    assert "smollm2: ok (smollm2, 4 engines)\n" in out
