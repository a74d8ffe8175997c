"""The safety net behind the one error handler: an exception no code path expected (a bug of
ours) still ends in a message, exit code 70 and the traceback in a log file, for both the
toolkit's click commands (``run_cli``, also the snap's CLI) and ``hwprobe``'s argparse CLI."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest

from hwprobe import cli as hwprobe_cli
from snapbuild.cli import run_cli
from snapcommon.errors import EXIT_INTERNAL


@click.command()
def broken() -> None:
    """A command with a bug."""
    raise KeyError("slots")


def test_click_command_bug_is_a_message_and_a_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert run_cli(broken, [], prog_name="demo") == EXIT_INTERNAL
    out, err = capsys.readouterr()
    folder = tmp_path / "demo" / "log"
    (log,) = folder.iterdir()
    assert (out, err.splitlines()) == (
        "",
        [
            "Error: internal error: KeyError: 'slots'",
            f"  the traceback is in {log}",
            "Fix: this is a bug in demo; please report it with that file",
        ],
    )
    text = log.read_text(encoding="utf-8")
    assert text.startswith("Traceback (most recent call last):")
    assert 'raise KeyError("slots")' in text and text.endswith("KeyError: 'slots'\n")


def test_unwritable_state_dir_falls_back_to_the_temporary_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state folder should be")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    assert run_cli(broken, [], prog_name="demo") == EXIT_INTERNAL
    (log,) = (tmp_path / "tmp").iterdir()
    assert f"  the traceback is in {log}\n" in capsys.readouterr().err


def test_hwprobe_bug_is_a_message_and_a_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))

    def probe_with_a_bug(*_: object, **__: object) -> str:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(hwprobe_cli, "_run_probe", probe_with_a_bug)
    assert hwprobe_cli.run([]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.startswith("Error: internal error: ZeroDivisionError: division by zero\n")
    (log,) = (tmp_path / "hwprobe" / "log").iterdir()
    assert log.name.startswith("hwprobe-") and log.name.endswith(f"-{os.getpid()}.log")
    assert "ZeroDivisionError" in log.read_text(encoding="utf-8")
