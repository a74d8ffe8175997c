"""``snapbuild make``, ``snapbuild matrix`` and ``snapbuild ci``: thin wrappers over the builder."""

from __future__ import annotations

import json
from pathlib import Path

import click

from snapcommon.errors import UsageError


def comma_names(value: str | None) -> tuple[str, ...]:
    """``"a, b"`` -> ``("a", "b")``; empty items are a usage error, not silently dropped."""
    if value is None:
        return ()
    items = tuple(item.strip() for item in value.split(","))
    if not all(items):
        raise UsageError(f"{value!r} holds an empty name", resolution="separate names with commas")
    return items


@click.command("make")
@click.argument("model")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Project directory (default: ./<name>-snap).",
)
@click.option("--engines", help="Only these engines (comma-separated).")
@click.option("--variant", help="Only this build variant's engines (cpu, nvidia, amd, intel).")
@click.option(
    "--arch",
    "arches",
    help="Architectures to build for (comma-separated; default: the manifest's).",
)
@click.option(
    "--options",
    "options",
    help="A model ladder: only these model options (comma-separated; default: all).",
)
@click.option(
    "--source",
    help="Source of snapbuild itself for the snap's python part (git URL "
    "or path); default: copy this installation's source into the project.",
)
@click.option(
    "--grade",
    type=click.Choice(["stable", "devel"]),
    help="Snap grade (default: devel when an artifact is a placeholder or an engine experimental).",
)
@click.option("--sideload", is_flag=True, help="Let the CLI read models from $HOME (home plug).")
@click.option(
    "--force", is_flag=True, help="Write into a non-empty directory snapbuild did not create."
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def make_cmd(
    model: str,
    output: Path | None,
    engines: str | None,
    variant: str | None,
    arches: str | None,
    options: str | None,
    source: str | None,
    grade: str | None,
    sideload: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Write a complete snapcraft project for MODEL (a manifest name or path)."""
    from snapbuild.manifest.checks import require_sound
    from snapbuild.manifest.loader import load_manifest
    from snapbuild.project.builder import make, summary_data, summary_text

    manifest = load_manifest(model)
    require_sound(manifest, model, lambda text: click.echo(text, err=True))
    built = make(
        manifest,
        output,
        force=force,
        engines=comma_names(engines),
        variant=variant,
        options=comma_names(options),
        architectures=comma_names(arches),
        source=source,
        grade=grade,
        sideload=sideload,
    )
    click.echo(json.dumps(summary_data(built), indent=2) if as_json else summary_text(built))


@click.command("matrix")
@click.argument("model")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["github", "json"]),
    default="json",
    show_default=True,
    help="github: one line for strategy.matrix; json: readable.",
)
@click.option("--arch", "arches", help="Only these architectures (comma-separated).")
def matrix_cmd(model: str, fmt: str, arches: str | None) -> None:
    """Print the build matrix of MODEL: architecture x variant x artifact."""
    from snapbuild.manifest.loader import load_manifest
    from snapbuild.project.matrix import format_matrix, matrix_entries

    manifest = load_manifest(model)
    chosen = comma_names(arches)
    unknown = [a for a in chosen if a not in manifest.architectures]
    if unknown:
        raise UsageError(
            f"architecture {', '.join(unknown)} is not one of {manifest.name!r}'s",
            resolution=f"choose from {', '.join(manifest.architectures)}",
        )
    click.echo(format_matrix(matrix_entries(manifest, architectures=chosen), fmt))


@click.command("ci")
@click.argument("model")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Write the workflow here (e.g. .github/workflows/MODEL.yaml) instead of printing it.",
)
@click.option(
    "--install",
    default="python -m pip install .",
    show_default=True,
    help="Shell command that installs snapbuild on the runner.",
)
def ci_cmd(model: str, output: Path | None, install: str) -> None:
    """Print a GitHub Actions workflow building every variant of MODEL."""
    from snapbuild.manifest.loader import load_manifest
    from snapbuild.project.matrix import workflow_text

    text = workflow_text(load_manifest(model), install=install)
    if output is None:
        click.echo(text, nl=False)
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    click.echo(f"wrote {output}")
