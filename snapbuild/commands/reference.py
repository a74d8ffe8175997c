"""The CLI reference (``docs/cli.md``), rendered from the commands' own parser objects.

The page is generated, never written by hand, so it cannot drift from ``--help``: each entry is
what click (or argparse, for ``hwprobe``) itself says: the usage line, the help text, and every
option as ``--help`` prints it, defaults included (the context asks click to show them all).
A command or option without help text stops the generator with :class:`MissingHelp`, because a
blank entry in the reference is a gap nobody would notice.

This module renders whatever commands it is given and imports none of them. The page is put
together by ``tests/test_cli_reference.py``, which also checks the committed page: the in-snap
``<snap>`` command lives in ``snaps``, a layer above this one, so only a test may gather all
three commands.
"""

from __future__ import annotations

import argparse
import inspect
import re
from collections.abc import Iterable
from dataclasses import dataclass

import click

_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")


class MissingHelp(ValueError):
    """A command or option has no help text to show in the reference."""


@dataclass(frozen=True)
class CommandDoc:
    """One command as the reference shows it, whichever parser library defined it."""

    path: str  # "snapbuild fleet plan"
    usage: str  # "snapbuild fleet plan [OPTIONS] MODEL INVENTORY..."
    help: str
    params: tuple[tuple[str, str], ...]  # (how it is typed, what it does), arguments first
    depth: int  # 0 for the program, 1 for its commands, 2 for a group's commands


def click_docs(command: click.Command, name: str) -> list[CommandDoc]:
    """``command`` (invoked as ``name``) and every visible command below it, in the order the
    groups list them (click's groups sort them by name)."""
    return _click_tree(command, click.Context(command, info_name=name, show_default=True), 0)


def _click_tree(command: click.Command, ctx: click.Context, depth: int) -> list[CommandDoc]:
    docs = [_click_doc(command, ctx, depth)]
    if not isinstance(command, click.Group):
        return docs
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        if sub is None:  # the lazy group could not import it: the page would lose it silently
            raise LookupError(f"`{ctx.command_path} {name}` is listed but cannot be loaded")
        if not sub.hidden:
            docs += _click_tree(sub, click.Context(sub, parent=ctx, info_name=name), depth + 1)
    return docs


def _click_doc(command: click.Command, ctx: click.Context, depth: int) -> CommandDoc:
    path = ctx.command_path
    text = inspect.cleandoc(command.help or "").split("\f")[0].replace("\b\n", "").strip()
    if not text:
        raise MissingHelp(f"`{path}` has no help text: give the command a docstring")
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    params.sort(key=lambda p: not isinstance(p, click.Argument))
    return CommandDoc(
        path=path,
        usage=" ".join([path, *command.collect_usage_pieces(ctx)]),
        help=text,
        params=tuple(_click_param(p, ctx) for p in params),
        depth=depth,
    )


def _click_param(param: click.Parameter, ctx: click.Context) -> tuple[str, str]:
    """An argument (click gives arguments no help: how many it takes), or an option exactly as
    ``--help`` shows it."""
    if isinstance(param, click.Argument):
        many = param.nargs == -1
        label = param.human_readable_name + ("..." if many else "")
        if param.required:
            return label, "Required, one or more." if many else "Required."
        return label, "Optional, any number." if many else "Optional."
    record = param.get_help_record(ctx)
    if not isinstance(param, click.Option) or not param.help or record is None:
        raise MissingHelp(f"`{ctx.command_path}` {param.opts[0]} has no help text: give it help=")
    return record


def argparse_doc(parser: argparse.ArgumentParser) -> CommandDoc:
    """One argparse command (``hwprobe``, kept off click for its start-up time) shown like the
    click ones; a space in its ``prog`` makes it a subcommand (``hwprobe capture``)."""
    if not parser.description:
        raise MissingHelp(f"`{parser.prog}` has no description")
    formatter = argparse.HelpFormatter(parser.prog, width=1000)  # one line, whatever the terminal
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    actions = [a for a in parser._actions if a.dest != "help"]
    actions.sort(key=lambda a: bool(a.option_strings))
    return CommandDoc(
        path=parser.prog,
        usage=formatter.format_help().strip(),
        help=parser.description,
        params=tuple(_argparse_param(a, parser.prog) for a in actions),
        depth=parser.prog.count(" "),
    )


def _argparse_param(action: argparse.Action, prog: str) -> tuple[str, str]:
    """An argument or option named as argparse's usage names it, with its help and default."""
    metavar = action.metavar if isinstance(action.metavar, str) else None
    label = ", ".join(action.option_strings) or metavar or action.dest
    if action.option_strings and action.nargs != 0:
        label += f" {metavar or action.dest.upper()}"
    if not action.help:
        raise MissingHelp(f"`{prog}` {label} has no help text")
    default = action.default
    if action.option_strings and default not in (None, argparse.SUPPRESS) and default is not False:
        return label, f"{action.help}  [default: {default}]"
    return label, action.help


def markdown(docs: Iterable[CommandDoc]) -> str:
    """The commands as Markdown sections, a heading level per depth."""
    return "\n".join(_section(doc) for doc in docs)


def _section(doc: CommandDoc) -> str:
    lines = [f"{'#' * min(doc.depth + 2, 6)} `{doc.path}`", "", _prose(doc.help), ""]
    lines += ["```text", doc.usage, "```", ""]
    if doc.params:
        lines += ["| argument or option | what it does |", "|---|---|"]
        lines += [f"| `{_cell(name)}` | {_cell(_prose(text))} |" for name, text in doc.params]
        lines.append("")
    return "\n".join(lines)


def _prose(text: str) -> str:
    """Help text as Markdown: ``<name>`` outside code spans escaped, or it reads as an HTML tag
    and vanishes (``x<=100`` is no tag and stays as it is)."""
    parts = text.split("`")
    return "`".join(p if i % 2 else _TAG_START.sub(r"\\<", p) for i, p in enumerate(parts))


def _cell(text: str) -> str:
    """Text for one table cell: one line, ``|`` escaped (even inside code spans, in GFM)."""
    return " ".join(text.split("\n")).replace("|", "\\|")
