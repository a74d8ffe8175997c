"""The socket rules of snapd's AppArmor and seccomp profiles, as one seccomp filter per plug set.

Under snapd, a hook or app that plugs neither ``network`` nor ``network-bind`` cannot create an
inet socket: AppArmor answers ``EACCES``. Code that opens a socket in a hook "just to check a
port" works everywhere but in the installed snap. Without AppArmor here, a seccomp filter gives
the same answers for the same calls (:class:`SocketPolicy`, from ``snapd_sockets.yaml``):
``socket()`` of a family no plug grants gets ``EACCES``, netlink protocols and
``bind``/``listen``/``accept`` that snapd's seccomp profile lacks get ``EPERM``. The filter is
compiled with libseccomp through ctypes, once per plug set in the parent, and a forked child only
loads the bytes (:func:`load_filter`): it is kept across ``execve`` and inherited by children,
as snapd's is. ``mode="inet-only"`` keeps only the AF_INET/AF_INET6 rule.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import functools
import json
import os
import platform
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from snapbuild.trial.snapd.errors import HarnessError
from snapbuild.trial.snapd.kernel import (
    CAP_SYS_ADMIN,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_SECCOMP,
    has_capability,
    prctl,
)
from snapbuild.trial.snapd.meta import Runnable, SnapMeta
from snapbuild.trial.snapd.rules import (
    FAMILIES,
    NETLINK_PROTOCOLS,
    InterfaceGrant,
    SocketDefaults,
    socket_rules,
)

PolicyMode = Literal["snapd", "inet-only"]
AF_NETLINK = 16
AF_MAX = 46  # linux/socket.h (6.x): families are 1 .. AF_MAX-1
NETLINK_MAX = 32
SECCOMP_MODE_FILTER = 2
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_MASKED_EQ = 7
SCMP_FLTATR_CTL_NNP = 3
SCMP_ARCH_X86 = 0x40000003  # 32-bit programs on amd64 get the same rules


@dataclass(frozen=True)
class SocketPolicy:
    """What one runnable may do with sockets (kernel numbers and syscall names) and the errno
    each denial answers with."""

    families: frozenset[int]
    netlink: frozenset[int]
    syscalls: frozenset[str]
    mediated: tuple[str, ...]
    denied: tuple[str, ...]
    family_errno: int
    netlink_errno: int
    syscall_errno: int
    inet_only: bool = False

    @classmethod
    def for_plugs(
        cls,
        interfaces: Iterable[str],
        *,
        mode: PolicyMode = "snapd",
        apparmor: Literal["full", "partial"] = "full",
    ) -> SocketPolicy:
        """The policy of a runnable whose connected plugs are of ``interfaces``; ``partial``
        is a host where AppArmor is not fully enabled (snapd then allows ``bind`` to all)."""
        rules = socket_rules()
        base = rules.default
        grants = [rules.interfaces[i] for i in interfaces if i in rules.interfaces]
        sources: list[SocketDefaults | InterfaceGrant] = [base, *grants]
        syscalls = set(base.partial_apparmor_syscalls) if apparmor == "partial" else set()
        return cls(
            families=frozenset(FAMILIES[f] for g in sources for f in g.families),
            netlink=frozenset(NETLINK_PROTOCOLS[p] for g in sources for p in g.netlink),
            syscalls=frozenset(syscalls | {s for g in grants for s in g.syscalls}),
            mediated=base.mediated_syscalls,
            denied=base.denied_syscalls,
            family_errno=getattr(errno, base.family_errno),
            netlink_errno=getattr(errno, base.netlink_errno),
            syscall_errno=getattr(errno, base.syscall_errno),
            inet_only=mode == "inet-only",
        )


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


@functools.cache
def libseccomp() -> ctypes.CDLL:
    """libseccomp2, typed; a :class:`HarnessError` saying how to install it when absent."""
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2", use_errno=True)
    except OSError as exc:
        raise HarnessError(
            "libseccomp is missing", details=str(exc), resolution="apt-get install libseccomp2"
        ) from exc
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_arch_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    return lib


def syscall_number(name: str) -> int:
    """The native number of a system call, as libseccomp knows it (no table to keep here)."""
    number = int(libseccomp().seccomp_syscall_resolve_name(name.encode()))
    if number < 0:
        raise HarnessError(f"libseccomp does not know the system call {name!r} here")
    return number


def compile_filter(policy: SocketPolicy) -> bytes:
    """``policy`` as a BPF program (default allow; the denials answer with their errno)."""
    lib = libseccomp()
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise HarnessError("seccomp_init failed")
    try:
        lib.seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0)
        if platform.machine() == "x86_64":
            lib.seccomp_arch_add(ctx, SCMP_ARCH_X86)  # optional: a failure leaves it native only

        def deny(code: int, syscall: str, *cmps: tuple[int, int]) -> None:
            array = (_ArgCmp * max(1, len(cmps)))(
                *[_ArgCmp(arg, SCMP_CMP_MASKED_EQ, 0xFFFFFFFF, value) for arg, value in cmps]
            )
            action = 0x00050000 | (code & 0xFFFF)  # SCMP_ACT_ERRNO(code)
            rc = lib.seccomp_rule_add_array(ctx, action, syscall_number(syscall), len(cmps), array)
            if rc < 0:
                raise HarnessError(f"seccomp rule for {syscall} {cmps}: {os.strerror(-rc)}")

        inet = (FAMILIES["AF_INET"], FAMILIES["AF_INET6"])
        for family in range(2, AF_MAX):  # AppArmor: no `network <family>` rule -> EACCES
            if family in policy.families or family == AF_NETLINK:
                continue
            if not policy.inet_only or family in inet:
                deny(policy.family_errno, "socket", (0, family))
        if not policy.inet_only:
            for proto in range(NETLINK_MAX):  # seccomp: no `socket AF_NETLINK - <proto>`
                if proto not in policy.netlink:
                    deny(policy.netlink_errno, "socket", (0, AF_NETLINK), (2, proto))
            for syscall in policy.mediated:
                if syscall not in policy.syscalls:
                    deny(policy.syscall_errno, syscall)
            for syscall in policy.denied:
                deny(policy.syscall_errno, syscall)
        return _export(lib, ctx)
    finally:
        lib.seccomp_release(ctx)


def _export(lib: ctypes.CDLL, ctx: int) -> bytes:
    fd = os.memfd_create("seccomp-bpf")
    try:
        rc = lib.seccomp_export_bpf(ctx, fd)
        if rc < 0:
            raise HarnessError(f"seccomp_export_bpf: {os.strerror(-rc)}")
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class LoadedFilter:
    """A compiled filter kept as a ready ``sock_fprog``, so a forked child only calls prctl."""

    def __init__(self, bpf: bytes) -> None:
        self.bpf = bpf
        self._buffer = ctypes.create_string_buffer(bpf, len(bpf))
        self.prog = _SockFprog(len(bpf) // 8, ctypes.addressof(self._buffer))


def load_filter(loaded: LoadedFilter) -> None:
    """Install the filter on this process (kept across execve, inherited by children).

    Without CAP_SYS_ADMIN the kernel wants no_new_privs first, which also disables set-uid
    programs; as root the harness skips it, as snap-confine does.
    """
    if not has_capability(CAP_SYS_ADMIN):
        prctl(PR_SET_NO_NEW_PRIVS, 1)
    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(loaded.prog))


class FilterCache:
    """One compiled filter per set of connected interfaces. Whether a plug is connected is the
    snapctl stand-in's ``connections.json`` (absent: connected), which :class:`~.run.SnapRun`
    fills from snapd's auto-connection rules and the operator's connections."""

    def __init__(self, connections: Path, mode: PolicyMode) -> None:
        self.connections = connections
        self.mode = mode
        self.filters: dict[frozenset[str], LoadedFilter] = {}

    def for_runnable(self, meta: SnapMeta, runnable: Runnable) -> LoadedFilter:
        off = self._disconnected()
        key = frozenset(meta.interfaces[p] for p in runnable.plugs if p not in off)
        if key not in self.filters:
            policy = SocketPolicy.for_plugs(key, mode=self.mode)
            self.filters[key] = LoadedFilter(compile_filter(policy))
        return self.filters[key]

    def _disconnected(self) -> frozenset[str]:
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(self.connections.read_text())
            return frozenset(k for k, v in data.items() if v is False)
        return frozenset()
