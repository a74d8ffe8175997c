"""`snapbuild try`: install-and-run a model's snap on this machine without snapd (thin command)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("try")
@click.argument("model")
@click.option("--engine", help="Use this engine instead of the one the selector picks.")
@click.option("--option", "option", help="A model ladder: this model option (size).")
@click.option("--port", type=click.IntRange(1, 65535), help="Serve on this port.")
@click.option("--keep-running", is_flag=True, help="Leave the server up until Ctrl-C.")
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to assemble the trial (default: a new temporary directory).",
)
def try_cmd(
    model: str,
    engine: str | None,
    option: str | None,
    port: int | None,
    keep_running: bool,
    work_dir: Path | None,
) -> None:
    """Render MODEL's snap, install it in a simulated snap environment, start it and chat once."""
    from snapbuild.trial.run import run_trial

    run_trial(
        model,
        engine=engine,
        option=option,
        port=port,
        work_dir=work_dir,
        keep_running=keep_running,
        echo=click.echo,
    )
