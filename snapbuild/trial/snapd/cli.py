"""``python -m snapbuild.trial.snapd check | env | table | run``: the harness for people.

``check`` says whether this machine can run snaps in a namespace and what to do if not; ``env``
prints the environment and command line snapd would give a hook, app or service of a snap.yaml
(nothing runs); ``table`` prints the environment table of ``docs/snaps.md`` from the data;
``run`` installs a ``.snap`` in a namespace, runs the steps asked for (up to the first that fails)
and cleans up. Each command
only parses its arguments and calls the library.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from snapbuild.trial.snapd.check import check_host
from snapbuild.trial.snapd.env import (
    Placement,
    caller_environment,
    launch,
    newest_snapd,
)
from snapbuild.trial.snapd.errors import HarnessError
from snapbuild.trial.snapd.meta import SnapMeta
from snapbuild.trial.snapd.rules import Release, RunKind, environment_rules, parse_release
from snapbuild.trial.snapd.run import RunResult, SnapRun
from snapcommon.errors import EXIT_USAGE

STEPS = "install | hook:NAME | app:NAME[:ARG...] | set:K=V[,K=V] | refresh:FILE"


def _release(text: str) -> Release:
    rules = environment_rules().releases
    release = parse_release(text)
    if not parse_release(rules.oldest) <= release <= parse_release(rules.newest):
        raise argparse.ArgumentTypeError(
            f"snapd {text}: the data covers {rules.oldest}-{rules.newest}"
        )
    return release


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m snapbuild.trial.snapd", description=__doc__.split("\n\n")[0]
    )
    sub = top.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="can this machine run the harness? (exit 1: no, and why)")
    sub.add_parser("table", help="the environment table of docs/snaps.md, from the data")
    env = sub.add_parser("env", help="the environment of a hook, app or service (no run)")
    env.add_argument("snap_yaml", type=Path)
    env.add_argument("target", help="hook:NAME, app:NAME or service:NAME")
    run = sub.add_parser("run", help="install a .snap in a namespace, run steps, clean up")
    run.add_argument("snap", type=Path)
    run.add_argument("--work", type=Path, required=True, help="where the snap's data go")
    run.add_argument("--component", action="append", default=[], metavar="NAME=FILE")
    run.add_argument("--policy", choices=("snapd", "inet-only"), default="snapd")
    run.add_argument("--no-base-python", action="store_true", help="no core24 Python 3.12")
    run.add_argument("--login-session", action="store_true", help="/run/user/<uid> exists")
    run.add_argument("--do", dest="steps", action="append", default=[], metavar="STEP", help=STEPS)
    for command in (env, run):
        command.add_argument("--snapd", type=_release, default=newest_snapd(), help="release")
    return top


def _env(snap_yaml: Path, target: str, snapd: Release) -> int:
    meta = SnapMeta.from_yaml(snap_yaml.read_text())
    kind, _, name = target.partition(":")
    runnables = meta.hooks if kind == "hook" else meta.apps
    if kind not in ("hook", "app", "service") or name not in runnables:
        raise HarnessError(
            f"{meta.name} has no {target}", resolution="name hook:X, app:X or service:X"
        )
    run_kind = cast(RunKind, kind)
    caller = caller_environment(run_kind, hook_cookie="<hook-context>")
    run = launch(
        meta,
        runnables[name],
        run_kind,
        Placement(meta.name, "x1"),
        caller,
        caller_cwd=os.getcwd(),
        app_cookie="<snap-cookie>",
        snapd=snapd,
    )
    for key in sorted(run.env):
        print(f"{key}={run.env[key]}")
    print(f"# argv: {run.argv}\n# cwd: {run.cwd}")
    return 0


def _step(snap: SnapRun, step: str) -> list[RunResult]:
    verb, _, rest = step.partition(":")
    if verb == "install":
        return snap.install()
    if verb == "hook":
        return [snap.run_hook(rest)]
    if verb == "app":
        app, *args = rest.split(":")
        return [snap.run_app(app, args)]
    if verb == "set":
        return [snap.snap_set(*rest.split(","))]
    if verb == "refresh":
        return snap.refresh(Path(rest))
    raise HarnessError(f"unknown step {step!r}", resolution=f"steps: {STEPS}")


def _run(ns: argparse.Namespace) -> int:
    components = {}
    for item in ns.component:
        name, sep, path = item.partition("=")
        if not sep:
            raise HarnessError(f"--component {item!r}", resolution="write --component NAME=FILE")
        components[name] = Path(path)
    with SnapRun(
        ns.snap,
        ns.work,
        components=components,
        snapd_version=ns.snapd,
        base_python=None if ns.no_base_python else "auto",
        policy_mode=ns.policy,
        login_session=ns.login_session,
    ) as snap:
        for step in ns.steps:
            for result in _step(snap, step):
                sys.stdout.write(result.stdout)
                sys.stderr.write(
                    result.stderr + (f"{result.after_hook}\n" if result.after_hook else "")
                )
                if not result.ok:  # the first failure ends the run, as it ends snapd's change
                    sys.stderr.write(f"{step}: {' '.join(result.argv)} failed\n")
                    return result.returncode or 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    try:
        if ns.command == "check":
            problems = check_host(overlay=True)
            print(
                "\n".join(f"- {p}" for p in problems)
                or "ok: this machine can run snaps in a namespace"
            )
            return 1 if problems else 0
        if ns.command == "table":
            print(environment_rules().markdown(), end="")
            return 0
        if ns.command == "env":
            return _env(ns.snap_yaml, ns.target, ns.snapd)
        return _run(ns)
    except HarnessError as err:
        err.report()
        return EXIT_USAGE if ns.command == "env" else err.exit_code
