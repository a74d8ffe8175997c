"""``snapbuild pack``: build a model's snap and components here as snapcraft does (thin)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from snapbuild.commands.building import comma_names


@click.command("pack")
@click.argument("model")
@click.option("--variant", help="Only this build variant's engines (cpu, nvidia, amd, intel).")
@click.option("--engines", help="Only these engines (comma-separated).")
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Where to leave the .snap and .comp files.",
)
@click.option(
    "--snapcraft",
    type=click.Path(dir_okay=False, path_type=Path),
    help="snapcraft 9.0.1's executable or its venv's python (default: $SNAPBUILD_SNAPCRAFT_VENV, "
    "the checkout's .venv-snapcraft, or snapcraft on PATH).",
)
@click.option(
    "--python3.12",
    "python312",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Python 3.12 for the snap's Python parts (default: found on this machine).",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the build is kept between packs (default: <snapbuild cache>/pack/...).",
)
@click.option("--clean", is_flag=True, help="Start the build afresh.")
@click.option(
    "--no-native-build",
    is_flag=True,
    help="Leave out native runtimes (llama.cpp builds) never built here instead of building "
    "them (tens of minutes each).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def pack_cmd(
    model: str,
    variant: str | None,
    engines: str | None,
    output: Path,
    snapcraft: Path | None,
    python312: Path | None,
    work_dir: Path | None,
    clean: bool,
    no_native_build: bool,
    as_json: bool,
) -> None:
    """Build MODEL's snap with craft-parts and snap pack, and pack each component.

    Leaves <snap>_<version>_<arch>.snap and one <snap>+<component>.comp per component in the
    output directory, and says what could not be built on this machine."""
    from snapbuild.pack import pack

    packed = pack(
        model,
        output,
        variant=variant,
        engines=comma_names(engines),
        snapcraft=snapcraft,
        python312=python312,
        work=work_dir,
        clean=clean,
        build_native=not no_native_build,
        progress=None if as_json else lambda line: click.echo(f"  {line}", err=True),
    )
    if as_json:
        click.echo(json.dumps(packed.to_data(), indent=2))
        return
    click.echo(f"{packed.model} {packed.version} ({packed.variant}, {packed.architecture})")
    click.echo(f"  {packed.snap}")
    for path in packed.components.values():
        click.echo(f"  {path}")
    if packed.skipped:
        click.echo("Not built here:")
        for skip in packed.skipped:
            fix = f" ({skip.resolution})" if skip.resolution else ""
            click.echo(f"  {skip.kind} {skip.name}: {skip.reason}{fix}")
    if packed.reused:
        click.echo(f"Unchanged, not packed again: {', '.join(packed.reused)}")
    click.echo(f"{packed.timings['total']:.0f} s; build kept in {packed.work}")
