"""``python -m snaps`` and the ``inference-snap`` console script: the snap's own command.

A thin entry so the process is set up (:mod:`hwprobe._startup`) before :mod:`snaps.cli` imports
the models it needs.
"""

from __future__ import annotations


def main() -> None:
    """Entry point: set up the process, then run the in-snap command line."""
    from hwprobe._startup import configure_process

    configure_process()
    from snaps.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
