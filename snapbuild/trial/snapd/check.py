"""What this machine lacks for the harness, each with what to do about it.

The harness needs root's CAP_SYS_ADMIN (``unshare``, ``mount``, loop devices, ``setns``,
``pivot_root``; seccomp without no_new_privs), loop devices, squashfs and seccomp in the kernel,
libseccomp, and ``unsquashfs``; laying a Python 3.12 out for the base needs overlayfs. Containers
often forbid ``unshare``/``mount`` in their own seccomp or AppArmor profile even to root, so the
check forks a child that really creates a private mount namespace. Tests skip with these lines
as the reason; :class:`~.run.SnapRun` raises them as one :class:`~.errors.HarnessError`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from snapbuild.trial.snapd.errors import HarnessError
from snapbuild.trial.snapd.kernel import CAP_SYS_ADMIN, has_capability, unshare_mounts
from snapbuild.trial.snapd.seccomp import libseccomp


def _can_unshare() -> str | None:
    """Why a forked child cannot create a private mount namespace (None: it can)."""
    pid = os.fork()
    if pid == 0:
        try:
            unshare_mounts()
            os._exit(0)
        except OSError as exc:
            os._exit(min(exc.errno or 1, 255))
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return os.strerror(code) if code else None


def check_host(*, overlay: bool = False) -> list[str]:
    """What this machine lacks (empty: the harness can run); ``overlay``: also what laying out
    the base's Python needs."""
    problems: list[str] = []
    if not has_capability(CAP_SYS_ADMIN):
        problems.append(
            "no CAP_SYS_ADMIN: mount namespaces, mounts and loop devices need root "
            "(run as root, or in a container started with --privileged or CAP_SYS_ADMIN)"
        )
    elif (why := _can_unshare()) is not None:
        problems.append(
            f"cannot create a private mount namespace ({why}): a seccomp or AppArmor profile of "
            "the container forbids unshare/mount; allow them (e.g. docker --privileged)"
        )
    if not os.path.exists("/dev/loop-control"):
        problems.append(
            "no /dev/loop-control: load the loop module (modprobe loop) or pass the loop "
            "devices into the container"
        )
    filesystems = Path("/proc/filesystems").read_text()
    modules = Path("/lib/modules", os.uname().release).exists()  # loadable on first mount
    if "squashfs" not in filesystems and not modules:
        problems.append("the kernel has no squashfs support (modprobe squashfs)")
    if overlay and "overlay" not in filesystems and not modules:
        problems.append(
            "the kernel has no overlayfs (modprobe overlay), needed for core24's Python"
        )
    if "Seccomp:" not in Path("/proc/self/status").read_text():
        problems.append("the kernel has no seccomp support")
    try:
        libseccomp()
    except HarnessError:
        problems.append("libseccomp is missing: apt-get install libseccomp2")
    if shutil.which("unsquashfs") is None:
        problems.append("unsquashfs is missing: apt-get install squashfs-tools")
    return problems


def require_host(*, overlay: bool = False) -> None:
    """:func:`check_host`, as one :class:`HarnessError` when anything is missing."""
    problems = check_host(overlay=overlay)
    if problems:
        raise HarnessError(
            "this machine cannot run snaps in a namespace",
            details="\n".join(f"- {p}" for p in problems),
            resolution="see each line; `python -m snapbuild.trial.snapd check` repeats them",
        )
