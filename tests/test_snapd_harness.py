"""The snapd-like harness on a real packed snap: mounts, environment, sockets, life cycle.

``probe`` (tests/support/snapd.py) is packed with ``snap pack``, its component with mksquashfs;
each test installs it in a fresh namespace with :class:`SnapRun` and compares what its hooks,
apps and daemon report with what snapd gives them, whole. Needs root, snapd's ``snap`` and
squashfs-tools (CI has them); skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.snapd import ProbeSnaps, base_python, build_probe, skip_reason

from snapbuild.trial.sandbox import source_root
from snapbuild.trial.snapd import HarnessError, SnapRun, cli
from snapbuild.trial.snapd.env import (
    SNAP_EXEC,
    ExecVia,
    dpkg_architecture,
    systemd_unit_environment,
)

SKIP = skip_reason()
PYTHON = base_python()  # core24's Python where the host has a 3.12; the probe runs either way
pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")
GL = "/var/lib/snapd/lib/gl:/var/lib/snapd/lib/gl32"
CONFINE_PATH = (
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/games:/usr/local/games"
)
SNAP_PATH = "/snap/probe/x1/usr/sbin:/snap/probe/x1/usr/bin:/snap/probe/x1/sbin:/snap/probe/x1/bin"
# a user's shell, the same on every host
SHELL_ENV = {
    "HOME": "/root",
    "USER": "root",
    "LOGNAME": "root",
    "TERM": "dumb",
    "LANG": "C.UTF-8",
    "PROBE_FROM_CALLER": "kept",
    "LD_LIBRARY_PATH": "/host/lib",
    "SNAP_SAVED_TZDIR": "/saved/zoneinfo",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def port() -> int:
    return _free_port()


@pytest.fixture(scope="module")
def snaps(tmp_path_factory: pytest.TempPathFactory, port: int) -> ProbeSnaps:
    return build_probe(tmp_path_factory.mktemp("probe"), port)


@pytest.fixture
def run(snaps: ProbeSnaps, tmp_path: Path) -> Iterator[SnapRun]:
    with SnapRun(
        snaps.v1, tmp_path / "work", components={"weights": snaps.weights}, base_python=PYTHON
    ) as snap:
        yield snap


def _report(run: SnapRun, who: str) -> dict[str, Any]:
    """What ``who`` reported, without what the probe's own programs added to its environment:
    sh's PWD, and LC_CTYPE from Python's C-locale coercion (PEP 538) when no locale is set."""
    report = json.loads((run.work / "var-snap/probe/common" / f"report-{who}.json").read_text())
    env = report["env"]
    env.pop("PWD", None)
    if "LANG" not in env and "LC_ALL" not in env:
        env.pop("LC_CTYPE", None)
    return dict(report)


def _snap_run_env(revision: str = "x1", version: str = "0.1") -> dict[str, str]:
    """What `snap run` and snap-confine set for every run of probe (snapd 2.78, root)."""
    return {
        "HOME": f"/root/snap/probe/{revision}",
        "SHELL": "/bin/bash",
        "SNAP": f"/snap/probe/{revision}",
        "SNAP_ARCH": dpkg_architecture(),
        "SNAP_COMMON": "/var/snap/probe/common",
        "SNAP_COMPONENTS": f"/snap/probe/components/{revision}",
        "SNAP_DATA": f"/var/snap/probe/{revision}",
        "SNAP_EUID": "0",
        "SNAP_INSTANCE_KEY": "",
        "SNAP_INSTANCE_NAME": "probe",
        "SNAP_LIBRARY_PATH": GL,
        "SNAP_NAME": "probe",
        "SNAP_REAL_HOME": "/root",
        "SNAP_REEXEC": "",
        "SNAP_REVISION": revision,
        "SNAP_UID": "0",
        "SNAP_USER_COMMON": "/root/snap/probe/common",
        "SNAP_USER_DATA": f"/root/snap/probe/{revision}",
        "SNAP_VERSION": version,
        "TEMPDIR": "/tmp",
        "TMPDIR": "/tmp",
        "XDG_RUNTIME_DIR": "/run/user/0/snap.probe",
        # snap.yaml's environment:, expanded as snapd 2.77+ does
        "DEFAULTED": "fallback",
        "GREETING": f"hello from probe rev {revision}",
        "NESTED": "x[GREETING]}y",
    }


def _unit_env() -> dict[str, str]:
    """The host's locale and /etc/environment, as systemd gives them to a unit."""
    return {k: v for k, v in systemd_unit_environment().items() if k != "PATH"}


