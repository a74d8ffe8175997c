"""``python -m snapbuild.trial.snapctl``: what the trial's ``bin/snapctl`` launcher runs."""

import sys

from snapbuild.trial.snapctl.commands import main

if __name__ == "__main__":
    sys.exit(main())
