"""`snapbuild try`: install-and-run a model's snap on this machine without snapd (thin command)."""

from __future__ import annotations

from pathlib import Path

import click

from snapcommon.errors import UsageError


@click.command("try")
@click.argument("model")
@click.option("--engine", help="Use this engine instead of the one the selector picks.")
@click.option("--option", "option", help="A model ladder: this model option (size).")
@click.option("--port", type=click.IntRange(1, 65535), help="Serve on this port.")
@click.option("--keep-running", is_flag=True, help="Leave the server up until Ctrl-C.")
@click.option(
    "--as",
    "mode",
    type=click.Choice(["auto", "snapd", "trial"]),
    default="auto",
    show_default=True,
    envvar="SNAPBUILD_TRY_AS",
    help="snapd: pack the snap with craft-parts and run it as snapd runs it (root); trial: run "
    "the rendered hooks from this checkout in a simulated snap environment; auto: snapd where "
    "this machine allows it, else the trial, saying why.",
)
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
    mode: str,
) -> None:
    """Install MODEL's snap on this machine, start it and chat once: packed and run as snapd
    runs it where possible, else as a trial from this checkout."""
    from snapbuild.trial.packed import run_packed, why_not_packed
    from snapbuild.trial.run import run_trial

    why_not = why_not_packed() if mode != "trial" else "--as trial"
    if why_not is not None and mode == "snapd":
        raise UsageError(
            "cannot run the packed snap as snapd runs it here",
            details=why_not,
            resolution="Run as root on a machine with squashfs-tools, snapd, python3-apt, "
            "snapcraft and a Python 3.12, or use --as trial.",
        )
    if why_not is not None and mode == "auto":
        click.echo(f"TRIAL (not the packed snap as snapd runs it: {why_not})")
    run = run_packed if why_not is None else run_trial
    run(
        model,
        engine=engine,
        option=option,
        port=port,
        work_dir=work_dir,
        keep_running=keep_running,
        echo=click.echo,
    )