def test_install_mounts_read_only_and_runs_each_step_as_snapd(run: SnapRun) -> None:
    results = run.install()
    assert [(r.argv, r.returncode, r.stdout, r.stderr, r.after_hook) for r in results] == [
        (
            ["/snap/probe/x1/meta/hooks/install"],
            0,
            '{"who": "hook-install", "AF_INET": "EACCES"}\n',
            "",
            "",
        ),
        (
            ["/snap/probe/x1/meta/hooks/configure"],
            0,
            '{"who": "hook-configure", "AF_INET": "EACCES"}\n',
            "",
            "",
        ),
    ]
    hook = _report(run, "hook-install")
    assert hook["cwd"] == "/"
    assert hook["mounts"] == ["/snap/probe/x1 ro,nodev,relatime squashfs"]
    assert hook["weights"] is None  # snapd mounts the component after the hook
    assert hook["writable"] == {
        "SNAP": "EROFS",
        "SNAP_DATA": "ok",
        "SNAP_COMMON": "ok",
        "SNAP_USER_DATA": "ok",
        "TMPDIR": "ok",
    }
    cli = run.run_app("cli")
    assert cli.returncode == 0, cli.stderr
    seen = _report(run, "cli")
    assert seen["mounts"] == [
        "/snap/probe/components/mnt/weights/x1 ro,nodev,relatime squashfs",
        "/snap/probe/x1 ro,nodev,relatime squashfs",
    ]
    assert (seen["weights"], seen["greeting"], hook["hardware-observe"]) == ("w1", "installed", 1)
    assert run.installed_components() == ["weights"]
    assert (run.work / "var-snap/probe/x1/.written-by-cli").read_text() == "cli"


def test_the_environment_of_each_run_kind_is_snapds(run: SnapRun, port: int) -> None:
    run.install()
    run.wait_for_port(port, service="server", timeout=30)
    result = run.run_app("cli", ["extra arg"], env=SHELL_ENV)
    assert result.returncode == 0, result.stderr
    hook, cli = _report(run, "hook-install"), _report(run, "cli")
    server = _report(run, "server")
    cookie = hook["env"]["SNAP_COOKIE"]
    assert cookie != run.app_cookie and hook["env"]["SNAP_CONTEXT"] == cookie
    assert server["env"].pop("INVOCATION_ID") != ""
    common = _snap_run_env()
    path = f"{SNAP_PATH}:{CONFINE_PATH}"
    assert hook["env"] == {
        **_unit_env(),
        **common,
        "LD_LIBRARY_PATH": GL,
        "NOTIFY_SOCKET": "/run/systemd/notify",
        "PATH": path,
        "SNAP_CONTEXT": cookie,
        "SNAP_COOKIE": cookie,
        "WATCHDOG_PID": str(run.server.pid if run.server else 0),
        "WATCHDOG_USEC": "300000000",
    }
    assert cli["env"] == {
        **common,
        **{k: v for k, v in SHELL_ENV.items() if not k.startswith("SNAP_SAVED_")},
        "HOME": "/root/snap/probe/x1",
        "LD_LIBRARY_PATH": f"{GL}:/host/lib",
        "PATH": path,
        "SHELL": "/bin/bash",
        "SNAP_APP_NAME": "cli",
        "SNAP_CONTEXT": run.app_cookie,
        "SNAP_COOKIE": run.app_cookie,
        "TZDIR": "/saved/zoneinfo",
    }
    assert server["env"] == {
        **_unit_env(),
        **common,
        "CHAIN_RAN": "/snap/probe/x1/bin/chain",
        "LD_LIBRARY_PATH": GL,
        "PATH": path,
        "PORT": str(port),
        "SNAP_APP_NAME": "server",
        "SNAP_CONTEXT": run.app_cookie,
        "SNAP_COOKIE": run.app_cookie,
    }
    assert cli["argv"] == [
        "/snap/probe/x1/bin/probe",
        "cli",
        "--data",
        "/var/snap/probe/x1",
        "end",
        "extra arg",
    ]
    assert (hook["cwd"], cli["cwd"], server["info"]["cwd"]) == ("/", "/", "/var/snap/probe/x1")


