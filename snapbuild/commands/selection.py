"""CLI: schema, select, engines, why-not, estimate, validate. Thin: the library decides."""

from __future__ import annotations

import json
from pathlib import Path

import click

from hwprobe.load import load_host as hwprobe_load_host
from hwprobe.profile import HostProfile
from snapbuild.manifest.loader import load_manifest, manifest_schema
from snapbuild.manifest.model import Manifest
from snapbuild.selection.decision import Candidate, Decision
from snapbuild.selection.rows import engine_rows
from snapbuild.selection.selector import select
from snapcommon.errors import NoEngineError, SnapbuildError, UsageError
from snapcommon.sizes import memory as gib


def load_host(host_root: str | None, host_file: str | None) -> HostProfile:
    """The host to decide for: a recorded profile, a machine root to probe, or this machine."""
    if host_root and host_file:
        raise UsageError(
            "--host-root and --host both given", resolution="give one of them, not both"
        )
    if host_root and not Path(host_root).is_dir():
        raise UsageError(
            f"--host-root {host_root} is not a directory",
            resolution="give a machine root such as tests/data/machines/NAME/machine-root",
        )
    return hwprobe_load_host(profile=host_file, root=host_root)


host_options = [
    click.option("--host-root", type=click.Path(), help="Probe the machine recorded under DIR."),
    click.option("--host", "host_file", type=click.Path(), help="A profile from `hwprobe --json`."),
    click.option("--experimental", is_flag=True, help="Consider experimental engines too."),
]


def with_host(func: click.decorators.FC) -> click.decorators.FC:
    for option in reversed(host_options):
        func = option(func)
    return func


def _decide(
    model: str,
    host_root: str | None,
    host_file: str | None,
    experimental: bool,
    engine: str | None = None,
) -> tuple[Manifest, Decision]:
    manifest = load_manifest(model)
    host = load_host(host_root, host_file)
    return manifest, select(manifest, host, include_experimental=experimental, engine=engine)


@click.command("schema")
def schema_cmd() -> None:
    """Print the manifest's JSON Schema (for editors and validators)."""
    click.echo(json.dumps(manifest_schema(), indent=2))


@click.command("select")
@click.argument("model")
@with_host
@click.option("--engine", help="Select this engine if it is compatible.")
@click.option("--json", "as_json", is_flag=True, help="Print the Decision as JSON.")
def select_cmd(
    model: str,
    host_root: str | None,
    host_file: str | None,
    experimental: bool,
    engine: str | None,
    as_json: bool,
) -> None:
    """Pick the engine MODEL (a manifest name or path) should run on this or a recorded host."""
    manifest, decision = _decide(model, host_root, host_file, experimental, engine)
    if as_json:
        click.echo(decision.to_json())
    else:
        click.echo(format_decision(decision))
    if decision.selected is None:
        raise _no_engine(decision, engine)


def _no_engine(decision: Decision, engine: str | None) -> NoEngineError:
    lines = [f"{c.engine}: {'; '.join(c.blockers) or 'not chosen'}" for c in decision.candidates]
    what = f"engine {engine!r} cannot run" if engine else "no compatible engine"
    return NoEngineError(
        f"{decision.model}: {what} on this machine",
        details="\n".join(lines),
        resolution="run on a machine that meets one engine's requirements, free memory, "
        "or add an engine for this hardware to the manifest",
    )


def format_decision(decision: Decision) -> str:
    """The human form of ``select``: the pick and why, then every engine's verdicts."""
    out: list[str] = []
    sel = decision.selected
    if sel is None:
        out.append(f"{decision.model}: no compatible engine")
    else:
        where = f" {sel.slot}" if sel.slot else ""
        out.append(
            f"{decision.model}: {sel.engine} ({sel.runtime} on {sel.device}{where}, "
            f"{sel.quantization}, context {sel.context_size})"
        )
        out.append(f"  why: {sel.why}")
        if sel.serving is not None:
            out.append(f"  serving: {sel.serving.summary()}")
    for c in decision.candidates:
        status = f"#{c.rank}" if c.rank else "--"
        out.append(f"{status} {c.engine}")
        for reason in c.reasons:
            mark = "x" if reason in c.blockers else "+"
            out.append(f"    {mark} {reason}")
    for w in decision.warnings:
        out.append(f"warning ({w.source}): {w.message}")
    return "\n".join(out)


