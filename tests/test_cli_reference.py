"""docs/cli.md is generated from the commands themselves, and the committed page is that output.

The page is put together here, not in :mod:`snapbuild.commands.reference`, because the in-snap
``<snap>`` command is ``snaps.cli`` and ``snaps`` sits above ``snapbuild`` (tests/test_layers.py).
After a change to any command, option or help text, regenerate the page with
``SNAPBUILD_UPDATE_GOLDEN=1 pytest tests/test_cli_reference.py`` and review the diff.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import click
import pytest

from hwprobe.cli import parsers
from snapbuild.cli import cli as snapbuild_cli
from snapbuild.commands.reference import MissingHelp, argparse_doc, click_docs, markdown
from snaps.cli import cli as snap_cli

PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"

INTRO = """\
# CLI reference

Every command, argument and option of `snapbuild`, of the `<snap>` command inside an installed
snap (it is named after the snap: `gemma3 status`), and of `hwprobe`, with the help each prints.
Every command also takes `-h` / `--help`. Exit codes: 0 success, 2 bad input, 3 no engine fits.

Generated from the commands themselves (`snapbuild/commands/reference.py`); do not edit by hand:
`SNAPBUILD_UPDATE_GOLDEN=1 pytest tests/test_cli_reference.py` rewrites this page, and that test
fails while the page and the commands differ.
"""


def cli_page() -> str:
    """The whole reference: snapbuild, then the snap's own command, then hwprobe."""
    docs = [
        *click_docs(snapbuild_cli, "snapbuild"),
        *click_docs(snap_cli, "<snap>"),
        *(argparse_doc(parser) for parser in parsers()),
    ]
    return INTRO + "\n" + markdown(docs)


def test_committed_cli_reference_is_the_generated_one() -> None:
    text = cli_page()
    if os.environ.get("SNAPBUILD_UPDATE_GOLDEN") == "1":
        PAGE.write_text(text, encoding="utf-8")
    assert PAGE.exists(), f"{PAGE} is missing: run with SNAPBUILD_UPDATE_GOLDEN=1 and review it"
    assert PAGE.read_text(encoding="utf-8") == text


def _tool() -> click.Group:
    @click.group()
    def tool() -> None:
        """A tool."""

    return tool


def test_a_command_without_help_text_stops_the_generator() -> None:
    tool = _tool()

    @tool.command()
    def frob() -> None:
        pass

    with pytest.raises(MissingHelp, match="`tool frob` has no help text"):
        click_docs(tool, "tool")


def test_an_option_without_help_text_stops_the_generator() -> None:
    tool = _tool()

    @tool.command()
    @click.option("--level", default=3)
    def frob(level: int) -> None:
        """Frob at a level."""

    with pytest.raises(MissingHelp, match="`tool frob` --level has no help text"):
        click_docs(tool, "tool")


def test_an_argparse_option_without_help_text_stops_the_generator() -> None:
    parser = argparse.ArgumentParser(prog="probe", description="Probe things.")
    parser.add_argument("--root")
    with pytest.raises(MissingHelp, match="`probe` --root ROOT has no help text"):
        argparse_doc(parser)


def test_hidden_commands_stay_out_and_options_show_their_defaults() -> None:
    tool = _tool()

    @tool.command()
    @click.argument("names", nargs=-1)
    @click.option("--level", default=3, help="How hard.")
    def frob(names: tuple[str, ...], level: int) -> None:
        """Frob NAMES."""

    @tool.command(hidden=True)
    def secret() -> None:
        """Not for people."""

    text = markdown(click_docs(tool, "tool"))
    assert "secret" not in text
    assert "tool frob [OPTIONS] [NAMES]..." in text
    assert "| `NAMES...` | Optional, any number. |" in text
    assert "| `--level INTEGER` | How hard.  [default: 3] |" in text