@pytest.mark.skipif(not os.path.exists(SNAP_EXEC), reason=f"needs snapd's {SNAP_EXEC}")
def test_the_environment_and_command_line_equal_snapd_snap_exec(
    snaps: ProbeSnaps, tmp_path: Path
) -> None:
    """The last layer done here and by Debian's snap-exec (2.57, which expands like snapd
    2.68-2.76): the same variables and argv for a hook and an app."""
    seen = {}
    vias: tuple[ExecVia, ...] = ("harness", "snap-exec")
    for via in vias:
        with SnapRun(
            snaps.v1,
            tmp_path / via,
            components={"weights": snaps.weights},
            snapd_version=(2, 68),
            exec_via=via,
            base_python=PYTHON,
        ) as snap:
            assert snap.run_hook("install").ok
            assert snap.run_app("cli", ["extra arg"], env=SHELL_ENV).ok
            for who in ("hook-install", "cli"):
                report = _report(snap, who)
                for key in ("SNAP_COOKIE", "SNAP_CONTEXT", "WATCHDOG_PID"):
                    report["env"].pop(key, None)
                seen[via, who] = (report["env"], report["argv"])
    for who in ("hook-install", "cli"):
        assert seen["harness", who] == seen["snap-exec", who]
    env, argv = seen["snap-exec", "cli"]
    # 2.68: plain os.Expand (the ${..:+..} form names an unset variable), the void directory
    # in SNAP_LIBRARY_PATH (until 2.73), SHELL left alone (reset from 2.70)
    assert (env["NESTED"], env["LD_LIBRARY_PATH"], "SHELL" in env) == (
        "x]}y",
        f"{GL}:/var/lib/snapd/void",
        False,
    )
    assert argv[-2:] == ["end", "extra arg"]


def test_sockets_follow_the_plugs(run: SnapRun, port: int) -> None:
    run.install()
    assert run.run_app("offline").stdout == '{"who": "offline", "AF_INET": "EACCES"}\n'
    assert run.run_app("cli").stdout == '{"who": "cli", "AF_INET": "ok"}\n'
    unplugged = {
        "AF_INET": "EACCES",
        "AF_INET6": "EACCES",
        "AF_UNIX": "ok",
        "AF_UNIX to snapd": "ok",
        "AF_NETLINK": "EPERM",
    }
    for who in ("hook-install", "hook-configure", "offline"):
        report = _report(run, who)
        assert (report["sockets"], report["child AF_INET"]) == (unplugged, "13"), who
    network = _report(run, "cli")
    assert (network["sockets"], network["child AF_INET"]) == ({
        "AF_INET": "ok", "AF_INET6": "ok", "AF_UNIX": "ok", "AF_UNIX to snapd": "ok",
        "AF_NETLINK": "ok",
    }, "ok")  # fmt: skip
    run.wait_for_port(port, service="server", timeout=30)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        answer = json.loads(conn.makefile().readline())
    assert answer == {
        "cwd": "/var/snap/probe/x1",
        "chain": "/snap/probe/x1/bin/chain",
        "home": "/root/snap/probe/x1",
    }
    assert run.service_log("server") == f"listening on {port}\n"


