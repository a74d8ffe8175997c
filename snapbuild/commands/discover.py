"""``snapbuild discover``: every inference snap's API on this machine, from their documents.

Each running snap publishes where its API is (:mod:`snapbuild.serving.discovery`); this lists
them in one place, the first step toward one endpoint for all of them. ``--check`` asks each
health URL, so a listed snap that is not answering (stopped, or with no engine that fits)
shows as such.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click

from snapbuild.serving.discovery import SNAPS_ROOT, Found, find

CHECK_TIMEOUT_S = 2.0


def health(url: str) -> dict[str, Any]:
    """What the health URL answers now: its HTTP status and its ``status`` / ``reason``."""
    try:
        with urllib.request.urlopen(url, timeout=CHECK_TIMEOUT_S) as response:  # noqa: S310
            code, raw = int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        code, raw = exc.code, exc.read()
    except (OSError, ValueError) as exc:
        return {"http": None, "status": "not answering", "reason": str(exc)}
    try:
        body = json.loads(raw)
    except ValueError:
        body = {}
    return {"http": code, "status": body.get("status"), "reason": body.get("reason")}


def _row(found: Found, check: bool) -> dict[str, Any]:
    data: dict[str, Any] = {"path": str(found.path)}
    if found.document is None:
        return {**data, "problem": found.problem}
    data.update(found.document)
    if check and isinstance(found.document.get("health-url"), str):
        data["live"] = health(found.document["health-url"])
    return data


def _line(row: dict[str, Any]) -> str:
    if "problem" in row:
        return f"{row['path']}: {row['problem']}"
    engine = (row.get("engine") or {}).get("name") or "no engine"
    passed = [n for n, p in (row.get("capabilities") or {}).items() if p.get("passed")]
    size = f" size {row['option']}" if row.get("option") else ""  # a ladder's size that serves
    text = f"{row.get('snap')}: {row.get('base-url')} (model {row.get('model')}{size}, {engine}"
    text += f"; {', '.join(passed) or 'nothing'} proven)"
    outage = row.get("outage")
    if outage:
        text += f" unavailable: {outage.get('reason')}"
    live = row.get("live")
    if live:
        text += f" [health: {live['http'] or live['status']}]"
    return text


@click.command("discover")
@click.argument("roots", nargs=-1, type=click.Path(path_type=Path))
@click.option("--check", is_flag=True, help="Also ask each snap's health URL now.")
@click.option("--json", "as_json", is_flag=True, help="Print the documents as JSON.")
def discover_cmd(roots: tuple[Path, ...], check: bool, as_json: bool) -> None:
    """List the APIs of the inference snaps on this machine (their discovery documents).

    ROOTS: directories of snaps (default /var/snap), $SNAP_COMMON directories or documents.
    """
    rows = [_row(found, check) for found in find(roots or (SNAPS_ROOT,))]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        where = ", ".join(str(r) for r in roots or (SNAPS_ROOT,))
        click.echo(f"no inference snap publishes an API under {where}")
    for row in rows:
        click.echo(_line(row))
