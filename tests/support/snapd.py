"""A tiny strict snap for the snapd-like harness's tests, packed with ``snap pack``.

``probe`` has what the harness must get right: an install hook without a network plug that asks
snapd for a component and a service (and plugs ``hardware-observe``, which snapd does not
connect by itself), a configure hook that refuses one value, a post-refresh hook, a CLI app
plugging ``network``, one plugging nothing, a ``network-bind`` daemon behind a command-chain,
``environment:`` entries with ``$SNAP`` and the shell forms snapd expands its own way, and one
component. Every hook and app runs ``bin/probe``, which writes what it sees (argv, cwd,
environment, what it can write, which sockets it gets, mounts) to
``$SNAP_COMMON/report-<who>.json``. ``pyvenv`` is a snap whose app runs a venv made the way
snapcraft makes one on core24 (``home = /usr/bin``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapbuild.trial.snapd import HarnessError, HostPython, check_host, find_host_python
from snapbuild.trial.snapd.env import dpkg_architecture

PROBE = r'''#!/usr/bin/python3 -I
"""Report what a snap process sees (the harness's tests read the report)."""
import errno, json, os, socket, subprocess, sys

who = sys.argv[1]


def attempt(family, kind=socket.SOCK_STREAM, proto=0, connect=None):
    try:
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        return errno.errorcode[exc.errno]
    with sock:
        if connect:
            sock.connect(connect)
    return "ok"


def writable(path):
    try:
        with open(os.path.join(path, f".written-by-{who}"), "w") as fh:
            fh.write(who)
    except OSError as exc:
        return errno.errorcode[exc.errno]
    return "ok"


CHILD = (
    "import socket\ntry:\n socket.socket(socket.AF_INET)\n print('ok')\n"
    "except OSError as e:\n print(e.errno)"
)


def output(*argv):
    return subprocess.run(argv, capture_output=True, text=True).stdout.strip()


def mounts():
    for line in open("/proc/self/mountinfo"):
        fields, fstype = line.split(), line.split(" - ")[1].split()[0]
        if fields[4].startswith("/snap/"):
            yield f"{fields[4]} {fields[5]} {fstype}"


revision = os.environ["SNAP_REVISION"]
components = os.environ.get("SNAP_COMPONENTS") or f"/snap/probe/components/{revision}"
comp = os.path.join(components, "weights", "weights.bin")
data = ("SNAP", "SNAP_DATA", "SNAP_COMMON", "SNAP_USER_DATA", "TMPDIR")
report = {
    "who": who,
    "argv": sys.argv,
    "cwd": os.getcwd(),
    "env": dict(sorted(os.environ.items())),
    "writable": {name: writable(os.environ[name]) for name in data},
    "sockets": {
        "AF_INET": attempt(socket.AF_INET),
        "AF_INET6": attempt(socket.AF_INET6),
        "AF_UNIX": attempt(socket.AF_UNIX),
        "AF_UNIX to snapd": attempt(socket.AF_UNIX, connect="/run/snapd-snap.socket"),
        "AF_NETLINK": attempt(socket.AF_NETLINK, socket.SOCK_RAW, 0),
    },
    "child AF_INET": output(sys.executable, "-I", "-c", CHILD),
    "greeting": output("snapctl", "get", "greeting"),
    "hardware-observe": subprocess.run(["snapctl", "is-connected", "hardware-observe"]).returncode,
    "weights": open(comp).read() if os.path.exists(comp) else None,
    "mounts": sorted(mounts()),
}
with open(os.path.join(os.environ["SNAP_COMMON"], f"report-{who}.json"), "w") as fh:
    json.dump(report, fh, indent=1)
print(json.dumps({"who": who, "AF_INET": report["sockets"]["AF_INET"]}))
'''

SERVER = r'''#!/usr/bin/python3 -I
"""The daemon: one JSON line to whoever connects to 127.0.0.1:$PORT (fails when told to)."""
import json, os, socket, subprocess, sys
told = subprocess.run(["snapctl", "get", "fail"], capture_output=True, text=True).stdout
if told.strip() == "true":
    sys.exit("told to fail")
info = {"cwd": os.getcwd(), "chain": os.environ.get("CHAIN_RAN"), "home": os.environ["HOME"]}
with open(os.path.join(os.environ["SNAP_COMMON"], "report-server.json"), "w") as fh:
    json.dump({"info": info, "env": dict(sorted(os.environ.items()))}, fh, indent=1)
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(os.environ["PORT"])))
srv.listen(8)
print("listening on", os.environ["PORT"], flush=True)
while True:
    conn, _ = srv.accept()
    with conn:
        conn.sendall((json.dumps(info) + "\n").encode())
