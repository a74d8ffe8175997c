"""The snap's mount namespace: a fresh root holding what snap-confine binds, and nothing else.

snap-confine builds each snap a mount namespace from the base snap and a list of host paths
(``cmd/snap-confine/mount-support.c:903-935``: ``/dev``, ``/etc``, ``/home``, ``/root``,
``/proc``, ``/sys``, ``/tmp`` made private at ``:141``, ``/var/snap``, ``/run``, ...), and snapd
keeps it alive in ``/run/snapd/ns/<snap>.mnt``. Here one holder process (a ``sleep``) unshares a
mount namespace, builds a tmpfs root with those paths, loop-mounts the ``.snap`` read-only at
``/snap/<name>/<rev>`` and ``pivot_root``\\ s into it, so the host's root is gone: the checkout,
``/work``, ``/root/.pyenv``, ``/opt`` and every virtual environment do not exist inside. The
host's ``/usr`` (read-only) stands in for the base snap, with ``/usr/local`` emptied as in a
base snap and a host Python 3.12 laid out as core24's (:mod:`.base`). ``/root`` and ``/home``
hold only ``~/snap/<name>``: without AppArmor nothing else of a home could be hidden.

Every hook, app and service joins the holder's namespace with ``setns`` in its pre-exec step
(:func:`enter`), which also takes the working directory as snap-confine does and loads the
seccomp filter last, so that only the snap's own code is confined.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from snapbuild.trial.snapd.base import HostPython
from snapbuild.trial.snapd.env import SNAP_DATA_DIR, SNAP_MOUNT_DIR, Placement, void_dir
from snapbuild.trial.snapd.errors import HarnessError
from snapbuild.trial.snapd.kernel import (
    MS_BIND,
    MS_NODEV,
    MS_NOSUID,
    MS_RDONLY,
    MS_REMOUNT,
    bind,
    check,
    die_with_parent,
    libc,
    mount,
    mount_squashfs,
    remount,
    setns,
    spawn,
    tmpfs,
    unmount,
    unshare_mounts,
)
from snapbuild.trial.snapd.meta import SnapMeta
from snapbuild.trial.snapd.seccomp import LoadedFilter, load_filter, syscall_number

BLOB_DIR = "/var/lib/snapd/snaps"
SNAPD_SNAP_SOCKET = "/run/snapd-snap.socket"
REAL_SNAPCTL = "/usr/lib/snapd/snapctl"  # /usr/bin/snapctl links to it
_BASE_TOP_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")  # the base's, beside /usr
_HOST_BINDS_RO = ("/etc",)  # besides /usr, which stands in for the base snap
_HOST_BINDS_REC = ("/dev", "/proc", "/sys")


@dataclass(frozen=True)
class NamespacePlan:
    """Everything the namespace holds; every host path it binds is under ``work``."""

    work: Path
    place: Placement
    snap_file: Path
    base_python: HostPython | None = None
    snapctl_client: str | None = None  # a snapctl for hosts without snapd's (script text)
    login_session: bool = False  # /run/user/<uid> exists, as under a logind session

    @property
    def root(self) -> Path:
        return self.work / "ns-root"

    @property
    def var_snap(self) -> Path:
        return self.work / "var-snap"

    @property
    def homes(self) -> Path:
        return self.work / "home"

    @property
    def tmp(self) -> Path:
        return self.work / "tmp"

    def prepare_dirs(self) -> None:
        """The host side: what snapd creates (SNAP_DATA, SNAP_COMMON and their ``current``)
        and ``snap run`` creates (``~/snap/<name>/<rev>``, ``common``, ``current``)."""
        for path in (self.tmp, self.root, self.homes / "home"):
            path.mkdir(parents=True, exist_ok=True)
        self.tmp.chmod(0o1777)
        name, rev = self.place.name, self.place.revision
        for base in (self.var_snap / name, self.homes / "root" / "snap" / name):
            (base / rev).mkdir(parents=True, exist_ok=True)
            (base / "common").mkdir(exist_ok=True)
            relink(base / "current", rev)


def snapctl_client(*, force: bool) -> str | None:
    """The harness's snapctl client (script text) when the host has no snapd snapctl for the
    base's /usr/bin/snapctl, or when ``force``d; None: the real one serves."""
    if force or not os.path.exists(REAL_SNAPCTL):
        return Path(__file__).with_name("snapctl_client.py").read_text()
    return None


