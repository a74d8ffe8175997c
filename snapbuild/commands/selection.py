"""CLI: schema, select, engines, why-not, estimate, validate. Thin: the library decides."""

from __future__ import annotations

import json
from pathlib import Path

import click

from hwprobe.load import load_host as hwprobe_load_host
from hwprobe.profile import HostProfile
from snapbuild.manifest.loader import load_manifest, manifest_schema
from snapbuild.manifest.model import Manifest
from snapbuild.selection.decision import Candidate, Decision, OptionVerdict
from snapbuild.selection.ladder import parameters_text
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


host_options.append(
    click.option(
        "--min-tokens-per-second",
        "min_speed",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="A model ladder: the decode speed a larger option must reach here (default: the "
        "manifest's min-tokens-per-second).",
    )
)


def with_host(func: click.decorators.FC) -> click.decorators.FC:
    for option in reversed(host_options):
        func = option(func)
    return func


def _decide(
    model: str,
    host_root: str | None,
    host_file: str | None,
    experimental: bool,
    min_speed: float | None,
    engine: str | None = None,
    option: str | None = None,
) -> tuple[Manifest, Decision]:
    manifest = load_manifest(model)
    host = load_host(host_root, host_file)
    decision = select(
        manifest,
        host,
        include_experimental=experimental,
        engine=engine,
        option=option,
        min_tokens_per_second=min_speed,
    )
    return manifest, decision


@click.command("schema")
def schema_cmd() -> None:
    """Print the manifest's JSON Schema (for editors and validators)."""
    click.echo(json.dumps(manifest_schema(), indent=2))


@click.command("select")
@click.argument("model")
@with_host
@click.option("--engine", help="Select this engine if it is compatible.")
@click.option("--option", "option", help="A model ladder: select this model option if it runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the Decision as JSON.")
def select_cmd(
    model: str,
    host_root: str | None,
    host_file: str | None,
    experimental: bool,
    min_speed: float | None,
    engine: str | None,
    option: str | None,
    as_json: bool,
) -> None:
    """Pick the engine (and, for a model ladder, the model option) MODEL (a manifest name or
    path) should run on this or a recorded host."""
    manifest, decision = _decide(
        model, host_root, host_file, experimental, min_speed, engine, option
    )
    if as_json:
        click.echo(decision.to_json())
    else:
        click.echo(format_decision(decision))
    if decision.selected is None:
        raise _no_engine(decision, engine)


def _no_engine(decision: Decision, engine: str | None) -> NoEngineError:
    shown = decision.no_fit_candidates()
    lines = [f"{c.engine}: {'; '.join(c.blockers) or 'not chosen'}" for c in shown]
    if decision.options:  # a ladder: what stops its smallest option stops every other
        lines.insert(0, f"the smallest option, {decision.options[-1].option}:")
    what = f"engine {engine!r} cannot run" if engine else "no compatible engine"
    return NoEngineError(
        f"{decision.model}: {what} on this machine",
        details="\n".join(lines),
        resolution="run on a machine that meets one engine's requirements, free memory, "
        "or add an engine for this hardware to the manifest",
    )


def _named(c: Candidate) -> str:
    """A candidate as the listings name it: ``option/engine`` in a ladder."""
    return f"{c.option}/{c.engine}" if c.option else c.engine


def option_line(v: OptionVerdict) -> str:
    """One option of a ladder: its size, what it reads, and whether it runs here or why not."""
    params = f"{parameters_text(v.parameters)} parameters, " if v.parameters else ""
    mark = "*" if v.selected else " "
    return (
        f"{mark} {v.option} ({params}{gib(v.size)}, {'+'.join(v.inputs)}): "
        f"{'runs here' if v.fits else 'does not run here'}; {v.reason}"
    )


