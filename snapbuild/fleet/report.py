"""The plan as a person or a program reads it: the JSON contract, CSV and text.

JSON contract (``snapbuild fleet plan --json``)::

    {"model": "gemma3",
     "hosts": [{"hostname": ..., "source": "file:line", "selected": {...} | null,
                "reasons": [...]}, ...],
     "summary": {"hosts": N, "distinct-profiles": D, "planned": P, "no-engine": M,
                 "skipped-entries": S, "engines": [{"engine", "hosts"}],
                 "no-engine-reasons": [{"hosts", "reasons", "examples"}],
                 "near-memory-limit": {"margin", "hosts", "engines", "examples"},
                 "advice": [{"change", "hosts", "from", "to", "message"}]},
     "errors": [{"file", "line", "message"}]}

Hosts keep the inventory's reading order; summary lists are sorted by host count (descending),
then name, so the output is stable for the same inputs.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from snapbuild.fleet.advice import Advice
from snapbuild.fleet.planner import FleetPlan
from snapcommon.sizes import gib as _gib

EXAMPLES = 3  # hostnames quoted per summary group


def host_rows(plan: FleetPlan) -> list[dict[str, Any]]:
    """One dict per host, sharing each profile's selected block (cheap for 100,000 hosts)."""
    rows = []
    for host in plan.inventory.hosts:
        outcome = plan.outcomes[host.key]
        rows.append(
            {
                "hostname": host.hostname,
                "source": host.source,
                "selected": outcome.selected,
                "reasons": outcome.reasons,
            }
        )
    return rows


def summary(plan: FleetPlan, advice: list[Advice]) -> dict[str, Any]:
    """Hosts per engine (a ladder: per model option too), no-engine groups, near-limit hosts
    and the advice."""
    engines: dict[str, int] = {}
    options: dict[str, int] = {}
    no_engine: dict[tuple[str, ...], list[str]] = {}
    near: dict[str, list[str]] = {}
    for host in plan.inventory.hosts:
        outcome = plan.outcomes[host.key]
        if outcome.selected is None:
            no_engine.setdefault(outcome.reasons, []).append(host.hostname)
            continue
        engine = outcome.selected["engine"]
        engines[engine] = engines.get(engine, 0) + 1
        if "option" in outcome.selected:
            option = outcome.selected["option"]
            options[option] = options.get(option, 0) + 1
        if outcome.near_limit:
            near.setdefault(engine, []).append(host.hostname)
    near_hosts = [name for names in near.values() for name in names]
    planned = sum(engines.values())
    return {
        "hosts": len(plan.inventory.hosts),
        "distinct-profiles": len(plan.outcomes),
        "planned": planned,
        "no-engine": len(plan.inventory.hosts) - planned,
        "skipped-entries": len(plan.issues),
        "engines": [{"engine": e, "hosts": n} for e, n in _by_count(engines)],
        **(
            {"options": [{"option": o, "hosts": n} for o, n in _by_count(options)]}
            if plan.manifest.is_ladder
            else {}
        ),
        "no-engine-reasons": [
            {"hosts": len(names), "reasons": list(reasons), "examples": names[:EXAMPLES]}
            for reasons, names in sorted(no_engine.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        ],
        "near-memory-limit": {
            "margin": plan.near_margin,
            "hosts": len(near_hosts),
            "engines": [{"engine": e, "hosts": len(near[e])} for e, _ in _by_count(near)],
            "examples": near_hosts[:EXAMPLES],
        },
        "advice": [a.to_data() for a in advice],
    }


def _by_count(counts: dict[str, Any]) -> list[tuple[str, int]]:
    sizes = {k: (v if isinstance(v, int) else len(v)) for k, v in counts.items()}
    return sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))


def plan_data(plan: FleetPlan, advice: list[Advice]) -> dict[str, Any]:
    """The whole JSON contract."""
    return {
        "model": plan.model,
        "hosts": host_rows(plan),
        "summary": summary(plan, advice),
        "errors": [issue.to_data() for issue in plan.issues],
    }


