"""The harness's one error type, a :class:`~snapcommon.errors.SnapbuildError`.

Whatever the harness cannot do on this machine (no root, no loop devices, no Python 3.12 for the
base snap) or with this snap (no such hook, a snap.yaml it cannot read) reaches a person, through
``python -m snapbuild.trial.snapd``, ``snapbuild try`` or a test's skip reason, so it says what is
missing and how to get it, like every other error of the project.
"""

from __future__ import annotations

from snapcommon.errors import SnapbuildError


class HarnessError(SnapbuildError):
    """The snapd-like harness cannot run here, or cannot run this snap; the message says why."""
