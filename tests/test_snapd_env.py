"""snapd's rules in the harness, without running anything: data and code agree, the expansion
is snapd's (its own unit-test vectors), the environment changes by release as the data says,
the socket policy by plug, snap.yaml's plugs bound as snapd binds them, and docs/snaps.md shows
the table the data renders. No root needed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from support.snapd import snap_yaml
from support.tables import changed

from snapbuild.paths import read_data
from snapbuild.trial.snapd import cli
from snapbuild.trial.snapd.env import Placement, caller_environment, launch, run_facts
from snapbuild.trial.snapd.expand import expand_command_args, expand_environment, snapd_expand
from snapbuild.trial.snapd.meta import Runnable, SnapMeta
from snapbuild.trial.snapd.rules import (
    CALLER_FACTS,
    CWD_FACTS,
    DATA_PACKAGE,
    FACTS,
    EnvironmentRules,
    RunKind,
    SocketRules,
    environment_rules,
    placeholders,
)
from snapbuild.trial.snapd.seccomp import SocketPolicy

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "snapbuild" / "trial" / "snapd"
PROBE = SnapMeta.from_yaml(
    json.dumps(snap_yaml("0.1", 8400)), ["install", "configure", "post-refresh"]
)


def test_every_fact_the_data_names_is_computed_and_every_computed_fact_is_used() -> None:
    rules = environment_rules()
    facts = run_facts(PROBE, PROBE.apps["cli"], Placement("probe", "x1"), {}, app_cookie="c")
    assert tuple(facts) == tuple(FACTS)
    assert set().union(*(placeholders(v.value) for v in rules.variables)) == set(FACTS)
    callers = rules.callers
    used = set().union(*(placeholders(x) for c in (callers.hook, callers.service)
                         for x in c.variables.values()))  # fmt: skip
    assert used == set(CALLER_FACTS)
    cwd = rules.working_directories
    assert set().union(*(placeholders(d.value) for d in (cwd.service, cwd.app))) == set(CWD_FACTS)
    source = "".join(p.read_text() for p in PACKAGE.glob("*.py"))
    assert sorted(set(re.findall(r'behaves\("([a-z-]+)"', source))) == sorted(
        b.id for b in rules.behaviours
    )


def test_the_expansion_is_snapds_own_test_vectors() -> None:
    """osutil/env_test.go TestExpandEnvVariable (snapd 2.77+)."""
    env = {
        "LD_LIBRARY_PATH": "/usr/lib:/usr/local/lib",
        "TMPDIR": "/var/tmp",
        "A": "foo",
        "B": "bad-value",
        "D_default": "default",
    }
    entries = [
        ("LD_LIBRARY_PATH", "${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/lib/x86_64-linux-gnu"),
        ("PATH", "${PATH:+$PATH:}/usr/local/bin"),
        ("TMPDIR", "${TMPDIR:-this-wont-be}"),
        ("NOEXISTS", "${NOEXISTS:-a-new-value}"),
        ("A", "${A:+}"),
        ("B", "${B:+goodvalue}"),
        ("C", "${C:-}"),
        ("D", "${D:-$D_default}"),
    ]
    expand_environment(env, entries, conditional=True)
    assert env == {
        "LD_LIBRARY_PATH": "/usr/lib:/usr/local/lib:/usr/lib/x86_64-linux-gnu",
        "NOEXISTS": "a-new-value",
        "TMPDIR": "/var/tmp",
        "PATH": "/usr/local/bin",
        "A": "",
        "B": "goodvalue",
        "C": "",
        "D": "default",
        "D_default": "default",
    }


@pytest.mark.parametrize(
    ("text", "before_2_77", "since_2_77"),
    [
        ("${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}", "", ":/l"),
        ("x${G:+[${G}]}y", "x]}y", "x[G]}y"),  # the name ends at the first }
        ("${G:+${G}}", "}", "G}"),
        ("${G:-a}b}", "b}", "gb}"),
        ("$5 $$ ${} ${", "   ", "   "),
        ("$G-$G_x cost $", "g- cost $", "g- cost $"),
    ],
)
def test_os_expand_and_the_conditional_forms(text: str, before_2_77: str, since_2_77: str) -> None:
    env = {"G": "g", "LD_LIBRARY_PATH": "/l"}
    assert snapd_expand(text, env, conditional=False) == before_2_77
    assert snapd_expand(text, env, conditional=True) == since_2_77


def test_command_arguments_are_plain_os_expand_and_empty_ones_dropped() -> None:
    env = {"SNAP_DATA": "/var/snap/p/x1", "G": "g"}
    args = ["--data", "$SNAP_DATA", "$UNSET", "${G:+x}", "a b", "${G}"]
    assert expand_command_args(args, env) == ["--data", "/var/snap/p/x1", "a b", "g"]


RUNS: dict[RunKind, tuple[Runnable, dict[str, str]]] = {
    "hook": (PROBE.hooks["install"], {"SNAP_COOKIE": "h", "SNAP_CONTEXT": "h"}),
    "service": (PROBE.apps["server"], {}),
    "app": (PROBE.apps["cli"], {"LD_LIBRARY_PATH": "/l"}),
}


def _env(kind: RunKind, snapd: tuple[int, int]) -> dict[str, str]:
    runnable, caller = RUNS[kind]
    place = Placement("probe", "x1")
    return launch(PROBE, runnable, kind, place, caller, app_cookie="c", snapd=snapd).env


def test_the_environment_changes_by_release_as_the_data_says() -> None:
    def changes(kind: RunKind) -> dict[str, tuple[str | None, str | None]]:
        old, new = _env(kind, (2, 68)), _env(kind, (2, 78))
        keys = sorted({*old, *new})
        return {k: (old.get(k), new.get(k)) for k in keys if old.get(k) != new.get(k)}

    gl = "/var/lib/snapd/lib/gl:/var/lib/snapd/lib/gl32"
    shared = {
        "DEFAULTED": ("", "fallback"),  # 2.77: ${VAR:-word}
        "LD_LIBRARY_PATH": (f"{gl}:/var/lib/snapd/void", gl),  # 2.73: no void; 2.77: ${..:+..}
        "NESTED": ("x]}y", "x[GREETING]}y"),  # 2.77
        "SHELL": (None, "/bin/bash"),  # 2.70
        "SNAP_COMPONENTS": (None, "/snap/probe/components/x1"),  # 2.78
        "SNAP_LIBRARY_PATH": (f"{gl}:/var/lib/snapd/void", gl),  # 2.73
    }
    assert changes("hook") == shared
    assert changes("service") == {**shared, "SNAP_APP_NAME": (None, "server")}  # 2.77
    assert changes("app") == {
        **shared,
        "LD_LIBRARY_PATH": (f"{gl}:/var/lib/snapd/void", f"{gl}:/l"),
        "SNAP_APP_NAME": (None, "cli"),
    }


def test_a_non_root_caller_loses_glibcs_unsecure_variables() -> None:
    caller = {"LD_PRELOAD": "x.so", "TZDIR": "/z", "KEEP": "1", "SNAP_SAVED_TZDIR": "/saved"}
    cli_app = PROBE.apps["cli"]
    # root keeps everything (no secure exec) and the saved copy gives way to the live one;
    # for a user glibc drops LD_PRELOAD and TZDIR, and snap-exec restores the saved TZDIR
    for uid, expected in ((0, ("x.so", "/z", "1")), (65534, (None, "/saved", "1"))):
        place = Placement("probe", "x1", uid)
        env = launch(PROBE, cli_app, "app", place, caller, app_cookie="c", snapd=(2, 78)).env
        assert (env.get("LD_PRELOAD"), env.get("TZDIR"), env.get("KEEP")) == expected


def test_callers_are_systemd_and_snapd_not_this_process() -> None:
    hook = caller_environment("hook", hook_cookie="ctx", snapd_pid=42)
    names = ("SNAP_COOKIE", "SNAP_CONTEXT", "WATCHDOG_PID", "WATCHDOG_USEC")
    assert [hook[k] for k in names] == ["ctx", "ctx", "42", "300000000"]
    service = caller_environment("service")
    assert service["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
    assert re.fullmatch(r"[0-9a-f]{32}", service["INVOCATION_ID"])
    assert "HOME" not in service and "USER" not in service  # no User= in snapd's units


def test_plugs_bind_as_snapd_binds_them() -> None:
    meta = SnapMeta.from_yaml(
        "name: p\nplugs:\n  hw: hardware-observe\n  net: {interface: network}\n"
        "apps:\n  a: {command: a, plugs: [net]}\n  b: {command: b}\n"
        "hooks:\n  configure: {plugs: [network-bind]}\n",
        ["install", "configure"],
    )
    assert {n: sorted(r.plugs) for n, r in {**meta.apps, **meta.hooks}.items()} == {
        "a": ["hw", "net"],  # its own, and the one nobody lists
        "b": ["hw"],
        "install": ["hw"],  # a hook snapd adds for meta/hooks/install
        "configure": ["hw", "network-bind"],  # an implicit plug of that interface
    }
    assert meta.interfaces == {
        "hw": "hardware-observe",
        "net": "network",
        "network-bind": "network-bind",
    }


def test_the_socket_policy_of_each_plug() -> None:
    none, bind = SocketPolicy.for_plugs([]), SocketPolicy.for_plugs(["network-bind"])
    observe = SocketPolicy.for_plugs(["hardware-observe"])
    partial = SocketPolicy.for_plugs([], apparmor="partial")
    seen = {
        name: (sorted(p.families), sorted(p.netlink), sorted(p.syscalls))
        for name, p in (("none", none), ("bind", bind), ("observe", observe), ("partial", partial))
    }
    assert seen == {
        "none": ([1], [], []),
        "bind": ([1, 2, 10], [0], ["accept", "accept4", "bind", "listen"]),
        "observe": ([1], [15, 16], ["bind"]),
        "partial": ([1], [], ["bind"]),
    }
    assert (none.family_errno, none.netlink_errno, none.syscall_errno) == (13, 1, 1)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("variables", 0, "value"), "{mount_dirr}", "unknown fact mount_dirr"),
        (("variables", 0, "name"), "snap", "not an environment variable name: 'snap'"),
        (("variables", 10, "since"), "2.72", "SNAP_LIBRARY_PATH is listed twice for the same"),
        (
            ("variables", 0, "runs"),
            ["cron"],
            "Input should be 'hook', 'app' or 'service'",
        ),
        (("behaviours", 0, "id"), "xdg-runtime-dir-created", "behaviour listed twice"),
        (("callers", "hook", "variables", "X"), "{uid}", "unknown fact uid"),
    ],
)
def test_a_broken_environment_table_is_rejected(
    path: tuple[Any, ...], value: Any, message: str
) -> None:
    data = read_data("snapd_environment.yaml", DATA_PACKAGE)
    assert EnvironmentRules.model_validate(data) == environment_rules()
    with pytest.raises(ValidationError, match=re.escape(message)):
        EnvironmentRules.model_validate(changed(data, path, value))


def test_a_broken_socket_table_is_rejected() -> None:
    data = read_data("snapd_sockets.yaml", DATA_PACKAGE)
    with pytest.raises(
        ValidationError, match="unknown socket family or netlink protocol: NETLINK_X"
    ):
        SocketRules.model_validate(
            changed(data, ("interfaces", "network", "netlink"), ["NETLINK_X"])
        )


def test_docs_show_the_table_the_data_renders(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["table"]) == 0
    table = capsys.readouterr().out
    assert table == environment_rules().markdown()
    assert table in (ROOT / "docs" / "snaps.md").read_text()


def test_the_env_command_prints_a_runs_environment(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    yaml_file = tmp_path / "snap.yaml"
    yaml_file.write_text(json.dumps(snap_yaml("0.1", 8400)))
    assert cli.main(["env", str(yaml_file), "service:server", "--snapd", "2.68"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith(("NESTED=", "PORT=", "SNAP_APP", "#"))] == [
        "NESTED=x]}y",
        "PORT=8400",
        "# argv: ['/snap/probe/x1/bin/chain', '/snap/probe/x1/bin/server']",
        "# cwd: /var/snap/probe/x1",
    ]
    assert cli.main(["env", str(yaml_file), "hook:remove"]) == 2
    assert capsys.readouterr().err == (
        "Error: probe has no hook:remove\nFix: name hook:X, app:X or service:X\n"
    )
