"""``snapbuild new SOURCE...``: write a manifest from model files (thin: see
snapbuild.inspect.scaffold)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from snapcommon.errors import SnapbuildError, UsageError

if TYPE_CHECKING:
    from snapbuild.manifest.model import Manifest


@click.command("new")
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Manifest file to write (default: ./<name>.yaml).",
)
@click.option("--name", help="The snap's name (default: from the model file).")
@click.option(
    "--url-base",
    help="Where the build downloads the files: URL + '/' + file name (default: local-only "
    "files that `make` copies into the project).",
)
@click.option("--license", "license_text", help="SPDX licence expression (default: the file's).")
@click.option("--force", is_flag=True, help="Overwrite an existing manifest file.")
@click.option("--json", "as_json", is_flag=True, help="Print what was decided as JSON.")
def new_cmd(
    sources: tuple[Path, ...],
    output: Path | None,
    name: str | None,
    url_base: str | None,
    license_text: str | None,
    force: bool,
    as_json: bool,
) -> None:
    """Write a manifest from SOURCES: a GGUF file, an ONNX model or an OpenVINO IR directory;
    several quantizations of one model give one artifact each."""
    from snapbuild.inspect.scaffold import new_manifest

    if url_base is not None and not url_base.startswith(("https://", "http://")):
        raise UsageError(
            f"--url-base {url_base!r} is not an http(s) URL",
            resolution="give where the files can be downloaded, e.g. "
            "https://huggingface.co/ORG/REPO/resolve/REVISION",
        )
    target = output or Path("manifest.yaml")
    scaffold = new_manifest(
        list(sources), output=target, name=name, url_base=url_base, license_text=license_text
    )
    if output is None:
        target = Path(f"{scaffold.data['name']}.yaml")
    if target.exists() and not force:
        raise UsageError(
            f"{target} already exists",
            resolution="choose another file with -o, or pass --force to overwrite it",
        )
    manifest = _write_checked(target, scaffold.yaml_text(list(sources)))
    if as_json:
        data = {
            "manifest": str(target),
            "name": manifest.name,
            "decided": scaffold.decided,
            "review": scaffold.review,
            "data": scaffold.data,
        }
        click.echo(json.dumps(data, indent=2))
        return
    options = f"{len(manifest.options)} model options, " if manifest.is_ladder else ""
    click.echo(f"wrote {target} ({manifest.name}, {options}{len(manifest.engines)} engines)")
    click.echo("Decided:")
    for line in scaffold.decided:
        click.echo(f"  {line}")
    click.echo("Review (marked REVIEW in the file):")
    for line in scaffold.review:
        click.echo(f"  {line}")
    click.echo(f"Next: snapbuild validate {target} && snapbuild try {target}")


def _write_checked(target: Path, text: str) -> Manifest:
    """Write ``text`` to ``target`` only once it loads as a manifest from there (local paths
    resolve against that directory): a manifest that does not load is never left behind, and
    the error says so."""
    from snapbuild.manifest.loader import load_manifest_as

    temporary = target.with_name(f".{target.name}.{os.getpid()}.new")
    temporary.write_text(text, encoding="utf-8")
    try:
        manifest = load_manifest_as(temporary, str(target))
    except SnapbuildError as err:
        temporary.unlink(missing_ok=True)
        err.resolution = f"{err.resolution or 'fix the model files'}; no manifest was written"
        raise
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    os.replace(temporary, target)
    return manifest