def to_json(plan: FleetPlan, advice: list[Advice]) -> str:
    """The JSON contract: one host per line, the summary indented.

    ``json.dumps(..., indent=2)`` of 100,000 hosts runs the pure-Python encoder for seconds; here
    each distinct profile's ``selected``/``reasons`` are encoded once by the C encoder and every
    host line is its name and source plus that shared text. It parses to exactly
    :func:`plan_data`.
    """
    fragments: dict[str, str] = {}
    for key, result in plan.outcomes.items():
        fragments[key] = (
            f'"selected": {json.dumps(result.selected)}, "reasons": {json.dumps(result.reasons)}}}'
        )
    dumps = json.dumps
    hosts = [
        f'    {{"hostname": {dumps(h.hostname)}, "source": {dumps(h.source)}, {fragments[h.key]}'
        for h in plan.inventory.hosts
    ]
    errors = [f"    {json.dumps(issue.to_data())}" for issue in plan.issues]
    summary_text = json.dumps(summary(plan, advice), indent=2).replace("\n", "\n  ")
    parts = [
        "{",
        f'  "model": {json.dumps(plan.model)},',
        '  "hosts": [' + ("\n" + ",\n".join(hosts) + "\n  ]," if hosts else "],"),
        f'  "summary": {summary_text},',
        '  "errors": [' + ("\n" + ",\n".join(errors) + "\n  ]" if errors else "]"),
        "}",
    ]
    return "\n".join(parts)


CSV_COLUMNS = (
    "hostname",
    "source",
    "engine",
    "runtime",
    "device",
    "vendor",
    "context-size",
    "quantization",
    "memory-pool",
    "memory-required",
    "memory-available",
    "memory-margin",
    "near-memory-limit",
    "reasons",
)


def to_csv(plan: FleetPlan) -> str:
    """One row per host, for spreadsheets; reasons joined with ' | ' (a ladder adds the model
    option after the source)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    ladder = plan.manifest.is_ladder
    writer.writerow((*CSV_COLUMNS[:2], "option", *CSV_COLUMNS[2:]) if ladder else CSV_COLUMNS)
    for row in host_rows(plan):
        sel = row["selected"] or {}
        mem = sel.get("memory") or {}
        writer.writerow(
            [
                row["hostname"],
                row["source"],
                *([sel.get("option", "")] if ladder else []),
                sel.get("engine", ""),
                sel.get("runtime", ""),
                sel.get("device", ""),
                sel.get("vendor") or "",
                sel.get("context-size", ""),
                sel.get("quantization", ""),
                mem.get("pool", ""),
                _blank(mem.get("required")),
                _blank(mem.get("available")),
                _blank(mem.get("margin")),
                "yes" if mem.get("near-limit") else ("no" if sel else ""),
                " | ".join(row["reasons"]),
            ]
        )
    return out.getvalue()


def _blank(value: object) -> str:
    return "" if value is None else str(value)


def to_text(plan: FleetPlan, advice: list[Advice]) -> str:
    """A table of hosts, then the summary, for a terminal."""
    lines = [f"Fleet plan for {plan.model}: {len(plan.inventory.hosts)} hosts"]
    width = max((len(h.hostname) for h in plan.inventory.hosts), default=8)
    for row in host_rows(plan):
        sel = row["selected"]
        if sel is None:
            lines.append(f"  {row['hostname']:<{width}}  no engine: {row['reasons'][0]}")
            lines.extend(f"  {'':<{width}}             {r}" for r in row["reasons"][1:])
            continue
        mem = sel["memory"] or {}
        margin = f", margin {_gib(mem.get('margin'))}" if mem else ""
        near = " (near memory limit)" if mem.get("near-limit") else ""
        option = f"model {sel['option']}, " if "option" in sel else ""
        lines.append(
            f"  {row['hostname']:<{width}}  {option}{sel['engine']} on {sel['device']}, context "
            f"{sel['context-size']}{margin}{near}"
        )
    lines.extend(_summary_text(summary(plan, advice)))
    return "\n".join(lines) + "\n"


def _summary_text(data: dict[str, Any]) -> list[str]:
    lines = [
        "",
        f"Summary: {data['planned']} of {data['hosts']} hosts get an engine "
        f"({data['distinct-profiles']} distinct profiles, {data['skipped-entries']} entries "
        "skipped)",
    ]
    lines.extend(f"  {e['engine']}: {e['hosts']}" for e in data["engines"])
    lines.extend(f"  model {o['option']}: {o['hosts']}" for o in data.get("options", []))
    for group in data["no-engine-reasons"]:
        lines.append(f"  no engine for {group['hosts']} (e.g. {', '.join(group['examples'])}):")
        lines.extend(f"    {reason}" for reason in group["reasons"])
    near = data["near-memory-limit"]
    if near["hosts"]:
        lines.append(
            f"  near memory limit (less than {near['margin']:.0%} free): {near['hosts']} "
            f"(e.g. {', '.join(near['examples'])})"
        )
    if data["advice"]:
        lines.append("What would move the most hosts to a better engine:")
        lines.extend(f"  {a['message']}" for a in data["advice"])
    return lines
