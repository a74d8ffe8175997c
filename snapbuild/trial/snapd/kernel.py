"""The kernel calls the harness makes through libc: mounts, loop devices, namespaces, prctl.

Python's standard library has no ``mount``, ``unshare`` or ``setns``, and the harness must not
shell out to ``mount``/``losetup`` (their behaviour differs between distributions, and a loop
device attached by hand outlives a crash). So these are thin ctypes calls, each raising
``OSError`` with the call and the path on failure. :func:`spawn` and :func:`in_namespace` run a
step in a forked child before exec or instead of it, and bring the step's exception back whole,
since a plain ``preexec_fn`` failure only says "Exception occurred in preexec_fn".
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import os
import struct
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from snapbuild.trial.snapd.errors import HarnessError

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV = 1, 2, 4
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
LOOP_CTL_GET_FREE, LOOP_CONFIGURE = 0x4C82, 0x4C0A
LO_FLAGS_READ_ONLY, LO_FLAGS_AUTOCLEAR = 1, 4
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 1, 38, 22
CAP_SYS_ADMIN = 21


@functools.cache
def libc() -> ctypes.CDLL:
    lib = ctypes.CDLL(None, use_errno=True)
    lib.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    lib.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.unshare.argtypes = [ctypes.c_int]
    lib.setns.argtypes = [ctypes.c_int, ctypes.c_int]
    return lib


def check(rc: int, what: str) -> None:
    """Raise ``OSError`` with errno when a libc call returned non-zero."""
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def prctl(option: int, *args: Any) -> None:
    """prctl(2); each argument a number or a ctypes pointer (``ctypes.byref``)."""
    values = [ctypes.c_ulong(a) if isinstance(a, int) else a for a in args]
    values += [ctypes.c_ulong(0)] * (4 - len(values))
    check(libc().prctl(option, *values), f"prctl({option})")


def mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    def enc(text: str | None) -> bytes | None:
        return None if text is None else text.encode()

    rc = libc().mount(enc(source), enc(target), enc(fstype), flags, enc(data))
    check(rc, f"mount {source or fstype} on {target}")


def bind(source: str, target: str, *, readonly: bool = False, recursive: bool = False) -> None:
    mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
    if readonly:
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def tmpfs(target: str, mode: str = "0755") -> None:
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode}")


def remount(target: str, *, readonly: bool) -> None:
    flags = MS_REMOUNT | MS_NOSUID | MS_NODEV | (MS_RDONLY if readonly else 0)
    mount(None, target, None, flags)


def unmount(target: str) -> None:
    check(libc().umount2(target.encode(), MNT_DETACH), f"umount {target}")


def unshare_mounts() -> None:
    """A private mount namespace for this process: nothing mounted here reaches the host."""
    check(libc().unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def setns(ns_fd: int) -> None:
    check(libc().setns(ns_fd, CLONE_NEWNS), "setns")


def mount_squashfs(image: str | int, target: str) -> None:
    """Attach ``image`` (a path, or an open descriptor when the path is not visible where this
    runs) to a free loop device, read-only and auto-clear, and mount it read-only and nodev as
    snapd's mount units do; the device goes away with the last mount."""
    ctl = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    try:
        number = fcntl.ioctl(ctl, LOOP_CTL_GET_FREE)
    finally:
        os.close(ctl)
    device = f"/dev/loop{number}"
    loop = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    backing = image if isinstance(image, int) else os.open(image, os.O_RDONLY | os.O_CLOEXEC)
    try:
        name = os.path.basename(os.readlink(f"/proc/self/fd/{backing}")).encode()[:63]
        # struct loop_config: fd, block_size, then struct loop_info64 (flags, file name), reserved
        info = struct.pack(
            "=5Q4I64s64s32s2Q", 0, 0, 0, 0, 0, 0, 0, 0, LO_FLAGS_READ_ONLY | LO_FLAGS_AUTOCLEAR,
            name, b"", b"", 0, 0,
        )  # fmt: skip
        fcntl.ioctl(loop, LOOP_CONFIGURE, struct.pack("=II", backing, 0) + info + bytes(64))
        mount(device, target, "squashfs", MS_RDONLY | MS_NODEV)
    finally:
        if not isinstance(image, int):
            os.close(backing)
        os.close(loop)


def has_capability(cap: int) -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> cap & 1)
    return False


def die_with_parent(signal_number: int) -> None:
    """PR_SET_PDEATHSIG: this process gets ``signal_number`` when its parent exits."""
    prctl(PR_SET_PDEATHSIG, signal_number)


def _report_to(write_end: int, step: Callable[[], None]) -> None:
    """Run ``step``; on failure write the exception to ``write_end`` and end the child."""
    try:
        step()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, whatever it is
        os.write(write_end, f"{type(exc).__name__}: {exc}".encode())
        os._exit(127)


def spawn(argv: Sequence[str], prepare: Callable[[], None], **popen: Any) -> subprocess.Popen[Any]:
    """Popen with ``prepare`` run in the child before exec; its exception is raised here as a
    :class:`HarnessError`. Callers are single-threaded (the harness and its server), which is
    what makes forking and running Python before exec safe."""
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(argv, preexec_fn=lambda: _report_to(write_end, prepare), **popen)  # noqa: PLW1509
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        failure = pipe.read().decode()
    if failure:
        proc.wait()
        raise HarnessError(f"cannot start {argv[0]}", details=failure)
    return proc


def in_namespace(ns_fd: int, action: Callable[[], None]) -> None:
    """Run ``action`` in a forked child that has joined the namespace (mounts, links)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)

        def step() -> None:
            setns(ns_fd)
            action()

        _report_to(write_end, step)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        failure = pipe.read().decode()
    os.waitpid(pid, 0)
    if failure:
        raise HarnessError("a step inside the snap's namespace failed", details=failure)
