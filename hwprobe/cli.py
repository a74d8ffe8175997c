"""The ``hwprobe`` command: a summary for people, ``--json``/``--yaml`` for programs.

argparse rather than click, and every heavy import deferred, because ``hwprobe --json`` runs in
install hooks and its start-up time is most of its run time. Errors a user can cause (a root
that does not exist) are :class:`~snapcommon.errors.UsageError`: a message, exit 2, no traceback.
Unknown hardware facts are not errors: exit 0 with warnings.

The installed ``hwprobe`` command is :func:`runtimes.probe_cli.main`: this CLI with the runtime
catalog's "good for" verdicts on GPU lines, which hwprobe (facts only, the bottom layer above
:mod:`snapcommon`) cannot import. Run from here the summary states the facts alone.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from snapcommon.errors import EXIT_OK, SnapbuildError, UsageError, report_unexpected

if TYPE_CHECKING:
    from hwprobe.summary import GpuUses


def _probe_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hwprobe",
        description="Say what this machine can run models on (CPU, RAM, disk, GPUs, NPUs). "
        "`hwprobe capture DIR` records it for replay with --root DIR.",
    )
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the profile as JSON")
    out.add_argument("--yaml", action="store_true", help="print the profile as YAML")
    parser.add_argument("--root", default="/", help="probe a recorded machine under DIR")
    parser.add_argument("--runtimes", action="store_true", help="also probe runtimes (slow)")
    parser.add_argument("--disk-path", default=None, help="report free space here")
    return parser


def _capture_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hwprobe capture", description="Record this machine for `hwprobe --root DIR`."
    )
    parser.add_argument("dir", help="where to write the capture (created; must be empty)")
    parser.add_argument("--root", default="/", help="record a machine under this root")
    return parser


def parsers() -> tuple[argparse.ArgumentParser, ...]:
    """The command's parsers, ``hwprobe`` then ``hwprobe capture``: what docs/cli.md shows."""
    return _probe_parser(), _capture_parser()


def _check_root(root: str) -> None:
    if not os.path.isdir(root):
        raise UsageError(
            f"the root {root!r} is not a directory",
            details="--root names a machine recorded by `hwprobe capture DIR`",
            resolution="pass the directory holding the capture's proc/ and sys/",
        )


def _run_probe(argv: Sequence[str], gpu_uses: GpuUses | None) -> int:
    args = _probe_parser().parse_args(argv)
    _check_root(args.root)
    from hwprobe.probes import probe_host

    profile = probe_host(args.root, runtimes=args.runtimes, disk_path=args.disk_path)
    if args.json:
        sys.stdout.write(profile.to_json() + "\n")
    elif args.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(profile.to_data(), sort_keys=False))
    else:
        from hwprobe.summary import summary

        sys.stdout.write(summary(profile, gpu_uses) + "\n")
    return EXIT_OK


def _run_capture(argv: Sequence[str]) -> int:
    args = _capture_parser().parse_args(argv)
    _check_root(args.root)
    dest = os.path.abspath(args.dir)
    if os.path.exists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise UsageError(
            f"{dest} exists and is not an empty directory",
            resolution="give a new directory, so no earlier capture is overwritten",
        )
    from hwprobe.capture import capture

    written = capture(dest, args.root)
    sys.stdout.write(f"Recorded {len(written)} files in {dest}; replay: hwprobe --root {dest}\n")
    return EXIT_OK


def run(argv: Sequence[str] | None = None, *, gpu_uses: GpuUses | None = None) -> int:
    """Run the command and return its exit code (errors printed, never raised). ``gpu_uses``
    says what each GPU is good for in the summary (see :mod:`hwprobe.summary`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] == "capture":
            return _run_capture(args[1:])
        return _run_probe(args, gpu_uses)
    except SnapbuildError as err:
        err.report()
        return err.exit_code
    except SystemExit as exc:  # argparse's usage errors (exit 2) and --help (exit 0)
        return exc.code if isinstance(exc.code, int) else 2
    except Exception as exc:  # a bug of ours: a message and a log file, never a stack dump
        return report_unexpected(exc, "hwprobe")


def main(gpu_uses: GpuUses | None = None) -> None:
    """Entry point: set the process up, run, exit with the code."""
    from hwprobe._startup import configure_process

    configure_process()
    sys.exit(run(gpu_uses=gpu_uses))
