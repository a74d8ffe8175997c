"""What every `<snap>` command shares with the person or program at the other end: the
``--json`` flag, JSON output, the program's name, a yes/no question, and a table."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import click

JSON_OPT = click.option("--json", "as_json", is_flag=True, help="Print JSON for programs.")


def emit(data: Any) -> None:
    """JSON for programs, indented for people who look."""
    click.echo(json.dumps(data, indent=2))


def prog() -> str:
    """The command's name as the user typed it: the snap's name inside a snap."""
    return os.environ.get("SNAP_NAME") or "inference-snap"


def confirm() -> bool:
    """Ask "Continue?"; no (or end of input) means no."""
    try:
        answer = click.confirm("Continue?", default=False)
        if not sys.stdin.isatty():
            click.echo("")  # the piped answer is not echoed; end the prompt's line
        return answer
    except click.exceptions.Abort:
        click.echo("")
        return False


def table(rows: Sequence[Sequence[str]]) -> None:
    """Columns padded to their widest cell, trailing spaces trimmed."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
