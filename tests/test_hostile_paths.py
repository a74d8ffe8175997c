"""Paths and names an attacker or an unlucky user writes: one file-name rule refuses the same
names in `validate` and `make` (``.``, NUL, ``$(...)``, a trailing ``/``), `new` renames a file
YAML or a shell would misread and escapes it in comments, never leaves a manifest that does
not load, a failed `try` removes its work directory, and a place the user cannot write is a
message (exit 2), not a traceback. Every command runs bounded."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support import hostile
from support.bounded import MIB, Bounded, snapbuild

from snapbuild.cli import cli, run_cli
from snapbuild.manifest.loader import load_manifest


def _bounded(result: Bounded, what: str) -> None:
    print(f"{what}: {result.describe()}")
    assert not result.timed_out and result.peak_rss < 300 * MIB, what
    assert "Traceback" not in result.stderr and result.returncode != 70, result.stderr


def _made(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    model = tmp_path / "model.gguf"
    model.write_bytes(hostile.model_gguf())
    manifest = tmp_path / "m.yaml"
    result = snapbuild("new", str(model), "-o", str(manifest), "--license", "MIT")
    assert result.returncode == 0, result.stderr
    return manifest, yaml.safe_load(manifest.read_text())


@pytest.mark.parametrize("path", [".", "model.gguf/", "x\0y.gguf", "$(touch pwned).gguf", "a//b"])
def test_validate_and_make_refuse_the_same_file_names(tmp_path: Path, path: str) -> None:
    manifest, data = _made(tmp_path)
    data["artifacts"][0]["files"][0]["path"] = path  # type: ignore[index]
    manifest.write_text(yaml.safe_dump(data))
    for command in (
        ("validate", str(manifest)),
        ("make", str(manifest), "-o", str(tmp_path / "o")),
    ):
        result = snapbuild(*command, cwd=tmp_path)
        _bounded(result, f"{command[0]} path {path!r}")
        assert result.returncode == 2
        assert "artifacts[0].files[0].path: path must be a relative path of names" in result.stderr
    assert not (tmp_path / "o").exists() and not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("local", ["x\0y.gguf", "model.gguf/", "a\nb"])
def test_a_local_path_that_names_no_file_is_refused(tmp_path: Path, local: str) -> None:
    manifest, data = _made(tmp_path)
    data["artifacts"][0]["files"][0]["local"]["path"] = local  # type: ignore[index]
    manifest.write_text(yaml.safe_dump(data))
    for command in (
        ("validate", str(manifest)),
        ("make", str(manifest), "-o", str(tmp_path / "o")),
    ):
        result = snapbuild(*command)
        _bounded(result, f"{command[0]} local.path {local!r}")
        assert result.returncode == 2 and "local.path must name a file" in result.stderr


def test_new_refuses_a_file_name_with_a_line_break(tmp_path: Path) -> None:
    model = tmp_path / "evil\nname: pwned.gguf"
    model.write_bytes(hostile.model_gguf())
    result = snapbuild("new", str(model), "-o", str(tmp_path / "m.yaml"))
    _bounded(result, "new with a newline in the file name")
    assert result.returncode == 2 and "holds a line break" in result.stderr
    assert "evil\\nname" in result.stderr and not (tmp_path / "m.yaml").exists()


@pytest.mark.parametrize("name", ["$(id) x.gguf", "a: b #c.gguf", "-rf `x`.gguf"])
def test_new_renames_what_yaml_or_a_shell_would_misread(tmp_path: Path, name: str) -> None:
    model = tmp_path / name
    model.write_bytes(hostile.model_gguf())
    manifest = tmp_path / "m.yaml"
    result = snapbuild("new", str(model), "-o", str(manifest), "--license", "MIT")
    _bounded(result, f"new {name!r}")
    assert result.returncode == 0, result.stderr
    data = yaml.safe_load(manifest.read_text())
    assert "pwned" not in data and set(data) >= {"name", "model", "artifacts", "engines"}
    file = data["artifacts"][0]["files"][0]
    assert file["local"]["path"] == name  # the real name, only ever read by Python
    assert "/" not in file["path"] and file["path"].endswith(".gguf")
    assert snapbuild("validate", str(manifest)).returncode == 0


def test_new_never_leaves_a_manifest_that_does_not_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from snapbuild.inspect import scaffold

    real = scaffold.new_manifest

    def broken(*args: object, **kwargs: object) -> scaffold.Scaffold:
        made = real(*args, **kwargs)  # type: ignore[arg-type]
        made.data["model"]["attention-heads"] = 0  # what no manifest may say
        return made

    monkeypatch.setattr(scaffold, "new_manifest", broken)
    model = tmp_path / "model.gguf"
    model.write_bytes(hostile.model_gguf())
    target = tmp_path / "m.yaml"
    assert run_cli(cli, ["new", str(model), "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"{target} is not a valid manifest" in err and "no manifest was written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf"]


def test_validate_never_suggests_an_invalid_fix(tmp_path: Path) -> None:
    """A file whose value no manifest may hold is named as the file's fault, not offered as the
    fix (``attention-heads: 0``)."""
    from snapbuild.inspect.gguf import read_gguf_facts
    from snapbuild.manifest.checks import _compare

    manifest, _ = _made(tmp_path)
    facts = read_gguf_facts(tmp_path / "model.gguf")
    facts.facts["attention_heads"] = 0
    [finding] = [
        f
        for f in _compare(load_manifest(manifest), "a", load_manifest(manifest).artifacts[0], facts)
        if "heads" in f.field
    ]
    assert "set model.attention-heads: 0" not in finding.fix
    assert "is not a valid model.attention-heads" in finding.fix


def test_a_failed_try_removes_its_work_directory(tmp_path: Path) -> None:
    manifest, data = _made(tmp_path)
    file = data["artifacts"][0]["files"][0]  # type: ignore[index]
    del file["local"]
    file["url"] = "https://example.invalid/model.gguf"  # not fetched: the engine cannot stage
    manifest.write_text(yaml.safe_dump(data))
    env = {"SNAPBUILD_CACHE": str(tmp_path / "cache"), "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    result = snapbuild("try", str(manifest), env=env, timeout=120)
    _bounded(result, "failed try")
    assert result.returncode != 0 and "cannot stage" in result.stderr
    assert list((tmp_path / "tmp").iterdir()) == []  # its mkdtemp work directory is gone
    given = tmp_path / "given"
    given.mkdir()
    result = snapbuild("try", str(manifest), "--work-dir", str(given), env=env, timeout=120)
    assert result.returncode != 0 and list(given.iterdir()) == []


def test_a_place_the_user_cannot_write_is_a_message(tmp_path: Path) -> None:
    """sysfs refuses a new directory even to root (EPERM): what a read-only or foreign place
    answers. A message naming it and exit 2, where it was an internal error (exit 70)."""
    result = snapbuild("make", "smollm2", "-o", "/sys/kernel/snapbuild-out")
    _bounded(result, "make into sysfs")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("Error: /sys/kernel/snapbuild-out: operation not permitted")
