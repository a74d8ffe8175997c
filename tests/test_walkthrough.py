"""docs/new-model.md's walkthrough, run as written: every `$ snapbuild ...` line of its block, in
order, in one directory holding a generated GGUF (real llama.cpp in `try`)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from support.new_models import write_chat_gguf
from support.tiny_models import CHATML_TEMPLATE

from snapbuild.cli import cli, run_cli
from snapbuild.manifest.loader import load_manifest

DOC = Path(__file__).resolve().parent.parent / "docs" / "new-model.md"
pytestmark = pytest.mark.slow


def walkthrough() -> list[list[str]]:
    """The commands of the doc's walkthrough block, as argument lists."""
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- walkthrough.*?```console\n(.*?)```", text, re.S)
    assert block is not None, "docs/new-model.md lost its walkthrough block"
    return [shlex.split(line[2:]) for line in block.group(1).splitlines() if line.startswith("$ ")]


def test_the_walkthrough_runs_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("llama_cpp")
    commands = walkthrough()
    assert [c[:2] for c in commands] == [
        ["snapbuild", "new"],
        ["snapbuild", "validate"],
        ["snapbuild", "engines"],
        ["snapbuild", "try"],
        ["snapbuild", "make"],
    ]
    monkeypatch.chdir(tmp_path)
    # the development trial: the packed snap as snapd runs it is tests/test_snap_confined.py's
    monkeypatch.setenv("SNAPBUILD_TRY_AS", "trial")
    write_chat_gguf(tmp_path / "tiny-chat-F16.gguf", chat_template=CHATML_TEMPLATE)
    outputs = []
    for argv in commands:
        code = run_cli(cli, argv[1:], prog_name="snapbuild")
        out, err = capsys.readouterr()
        assert code == 0, f"{shlex.join(argv)} failed:\n{err}"
        assert "Traceback" not in err
        outputs.append(out)
    assert outputs[0].startswith("wrote tiny-chat.yaml (tiny-chat, 6 engines)\n")
    assert outputs[1] == "tiny-chat.yaml: ok (tiny-chat, 6 engines)\n"
    assert re.search(r"^cpu +llama\.cpp-cpu +cpu +F16 +yes .* 1 +\*$", outputs[2], re.M)
    assert "tiny-chat: " in outputs[3] and "Endpoint: http://127.0.0.1:" in outputs[3]
    manifest = load_manifest(tmp_path / "tiny-chat.yaml")
    project = yaml.safe_load((tmp_path / "tiny-chat-snap" / "snap" / "snapcraft.yaml").read_text())
    assert project["name"] == manifest.name
    staged = (
        tmp_path / "tiny-chat-snap" / "local-artifacts" / "tiny-chat-f16" / "tiny-chat-F16.gguf"
    )
    assert staged.read_bytes() == (tmp_path / "tiny-chat-F16.gguf").read_bytes()
