"""Every command that takes MODEL takes a manifest name or a path to a manifest file: absolute,
relative, or `./relative` (`snapbuild try /abs/model.yaml` once pasted the path into a temporary
directory's name and crashed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.new_models import write_chat_gguf
from support.tiny_models import CHATML_TEMPLATE

from snapbuild.cli import cli, run_cli
from snapbuild.trial.run import run_trial

SHIPPED = Path(__file__).resolve().parent.parent / "manifests" / "smollm2.yaml"
MACHINES = Path(__file__).resolve().parent / "data" / "machines"
HOST = str(MACHINES / "raspberry-pi-5" / "machine-root")
FORMS = ("absolute", "relative", "dot-relative")


def _form(form: str, path: Path, cwd: Path) -> str:
    rel = path.relative_to(cwd)
    return {"absolute": str(path), "relative": str(rel), "dot-relative": f"./{rel}"}[form]


@pytest.fixture
def manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "sub").mkdir()
    target = tmp_path / "sub" / "smollm2.yaml"
    shutil.copy(SHIPPED, target)
    monkeypatch.chdir(tmp_path)
    return target


# (argv with MODEL where the path goes, the exit status expected, text the output holds)
COMMANDS: list[tuple[tuple[str, ...], int, str]] = [
    (("validate", "MODEL"), 0, "ok (smollm2, 4 engines)"),
    (("select", "MODEL", "--host-root", HOST, "--json"), 0, '"model": "smollm2"'),
    (("engines", "MODEL", "--host-root", HOST), 0, "llama.cpp-cpu"),
    (("why-not", "MODEL", "cuda", "--host-root", HOST), 0, "cuda cannot run here"),
    (("matrix", "MODEL"), 0, '"model": "smollm2"'),
    (("ci", "MODEL"), 0, "snapbuild make"),
    (("make", "MODEL", "-o", "out", "--json"), 0, '"model": "smollm2"'),
    (("fetch", "MODEL", "--json"), 0, '"action": "local"'),
    (("fleet", "plan", "MODEL", str(MACHINES / "raspberry-pi-5")), 0, "smollm2"),
    (("serve", "MODEL", "--engine", "no-such-engine"), 2, "has no engine 'no-such-engine'"),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("argv,code,expected", COMMANDS, ids=[c[0][0] for c in COMMANDS])
def test_every_model_command_takes_every_path_form(
    capsys: pytest.CaptureFixture[str],
    manifest: Path,
    tmp_path: Path,
    form: str,
    argv: tuple[str, ...],
    code: int,
    expected: str,
) -> None:
    model = _form(form, manifest, tmp_path)
    args = [model if a == "MODEL" else a for a in argv]
    got = run_cli(cli, args, prog_name="snapbuild")
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert got == code, err
    assert expected in out + err


@pytest.mark.slow
@pytest.mark.parametrize("form", FORMS)
def test_try_takes_every_path_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    pytest.importorskip("llama_cpp")
    (tmp_path / "models").mkdir()
    model = write_chat_gguf(
        tmp_path / "models" / "tiny-chat-F16.gguf", chat_template=CHATML_TEMPLATE
    )
    monkeypatch.chdir(tmp_path)
    manifest = tmp_path / "models" / "tiny.yaml"
    assert run_cli(cli, ["new", str(model), "-o", str(manifest)], prog_name="snapbuild") == 0
    lines: list[str] = []
    result = run_trial(_form(form, manifest, tmp_path), echo=lines.append, max_tokens=4)
    assert result.trial.work.name.startswith("snapbuild-try-tiny-chat-")
    assert result.answer is not None
    assert any(line.startswith("  [") and "serving: serving cpu" in line for line in lines)
    status = json.loads(result.trial.run("status", "--json").stdout)
    assert status["model"] == "tiny-chat"