def format_decision(decision: Decision) -> str:
    """The human form of ``select``: the pick and why, a ladder's options, then every engine's
    verdicts."""
    out: list[str] = []
    sel = decision.selected
    if sel is None:
        out.append(f"{decision.model}: no compatible engine")
    else:
        where = f" {sel.slot}" if sel.slot else ""
        option = f"{sel.option} on " if sel.option else ""
        out.append(
            f"{decision.model}: {option}{sel.engine} ({sel.runtime} on {sel.device}{where}, "
            f"{sel.quantization}, context {sel.context_size})"
        )
        out.append(f"  why: {sel.why}")
        if sel.serving is not None:
            out.append(f"  serving: {sel.serving.summary()}")
    if decision.options:
        out.append("options (best first):")
        out.extend(f"  {option_line(v)}" for v in decision.options)
    for c in decision.candidates:
        status = f"#{c.rank}" if c.rank else "--"
        out.append(f"{status} {_named(c)}")
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
    model: str,
    host_root: str | None,
    host_file: str | None,
    experimental: bool,
    min_speed: float | None,
    as_json: bool,
) -> None:
    """List MODEL's engines (a ladder's: each option's) with compatibility, memory fit and rank
    on this or a recorded host."""
    _, decision = _decide(model, host_root, host_file, experimental, min_speed)
    rows = engine_rows(decision)
    if as_json:
        click.echo(json.dumps([r.to_data(fit="memory") for r in rows], indent=2))
        return
    ladder = bool(decision.options)
    head = ["engine", "runtime", "device", "quantization", "compatible", "fit", "rank", "active"]
    head = ["option", *head] if ladder else head
    table = [head] + [
        [
            *([r.option or "-"] if ladder else []),
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
    min_speed: float | None,
    as_json: bool,
) -> None:
    """Every reason ENGINE of MODEL was not selected on this or a recorded host. For a model
    ladder ENGINE may be an option (``12b``: why that size does not run), an engine (on the
    selected option) or ``OPTION/ENGINE``."""
    _, decision = _decide(model, host_root, host_file, experimental, min_speed)
    verdict = decision.option_verdict(engine)
    if verdict is not None:
        own = [c for c in decision.candidates if c.option == engine]
        if as_json:
            data = {**verdict.to_data(), "candidates": [c.to_data() for c in own]}
            click.echo(json.dumps(data, indent=2))
            return
        click.echo("\n".join(option_lines(decision, verdict, own)))
        return
    cand = _candidate_named(decision, engine)
    if as_json:
        click.echo(json.dumps(cand.to_data(), indent=2))
        return
    click.echo("\n".join(why_not_lines(decision, cand)))


def _candidate_named(decision: Decision, name: str) -> Candidate:
    """``engine`` (on the selected option, in a ladder) or ``option/engine``."""
    option, _, engine = name.rpartition("/")
    if not option and decision.options:  # a bare engine name: on the option that runs
        sel = decision.selected
        option = (sel.option if sel else None) or decision.options[0].option
    cand = decision.candidate(engine, option or None)
    if cand is None:
        names = dict.fromkeys(
            [*(v.option for v in decision.options), *map(_named, decision.candidates)]
        )
        raise UsageError(
            f"{decision.model} has no engine named {name!r}",
            resolution="use one of: " + ", ".join(names),
        )
    return cand


def option_lines(decision: Decision, verdict: OptionVerdict, own: list[Candidate]) -> list[str]:
    """A ladder option: its verdict, then each of its engines' blockers (or rank)."""
    lines = [option_line(verdict).lstrip("* ")]
    for c in own:
        state = f"rank {c.rank}" if c.rank else "; ".join(c.blockers)
        lines.append(f"  - {c.engine}: {state}")
    if decision.precedence:
        lines.append("  - precedence: " + " > ".join(decision.precedence))
    return lines


def why_not_lines(decision: Decision, cand: Candidate) -> list[str]:
    """Blockers of an incompatible engine, or what beat a compatible one."""
    sel = decision.selected
    name = _named(cand)
    if sel is not None and (sel.engine, sel.option) == (cand.engine, cand.option):
        lines = [f"{name} is the selected engine: {sel.why}"]
        if sel.serving is not None:
            lines.append(f"  serving: {sel.serving.summary()}")
        return lines
    if not cand.compatible:
        return [f"{name} cannot run here:"] + [f"  - {b}" for b in cand.blockers]
    assert sel is not None
    winner = decision.winner()
    first = f"{sel.option}/{sel.engine}" if sel.option else sel.engine
    lines = [f"{name} is compatible (rank {cand.rank}) but {first} ranks first:"]
    if winner is not None:
        lines.append(
            f"  - {first}: {winner.device}, ~{winner.estimated_tokens_per_second:g} tokens/s, "
            f"{winner.quantization}; {name}: {cand.device}, "
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
            options = f"{len(manifest.options)} model options, " if manifest.options else ""
            click.echo(
                f"{name}: ok ({manifest.name}, {options}{len(manifest.engines)} engines{note})"
            )
    if as_json:
        click.echo(json.dumps(results, indent=2))
    if failed:
        raise UsageError(
            f"{len(failed)} of {len(files)} manifest{'s' if len(files) != 1 else ''} invalid",
            resolution="fix the problems listed above",
        )