def test_the_checkout_and_the_host_venvs_are_not_there(run: SnapRun) -> None:
    hidden = [
        str(source_root()),
        sys.prefix,
        str(Path(sys.executable).resolve().parent),
        "/root/.pyenv",
        "/root/.cache",
        "/work",
        "/opt",
    ]
    assert [p for p in hidden if run.inside(p).exists()] == []
    base_dirs = [
        d for d in ("bin", "lib", "lib32", "lib64", "libx32", "sbin") if Path("/", d).exists()
    ]
    assert sorted(os.listdir(run.inside("/"))) == sorted(
        [
            *base_dirs,
            "dev",
            "etc",
            "home",
            "proc",
            "root",
            "run",
            "snap",
            "sys",
            "tmp",
            "usr",
            "var",
        ]
    )
    assert sorted(os.listdir(run.inside("/var"))) == ["lib", "snap", "tmp"]
    assert sorted(os.listdir(run.inside("/run"))) == ["snapd-snap.socket", "user"]
    assert sorted(os.listdir(run.inside("/usr/local"))) == ["bin", "lib", "sbin"]
    assert os.listdir(run.inside("/usr/local/lib")) == []
    assert sorted(os.listdir(run.inside("/root"))) == ["snap"]
    assert sorted(os.listdir(run.inside("/snap/probe"))) == ["components", "current", "x1"]


def test_configure_runs_after_set_and_a_refusal_changes_nothing(run: SnapRun) -> None:
    run.install()
    result = run.snap_set("greeting=hello")
    assert (result.returncode, result.stdout) == (
        0,
        '{"who": "hook-configure", "AF_INET": "EACCES"}\n',
    )
    assert _report(run, "hook-configure")["greeting"] == "hello"
    refused = run.snap_set("greeting=bad")
    assert (refused.returncode, refused.stderr) == (1, "greeting 'bad' refused\n")
    assert run.snapctl("get", "greeting").stdout == "hello\n"  # snapd did not commit it
    assert run.snapctl("services").stdout == (
        "Service       Startup  Current  Notes\nprobe.server  enabled  active   -\n"
    )  # the failed hook's queued `snapctl stop` was dropped
    typo = run.snap_set("greeting=typo")  # a hook's unknown service is refused at once
    assert (typo.returncode, typo.stderr) == (1, "error: snapctl: unknown service: 'probe.sever'\n")


def test_refresh_runs_post_refresh_in_the_new_revision(
    run: SnapRun, snaps: ProbeSnaps, port: int
) -> None:
    run.install()
    results = run.refresh(snaps.v2)
    assert [(r.argv, r.returncode, r.stdout) for r in results] == [
        (
            ["/snap/probe/x2/meta/hooks/post-refresh"],
            0,
            '{"who": "hook-post-refresh", "AF_INET": "EACCES"}\n',
        ),
        (
            ["/snap/probe/x2/meta/hooks/configure"],
            0,
            '{"who": "hook-configure", "AF_INET": "EACCES"}\n',
        ),
    ]
    post = _report(run, "hook-post-refresh")
    assert post["env"] == {
        **_unit_env(),
        **_snap_run_env("x2", "0.2"),
        "LD_LIBRARY_PATH": GL,
        "NOTIFY_SOCKET": "/run/systemd/notify",
        "PATH": f"{SNAP_PATH.replace('x1', 'x2')}:{CONFINE_PATH}",
        "SNAP_CONTEXT": post["env"]["SNAP_COOKIE"],
        "SNAP_COOKIE": post["env"]["SNAP_COOKIE"],
        "WATCHDOG_PID": str(run.server.pid if run.server else 0),
        "WATCHDOG_USEC": "300000000",
    }
    assert (post["weights"], post["greeting"]) == ("w1", "installed")
    assert (run.work / "var-snap/probe/x2/.written-by-hook-install").read_text() == "hook-install"
    assert os.readlink(run.work / "var-snap/probe/current") == "x2"
    run.wait_for_port(port, service="server", timeout=30)
    assert run.services()["server"].starts == 1
    assert _report(run, "server")["env"]["SNAP"] == "/snap/probe/x2"


def test_a_missing_hook_and_app_are_refused_with_the_reason(run: SnapRun) -> None:
    with pytest.raises(HarnessError, match="probe has no remove hook"):
        run.run_hook("remove")
    with pytest.raises(HarnessError, match="probe has no app 'nope'"):
        run.run_app("nope")


