"""This machine, or a recorded one named by the environment.

Two variables (never set by snapd) let a recorded machine stand in for this one: the snap's
hooks and ``snapbuild try`` both honour them, so a trial on a replayed machine decides what an
install there would. Both ask this one function, so the rule has one home, below both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hwprobe.profile import HostProfile

HOST_ROOT_VAR = "SNAPBUILD_HOST_ROOT"  # probe this filesystem root instead of "/"
HOST_PROFILE_VAR = "SNAPBUILD_HOST_PROFILE"  # a HostProfile JSON file to use instead of probing


def probe_from_environ(environ: Mapping[str, str] | None = None) -> HostProfile:
    """The recorded profile named by ``SNAPBUILD_HOST_PROFILE``, else a probe of
    ``SNAPBUILD_HOST_ROOT`` (default ``/``, this machine)."""
    from hwprobe.load import load_host

    env = os.environ if environ is None else environ
    return load_host(profile=env.get(HOST_PROFILE_VAR), root=env.get(HOST_ROOT_VAR))
