"""Run a packed snap as snapd runs it: for the end-to-end tests and ``snapbuild try``.

``snapbuild try`` used to run a snap's hooks from the development tree with a hand-made
environment, so it could not see what breaks only under snapd: ``$SNAP`` read-only at
``/snap/<name>/<rev>``, snapd's own variables (``HOME`` in ``~/snap``, ``PATH`` reset,
``TMPDIR=/tmp``, ``XDG_RUNTIME_DIR``), the ``environment:`` expansion (Go's ``os.Expand``), the
working directory, a private ``/tmp``, a tree in which the checkout and its virtual environments
do not exist, the network denied to hooks and apps without a network plug, and the base snap's
Python. This package reproduces those for a chosen snapd release (root only):

- :mod:`.rules`: snapd's environment and socket rules as data, with their source lines;
- :mod:`.expand`, :mod:`.env`: how snapd builds a run's environment, command and directory;
- :mod:`.meta`: meta/snap.yaml as snapd reads it;
- :mod:`.kernel`, :mod:`.namespace`, :mod:`.base`: the mount namespace, the ``.snap`` and its
  components loop-mounted read-only, a host Python 3.12 laid out as core24's;
- :mod:`.seccomp`: the socket policy of the plugs, as a seccomp filter;
- :mod:`.server`, :mod:`.services`, :mod:`.control`, :mod:`.snapctl_client`: the snapd
  stand-in behind ``/run/snapd-snap.socket`` (the real ``snapctl`` talks to it);
- :mod:`.run`: :class:`SnapRun`, the API; :mod:`.check`: what the host lacks; :mod:`.cli`.

Toolkit-only like all of :mod:`snapbuild.trial`: it is not in the snap it runs.
"""

from snapbuild.trial.snapd.base import HostPython, find_host_python
from snapbuild.trial.snapd.check import check_host
from snapbuild.trial.snapd.errors import HarnessError
from snapbuild.trial.snapd.run import RunResult, SnapRun
from snapbuild.trial.snapd.services import ServiceStatus

__all__ = [
    "HarnessError",
    "HostPython",
    "RunResult",
    "ServiceStatus",
    "SnapRun",
    "check_host",
    "find_host_python",
]