def test_plugs_connect_as_snapd_connects_them(snaps: ProbeSnaps, tmp_path: Path) -> None:
    """network auto-connects, hardware-observe does not: connected only when the operator
    says so (`snap connect`). And a test's own variables reach every run (extra_env)."""
    with SnapRun(
        snaps.v1,
        tmp_path / "w",
        components={"weights": snaps.weights},
        connections={"hardware-observe": True},
        extra_env={"SNAPBUILD_COMPONENT_WAIT": "5"},
        base_python=PYTHON,
    ) as snap:
        assert snap.run_hook("install").ok
        assert snap.run_app("offline").ok
        hook, app = _report(snap, "hook-install"), _report(snap, "offline")
    assert hook["hardware-observe"] == 0
    assert hook["env"]["SNAPBUILD_COMPONENT_WAIT"] == app["env"]["SNAPBUILD_COMPONENT_WAIT"] == "5"


def test_the_snapctl_client_answers_as_snapds(snaps: ProbeSnaps, tmp_path: Path) -> None:
    """Where the host has no snapd snapctl, the harness's client: the same answers, exit
    statuses and refusals."""
    with SnapRun(
        snaps.v1,
        tmp_path / "w",
        components={"weights": snaps.weights},
        snapctl="client",
        base_python=PYTHON,
    ) as snap:
        assert [r.ok for r in snap.install()] == [True, True]
        typo = snap.snap_set("greeting=typo")
        hook = _report(snap, "hook-configure")
    assert (hook["greeting"], hook["hardware-observe"], hook["weights"]) == ("installed", 1, "w1")
    assert (typo.returncode, typo.stderr) == (1, "error: snapctl: unknown service: 'probe.sever'\n")


def test_a_disconnected_plug_grants_nothing(run: SnapRun) -> None:
    run.install()
    run.connect("network", False)
    assert run.run_app("cli").stdout == '{"who": "cli", "AF_INET": "EACCES"}\n'
    answer = run.snapctl("is-connected", "network")
    assert (answer.returncode, answer.stdout, answer.stderr) == (1, "", "")


def test_a_daemon_that_keeps_failing_is_given_up_and_says_why(run: SnapRun, port: int) -> None:
    run.install()
    run.wait_for_port(port, service="server", timeout=30)
    run.snapctl("set", "fail=true")
    assert run.snapctl("restart", "probe.server").returncode == 0
    with pytest.raises(HarnessError, match="the server service is not running") as caught:
        run.wait_for_port(port, service="server", timeout=60)
    status = run.services()["server"]
    assert (status.enabled, status.active, status.failed, status.starts) == (True, False, True, 5)
    assert (caught.value.details or "").endswith("told to fail\n" * 5)
    assert run.snapctl("services").stdout.splitlines()[1].split() == [
        "probe.server",
        "enabled",
        "inactive",
        "failed",
    ]


def test_the_command_line_runs_the_steps_and_says_what_failed(
    snaps: ProbeSnaps, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", str(snaps.v1), "--work", str(tmp_path / "w")]
    argv += ["--component", f"weights={snaps.weights}"]
    argv += [] if PYTHON else ["--no-base-python"]
    steps = ["install", "app:offline", "set:greeting=bad"]
    code = cli.main([*argv, *(a for step in steps for a in ("--do", step))])
    out, err = capsys.readouterr()
    assert (code, out.splitlines(), err) == (
        1,
        [
            '{"who": "hook-install", "AF_INET": "EACCES"}',
            '{"who": "hook-configure", "AF_INET": "EACCES"}',
            '{"who": "offline", "AF_INET": "EACCES"}',
        ],
        "greeting 'bad' refused\nset:greeting=bad: /snap/probe/x1/meta/hooks/configure failed\n",
    )


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_without_cap_sys_admin_the_check_says_what_to_do() -> None:
    proc = subprocess.run(
        ["setpriv", "--bounding-set", "-sys_admin", sys.executable, "-m", "snapbuild.trial.snapd"]
        + ["check"],
        env={**os.environ, "PYTHONPATH": str(source_root())},
        capture_output=True,
        text=True,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        1,
        "- no CAP_SYS_ADMIN: mount namespaces, mounts and loop devices need root (run as root, "
        "or in a container started with --privileged or CAP_SYS_ADMIN)\n",
        "",
    )
