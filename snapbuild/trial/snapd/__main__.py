"""``python -m snapbuild.trial.snapd``: see :mod:`snapbuild.trial.snapd.cli`."""

import sys

from snapbuild.trial.snapd.cli import main

if __name__ == "__main__":
    sys.exit(main())