def start_holder(plan: NamespacePlan) -> subprocess.Popen[bytes]:
    """The holder: a ``sleep`` whose pre-exec step builds the namespace; it dies with us."""

    def become_holder() -> None:
        die_with_parent(signal.SIGKILL)
        build_namespace(plan)

    return spawn(["/usr/bin/sleep", "infinity"], become_holder, stdin=subprocess.DEVNULL)


def _mount_usr(root: str, base_python: HostPython | None) -> None:
    """/usr for the base snap: the host's, read-only, with core24's Python when asked for."""
    os.mkdir(root + "/usr")
    if base_python is None or base_python.native:
        bind("/usr", root + "/usr", readonly=True, recursive=True)
        return
    stub = root + "/.base-stub"
    os.mkdir(stub)
    tmpfs(stub)
    base_python.mount_usr(root + "/usr", stub)
    unmount(stub)
    os.rmdir(stub)


def build_namespace(plan: NamespacePlan) -> None:
    """In the child that becomes the holder: unshare, build the root, pivot into it."""
    unshare_mounts()
    root = str(plan.root)
    tmpfs(root)
    _mount_usr(root, plan.base_python)
    for name in _BASE_TOP_DIRS:  # merged /usr: links (/bin -> usr/bin); else the host's dirs
        if os.path.islink(f"/{name}"):
            os.symlink(os.readlink(f"/{name}"), f"{root}/{name}")
        elif os.path.isdir(f"/{name}"):
            os.mkdir(f"{root}/{name}")
            bind(f"/{name}", f"{root}/{name}", readonly=True, recursive=True)
    tmpfs(root + "/usr/local")  # a base snap's /usr/local is empty: hides host pip installs
    for sub in ("bin", "sbin", "lib"):
        os.mkdir(f"{root}/usr/local/{sub}")
    if plan.snapctl_client is not None:  # no snapd snapctl here: the client, first on PATH
        Path(root, "usr/local/bin/snapctl").write_text(plan.snapctl_client)
        os.chmod(f"{root}/usr/local/bin/snapctl", 0o755)
    remount(root + "/usr/local", readonly=True)
    for path in _HOST_BINDS_RO:
        os.mkdir(root + path)
        bind(path, root + path, readonly=True, recursive=True)
    for path in _HOST_BINDS_REC:
        os.mkdir(root + path)
        bind(path, root + path, recursive=True)
    for path, source in (("/tmp", plan.tmp), ("/root", plan.homes / "root")):
        os.mkdir(root + path)
        bind(str(source), root + path)
    os.mkdir(root + "/home")
    bind(str(plan.homes / "home"), root + "/home")
    os.makedirs(root + SNAP_DATA_DIR)
    bind(str(plan.var_snap), root + SNAP_DATA_DIR)
    os.makedirs(root + "/var/tmp")
    tmpfs(root + "/var/tmp", "1777")
    void = root + void_dir()
    os.makedirs(void)
    os.chmod(void, 0o111)
    os.makedirs(root + "/var/lib/snapd/lib/gl")
    os.makedirs(root + BLOB_DIR)
    tmpfs(root + BLOB_DIR)
    add_blob(root, plan.place)
    os.mkdir(root + "/run")
    tmpfs(root + "/run")
    os.makedirs(root + "/run/user", mode=0o755)
    if plan.login_session:
        os.mkdir(f"{root}/run/user/{plan.place.uid}", 0o700)
    os.mkdir(root + SNAP_MOUNT_DIR)
    tmpfs(root + SNAP_MOUNT_DIR)
    place = plan.place
    os.makedirs(root + place.mount_dir)
    mount_squashfs(str(plan.snap_file), root + place.mount_dir)
    os.symlink(place.revision, f"{root}{SNAP_MOUNT_DIR}/{place.name}/current")
    os.makedirs(f"{root}{SNAP_MOUNT_DIR}/{place.name}/components/mnt")
    os.makedirs(root + place.components_dir)
    remount(root + SNAP_MOUNT_DIR, readonly=True)
    _pivot(root)


