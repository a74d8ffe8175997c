"""The ``snapbuild`` command: a thin click group whose commands delegate to the library.

Commands live in :mod:`snapbuild.commands` modules and are imported only when invoked, so
``snapbuild make`` does not pay for importing the server or the runtimes. Errors are handled in
one place, :func:`main`: a :class:`~snapcommon.errors.SnapbuildError` prints its brief, details
and resolution and exits with its code; nothing else a user can cause prints a traceback.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from snapbuild import __version__
from snapcommon.errors import EXIT_FAILURE, SnapbuildError, report_unexpected, user_os_error

# command name -> "module:attribute" of a click.Command
COMMANDS: dict[str, str] = {
    "new": "snapbuild.commands.new:new_cmd",
    "schema": "snapbuild.commands.selection:schema_cmd",
    "select": "snapbuild.commands.selection:select_cmd",
    "engines": "snapbuild.commands.selection:engines_cmd",
    "why-not": "snapbuild.commands.selection:why_not_cmd",
    "estimate": "snapbuild.commands.selection:estimate_cmd",
    "validate": "snapbuild.commands.selection:validate_cmd",
    "serve": "snapbuild.commands.serving:serve_cmd",
    "fetch": "snapbuild.commands.serving:fetch_cmd",
    "discover": "snapbuild.commands.discover:discover_cmd",
    "make": "snapbuild.commands.building:make_cmd",
    "matrix": "snapbuild.commands.building:matrix_cmd",
    "ci": "snapbuild.commands.building:ci_cmd",
    "pack": "snapbuild.commands.packing:pack_cmd",
    "try": "snapbuild.commands.trying:try_cmd",
    "fleet": "snapbuild.commands.fleet:fleet_group",
}


class LazyGroup(click.Group):
    """A group that imports each command's module on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                return None  # that part of the toolkit is not installed
            raise
        command: click.Command = getattr(module, attr)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="snapbuild")
def cli() -> None:
    """Turn an AI model manifest into an inference snap that picks its engine per machine."""


def run_cli(command: click.Command, argv: list[str] | None = None, **extra: Any) -> int:
    """Run a click command and turn every expected failure into a message and an exit code."""
    try:
        command.main(args=argv, standalone_mode=False, **extra)
    except SnapbuildError as err:
        err.report()
        return err.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 130
    except click.ClickException as err:
        err.show()
        return err.exit_code
    except click.exceptions.Exit as err:
        return err.exit_code
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        return 130
    except BrokenPipeError:
        return EXIT_FAILURE
    except OSError as exc:  # a full disk, a read-only place: the user's; anything else: ours
        error = user_os_error(exc)
        if error is None:
            return report_unexpected(
                exc, str(extra.get("prog_name") or command.name or "snapbuild")
            )
        error.report()
        return error.exit_code
    except Exception as exc:  # a bug of ours: a message and a log file, never a stack dump
        return report_unexpected(exc, str(extra.get("prog_name") or command.name or "snapbuild"))
    return 0


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point for ``snapbuild``."""
    from hwprobe._startup import configure_process

    configure_process()
    sys.exit(run_cli(cli, argv, prog_name="snapbuild"))
