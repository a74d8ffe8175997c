"""``snapbuild fleet``: plan a model's rollout over a fleet, and write the rollout files."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from snapbuild.fleet.inventory import InventoryIssue
from snapcommon.errors import EXIT_USAGE, NoEngineError, SnapbuildError, UsageError

EMIT_KINDS = ("ansible", "cloud-init")


@click.group("fleet")
def fleet_group() -> None:
    """Plan which engine every host of a fleet gets, and roll it out."""


@fleet_group.command("plan")
@click.argument("model")
@click.argument("inventory", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (the contract).")
@click.option("--csv", "as_csv", is_flag=True, help="Print one CSV row per host.")
@click.option(
    "--emit",
    "emits",
    multiple=True,
    type=(click.Choice(EMIT_KINDS), click.Path(file_okay=False, path_type=Path)),
    metavar="ansible|cloud-init DIR",
    help="Write an Ansible playbook + inventory, or cloud-init user-data per engine, to DIR.",
)
@click.option("--channel", default="stable", show_default=True, help="Snap channel to install.")
@click.option(
    "--snap-module",
    type=click.Choice(["community", "builtin"]),
    default="community",
    show_default=True,
    help="Install with community.general.snap, or with ansible.builtin.command (no collection).",
)
@click.option(
    "--near-margin",
    type=click.FloatRange(0, 100),
    default=10.0,
    show_default=True,
    help="A host is near its memory limit when less than this % of its memory stays free.",
)
@click.option("--include-experimental", is_flag=True, help="Let experimental engines win.")
@click.option("--strict", is_flag=True, help="Exit 2 when any inventory entry was skipped.")
def plan_cmd(
    model: str,
    inventory: tuple[Path, ...],
    as_json: bool,
    as_csv: bool,
    emits: tuple[tuple[str, Path], ...],
    channel: str,
    snap_module: str,
    near_margin: float,
    include_experimental: bool,
    strict: bool,
) -> None:
    """Plan MODEL (a manifest name or file) over INVENTORY... (profiles, JSON Lines, machine
    roots, Ansible inventories, folders). Exits 3 when some host gets no engine."""
    from snapbuild.fleet import emit, report
    from snapbuild.fleet.advice import advise
    from snapbuild.fleet.planner import default_selector, plan_fleet
    from snapbuild.fleet.readers import read_inventories
    from snapbuild.manifest.loader import load_manifest

    if as_json and as_csv:
        raise UsageError("--json and --csv are exclusive", resolution="pick one output format")
    for _, folder in emits:
        _check_folder(folder)
    manifest = load_manifest(model)
    hosts = read_inventories(list(inventory))
    _report_issues(hosts.issues)
    if not hosts.hosts:
        raise UsageError(
            "no host could be read from the inventories",
            details="\n".join(i.format() for i in hosts.issues[:20]) or None,
            resolution="fix the entries above; see docs/fleet.md for the inventory formats",
        )
    selector = default_selector(include_experimental=include_experimental)
    plan = plan_fleet(manifest, hosts, selector=selector, near_margin=near_margin / 100)
    advice = [] if as_csv else advise(plan, selector)  # CSV has no summary to put it in
    if as_json:
        sys.stdout.write(report.to_json(plan, advice) + "\n")
    elif as_csv:
        sys.stdout.write(report.to_csv(plan))
    else:
        sys.stdout.write(report.to_text(plan, advice))
    for kind, folder in emits:
        if kind == "ansible":
            written = emit.emit_ansible(plan, folder, channel=channel, snap_module=snap_module)  # type: ignore[arg-type]
        else:
            written = emit.emit_cloud_init(plan, folder, channel=channel)
        click.echo(f"Wrote {kind} files: {', '.join(str(p) for p in written)}", err=True)
    _exit(plan.unplanned, len(hosts.hosts), len(hosts.issues), strict)


def _check_folder(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise UsageError(
            f"cannot write rollout files into {folder}: it is a file",
            resolution="give --emit a folder (it is created when missing)",
        )


def _report_issues(issues: list[InventoryIssue]) -> None:
    for issue in issues:
        click.echo(f"skipped {issue.format()}", err=True)


def _exit(unplanned: int, total: int, skipped: int, strict: bool) -> None:
    if strict and skipped:
        raise SnapbuildError(
            f"{skipped} inventory entries were skipped (--strict)",
            resolution="fix the entries reported above, or drop --strict to plan the rest",
            exit_code=EXIT_USAGE,
        )
    if unplanned:
        raise NoEngineError(
            f"{unplanned} of {total} hosts get no engine (the plan above covers every host)",
            resolution="see each host's reasons and the summary's advice on what would change it",
        )