def _pivot(root: str) -> None:
    """Make ``root`` the root and drop the host's entirely; then make / read-only."""
    os.mkdir(root + "/.host")
    os.chdir(root)
    check(libc().syscall(syscall_number("pivot_root"), b".", b".host"), "pivot_root")
    os.chdir("/")
    unmount("/.host")
    os.rmdir("/.host")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def read_meta(holder_pid: int, place: Placement) -> SnapMeta:
    """meta/snap.yaml of a mounted revision, read from outside through the holder's root."""
    mount_dir = Path(f"/proc/{holder_pid}/root{place.mount_dir}")
    hooks = mount_dir / "meta" / "hooks"
    files = sorted(p.name for p in hooks.iterdir()) if hooks.is_dir() else []
    meta = SnapMeta.from_yaml((mount_dir / "meta" / "snap.yaml").read_text(), files)
    if meta.confinement != "strict":
        raise HarnessError(
            f"{meta.name} uses {meta.confinement} confinement",
            resolution="the harness reproduces strict confinement only",
        )
    return meta


def add_blob(root: str, place: Placement) -> None:
    """snapd's copy of the snap file; snap-exec's ``snap.ReadInfo`` only checks that it
    exists, so an empty file stands for it."""
    Path(f"{root}{BLOB_DIR}/{place.name}_{place.revision}.snap").touch()


def relink(link: Path, target: str) -> None:
    """Point ``link`` at ``target`` atomically (the ``current`` links)."""
    tmp = link.with_name(link.name + ".new")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(target)
    tmp.replace(link)


@contextlib.contextmanager
def writable_snap_dir() -> Iterator[None]:
    """/snap writable for one change (inside the namespace), read-only again after."""
    remount(SNAP_MOUNT_DIR, readonly=False)
    try:
        yield
    finally:
        remount(SNAP_MOUNT_DIR, readonly=True)


def mount_component(place: Placement, component: str, image: int) -> None:
    """Inside the namespace: mount a component at ``components/mnt/<comp>/<rev>`` and link it
    from ``components/<snap-rev>/<comp>``, as snapd does (``image``: an open descriptor, the
    host path is not visible here)."""
    base = f"{SNAP_MOUNT_DIR}/{place.name}/components"
    target = f"{base}/mnt/{component}/{place.revision}"
    with writable_snap_dir():
        os.makedirs(target, exist_ok=True)
        if not os.path.ismount(target):
            mount_squashfs(image, target)
        os.makedirs(place.components_dir, exist_ok=True)
        link = f"{place.components_dir}/{component}"
        if not os.path.lexists(link):
            os.symlink(f"../mnt/{component}/{place.revision}", link)


def unmount_component(place: Placement, component: str) -> None:
    """Inside the namespace: unlink a component and unmount it."""
    base = f"{SNAP_MOUNT_DIR}/{place.name}/components"
    with writable_snap_dir():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{place.components_dir}/{component}")
        unmount(f"{base}/mnt/{component}/{place.revision}")


def mount_revision(
    old: Placement, new: Placement, image: int, components: Mapping[str, int]
) -> None:
    """Inside the namespace, on refresh: mount the new revision, point ``current`` at it and
    link the installed components for it: from their new files where ``components`` has one
    (open descriptors by name), else the mounts they had (their revisions stay)."""
    with writable_snap_dir():
        os.makedirs(new.mount_dir)
        mount_squashfs(image, new.mount_dir)
        add_blob("", new)
        relink(Path(f"{SNAP_MOUNT_DIR}/{new.name}/current"), new.revision)
        os.makedirs(new.components_dir, exist_ok=True)
        installed = sorted(os.listdir(old.components_dir))
        for component in installed:
            if component not in components:
                target = os.readlink(f"{old.components_dir}/{component}")
                os.symlink(target, f"{new.components_dir}/{component}")
    for component in installed:
        if component in components:
            mount_component(new, component, components[component])


def enter(
    ns_fd: int, cwd: str, loaded: LoadedFilter, *, xdg_runtime_dir: str | None
) -> Callable[[], None]:
    """The pre-exec step of every hook, app and service: end with its parent, join the
    namespace, create XDG_RUNTIME_DIR when its parent exists (``snap run``, 2.74+), take the
    working directory as snap-confine does (the same path if it can be entered there, else the
    void directory), then load the seccomp filter (last: it confines only the snap's code)."""
    void = void_dir()

    def prepare() -> None:
        die_with_parent(signal.SIGTERM)  # nothing of the snap outlives who started it
        setns(ns_fd)
        if xdg_runtime_dir is not None:
            with contextlib.suppress(FileExistsError, FileNotFoundError):
                os.mkdir(xdg_runtime_dir, 0o700)
        try:
            os.chdir(cwd)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            os.chdir(void)
        load_filter(loaded)

    return prepare