'''

HOOKS = {
    "install": """\
        #!/bin/sh
        set -e
        "$SNAP/bin/probe" hook-install
        snapctl set greeting=installed
        snapctl install +weights
        snapctl start --enable probe.server
        """,
    "configure": """\
        #!/bin/sh
        set -e
        if [ "$(snapctl get greeting)" = bad ]; then
            snapctl stop probe.server
            echo "greeting 'bad' refused" >&2
            exit 1
        fi
        if [ "$(snapctl get greeting)" = typo ]; then
            snapctl restart probe.sever
        fi
        exec "$SNAP/bin/probe" hook-configure
        """,
    "post-refresh": """\
        #!/bin/sh
        exec "$SNAP/bin/probe" hook-post-refresh
        """,
}
CHAIN = '#!/bin/sh\nexport CHAIN_RAN="$0"\nexec "$@"\n'


def snap_yaml(version: str, port: int) -> dict[str, Any]:
    return {
        "name": "probe",
        "version": version,
        "summary": "A tiny strict snap for the snapd-like harness",
        "description": "Hooks, apps, a daemon and a component that report what they see.",
        "base": "core24",
        "confinement": "strict",
        "grade": "devel",
        "architectures": [dpkg_architecture()],
        "environment": {
            "LD_LIBRARY_PATH": "${SNAP_LIBRARY_PATH}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}",
            "PATH": "$SNAP/usr/sbin:$SNAP/usr/bin:$SNAP/sbin:$SNAP/bin:$PATH",
            "GREETING": "hello from $SNAP_NAME rev ${SNAP_REVISION}",
            "DEFAULTED": "${PROBE_UNSET:-fallback}",
            "NESTED": "x${GREETING:+[${GREETING}]}y",
        },
        "apps": {
            "cli": {
                "command": "bin/probe cli --data $SNAP_DATA $PROBE_UNSET end",
                "plugs": ["network"],
            },
            "offline": {"command": "bin/probe offline"},
            "server": {
                "command": "bin/server",
                "command-chain": ["bin/chain"],
                "daemon": "simple",
                "install-mode": "disable",
                "plugs": ["network-bind"],
                "environment": {"PORT": str(port)},
            },
        },
        "hooks": {
            "install": {"plugs": ["hardware-observe"]},  # not auto-connected
            "configure": {},
            "post-refresh": {},
        },
        "components": {
            "weights": {"type": "standard", "summary": "Weights", "description": "One file."}
        },
    }


@dataclass(frozen=True)
class ProbeSnaps:
    v1: Path  # revision x1, version 0.1
    v2: Path  # the refresh: version 0.2
    weights: Path  # the component


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def snap_pack(source: Path, out: Path) -> Path:
    proc = subprocess.run(["snap", "pack", str(source), str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip().removeprefix("built: "))


def mksquashfs(source: Path, target: Path) -> Path:
    """A component as snapcraft packs one: squashfs, xz, no fragments, owned by root."""
    opts = ["-noappend", "-comp", "xz", "-no-fragments", "-no-progress", "-all-root", "-quiet"]
    subprocess.run(["mksquashfs", str(source), str(target), *opts], check=True)
    return target


def build_probe(where: Path, port: int) -> ProbeSnaps:
    """Pack probe 0.1 and 0.2 with ``snap pack`` and its component with mksquashfs."""
    packed = []
    for version in ("0.1", "0.2"):
        src = where / f"probe-{version}"
        _write(src / "meta" / "snap.yaml", json.dumps(snap_yaml(version, port), indent=1))
        for hook, text in HOOKS.items():
            _write(src / "meta" / "hooks" / hook, textwrap.dedent(text), 0o755)
        _write(src / "bin" / "probe", PROBE, 0o755)
        _write(src / "bin" / "server", SERVER, 0o755)
        _write(src / "bin" / "chain", CHAIN, 0o755)
        packed.append(snap_pack(src, where))
    comp = where / "weights-src"
    _write(comp / "meta" / "component.yaml", "component: probe+weights\ntype: standard\n"
           "version: '1.0'\nsummary: Weights\ndescription: One file.\n")  # fmt: skip
    _write(comp / "weights.bin", "w1")
    return ProbeSnaps(packed[0], packed[1], mksquashfs(comp, where / "probe+weights_1.0.comp"))


PYVENV_MAIN = """import os, sys
import hello
print(sys.prefix, sys.base_prefix, sys.executable, hello.WHERE, os.path.exists("/root/.pyenv"))
"""


def build_pyvenv(where: Path, python: HostPython) -> Path:
    """A snap whose app runs ``venv/bin/python3 -m show``: a venv created where
    /usr/bin/python3 is core24's Python (so ``home = /usr/bin``), with a package of its own."""
    src = where / "pyvenv"
    meta = {
        "name": "pyvenv",
        "version": "1",
        "summary": "A venv on core24's Python",
        "description": "Runs a venv whose interpreter is the base's.",
        "base": "core24",
        "confinement": "strict",
        "architectures": [dpkg_architecture()],
        "apps": {"show": {"command": "venv/bin/python3 -m show"}},
    }
    _write(src / "meta" / "snap.yaml", json.dumps(meta, indent=1))
    made = python.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(src / "venv")])
    assert made.returncode == 0
    site = src / "venv" / "lib" / "python3.12" / "site-packages"
    _write(site / "hello" / "__init__.py", "WHERE = __file__\n")
    _write(site / "show.py", PYVENV_MAIN)
    return snap_pack(src, where)


def base_python() -> HostPython | None:
    """This host's Python 3.12 for core24's place, or None (the probe needs none: its scripts
    use only the standard library of whatever /usr/bin/python3 is)."""
    try:
        return find_host_python()
    except HarnessError:
        return None


def skip_reason() -> str | None:
    """Why the harness's tests cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "the snapd-like harness needs root (mount namespaces, loop devices)"
    missing = [tool for tool in ("snap", "mksquashfs", "unsquashfs") if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)}: apt-get install snapd squashfs-tools"
    problems = check_host()
    return "; ".join(problems) if problems else None