@click.command("engines")
@click.argument("model")
@with_host
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def engines_cmd(
    model: str, host_root: str | None, host_file: str | None, experimental: bool, as_json: bool
) -> None:
    """List MODEL's engines with compatibility, memory fit and rank on this or a recorded host."""
    _, decision = _decide(model, host_root, host_file, experimental)
    rows = engine_rows(decision)
    if as_json:
        click.echo(json.dumps([r.to_data(fit="memory") for r in rows], indent=2))
        return
    head = ["engine", "runtime", "device", "quantization", "compatible", "fit", "rank", "active"]
    table = [head] + [
        [
            r.engine,
            r.runtime,
            str(r.device),
            str(r.quantization),
            "yes" if r.compatible else "no",
            r.memory,
            str(r.rank or "-"),
            "*" if r.active else "",
        ]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@click.command("why-not")
@click.argument("model")
@click.argument("engine")
@with_host
@click.option("--json", "as_json", is_flag=True, help="Print the candidate as JSON.")
def why_not_cmd(
    model: str,
    engine: str,
    host_root: str | None,
    host_file: str | None,
    experimental: bool,
    as_json: bool,
) -> None:
    """Every reason ENGINE of MODEL was not selected on this or a recorded host."""
    _, decision = _decide(model, host_root, host_file, experimental)
    cand = decision.candidate(engine)
    if cand is None:
        raise UsageError(
            f"{decision.model} has no engine named {engine!r}",
            resolution="use one of: " + ", ".join(c.engine for c in decision.candidates),
        )
    if as_json:
        click.echo(json.dumps(cand.to_data(), indent=2))
        return
    click.echo("\n".join(why_not_lines(decision, cand)))


def why_not_lines(decision: Decision, cand: Candidate) -> list[str]:
    """Blockers of an incompatible engine, or what beat a compatible one."""
    sel = decision.selected
    if sel is not None and sel.engine == cand.engine:
        lines = [f"{cand.engine} is the selected engine: {sel.why}"]
        if sel.serving is not None:
            lines.append(f"  serving: {sel.serving.summary()}")
        return lines
    if not cand.compatible:
        return [f"{cand.engine} cannot run here:"] + [f"  - {b}" for b in cand.blockers]
    assert sel is not None
    winner = decision.candidate(sel.engine)
    lines = [f"{cand.engine} is compatible (rank {cand.rank}) but {sel.engine} ranks first:"]
    if winner is not None:
        lines.append(
            f"  - {sel.engine}: {winner.device}, ~{winner.estimated_tokens_per_second:g} tokens/s, "
            f"{winner.quantization}; {cand.engine}: {cand.device}, "
            f"~{cand.estimated_tokens_per_second:g} tokens/s, {cand.quantization}"
        )
    lines.append("  - precedence: " + " > ".join(decision.precedence))
    return lines


@click.command("estimate")
@click.argument("gguf_file", type=click.Path())
@click.option(
    "--ctx",
    "context",
    type=click.IntRange(min=1, max=(1 << 31) - 1),  # llama.cpp counts tokens in 32 bits
    default=4096,
    show_default=True,
    help="Context size in tokens.",
)
@click.option(
    "--runtime-family",
    type=click.Choice(["llama.cpp", "openvino", "onnxruntime"]),
    default="llama.cpp",
    show_default=True,
    help="The runtime family whose KV-cache and compute rules apply.",
)
@click.option("--peak", is_flag=True, help="Include the compute a full prompt batch touches.")
@click.option("--json", "as_json", is_flag=True, help="Print bytes as JSON.")
def estimate_cmd(
    gguf_file: str, context: int, runtime_family: str, peak: bool, as_json: bool
) -> None:
    """Estimate the memory a local GGUF needs at a context size (steady state by default)."""
    from snapbuild.estimate.gguf_shape import read_gguf_shape
    from snapbuild.estimate.memory import estimate

    shape = read_gguf_shape(Path(gguf_file))
    b = estimate(shape, context, runtime_family, peak=peak)
    data = {
        "total": b.total,
        "weights": b.weights,
        "kv-cache": b.kv_cache,
        "compute": b.compute,
        "overhead": b.overhead,
        "context-size": b.context_size,
    }
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"{gguf_file} ({shape.architecture}, {shape.layers} layers) at context {context}:")
    for key in ("weights", "kv-cache", "compute", "overhead", "total"):
        value = data[key]
        click.echo(f"  {key:<9} {value:>14,} bytes  {gib(value)}")


@click.command("validate")
@click.argument("files", nargs=-1, required=True)
@click.option(
    "--deep",
    is_flag=True,
    help="Hash every model file found here, cached ones too (else a cached file is hashed "
    "only when it changed since `fetch` verified it).",
)
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")
def validate_cmd(files: tuple[str, ...], deep: bool, as_json: bool) -> None:
    """Check manifest FILES (names or paths), their licence, their chat templates, and the
    model files found here (size, sha256, format, model facts); exit 2 when any is invalid."""
    from snapbuild.manifest.checks import check_manifest

    results: list[dict[str, object]] = []
    failed: list[SnapbuildError] = []
    for name in files:
        try:
            manifest = load_manifest(name)
            findings = check_manifest(manifest, deep=deep)
        except SnapbuildError as err:
            failed.append(err)
            results.append({"file": name, "valid": False, **err.to_dict()})
            if not as_json:
                err.report()
            continue
        errors = [f for f in findings if f.level == "error"]
        results.append(
            {
                "file": name,
                "valid": not errors,
                "engines": len(manifest.engines),
                "findings": [f.to_data() for f in findings],
            }
        )
        if not as_json:
            for finding in findings:
                click.echo(f"{name}: {finding.format()}", err=True)
        if errors:
            failed.append(UsageError(f"{name} does not match its model files"))
        elif not as_json:
            warned = len(findings)
            note = f", {warned} warning{'s' * (warned != 1)}" if warned else ""
            click.echo(f"{name}: ok ({manifest.name}, {len(manifest.engines)} engines{note})")
    if as_json:
        click.echo(json.dumps(results, indent=2))
    if failed:
        raise UsageError(
            f"{len(failed)} of {len(files)} manifest{'s' if len(files) != 1 else ''} invalid",
            resolution="fix the problems listed above",
        )
