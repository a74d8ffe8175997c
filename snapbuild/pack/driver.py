"""Runs INSIDE snapcraft's Python: build a rendered project's parts as snapcraft 9.0.1 does.

snapcraft and craft-parts live in their own virtualenv, with pins that clash with ours, so
:mod:`snapbuild.pack.packer` starts this file there as a script (``<python> -I driver.py``)
and they talk JSON: one request object on stdin, one result object on stdout. This module
therefore imports only the standard library, snapcraft and craft_parts (a test checks it), and
it never imports the rest of snapbuild.

What it runs is snapcraft's own code, in the order ``snapcraft pack --destructive-mode`` runs
it: snapcraft's plugins and partitions, its project, lifecycle (``LifecycleManager`` with its
arguments and callbacks) and package services, its linters and ``pack_snap``. What differs,
because this host is not a core24 builder (docs/building.md, "snapbuild pack", says why each):
``LifecycleService.run`` is not called (it refuses core24 on Debian; the plan is executed with
the same manager); build-packages are checked, not installed (``install_packages`` replaced);
the base snap is not installed; a stage-packages filter stands in for core24's package list;
python-apt is Debian's; the request may replace parts (offline sources), drop those of
components not built here, and seed craft-parts' file cache.

Request (schema 1): ``action`` ("probe", "plan" or "pack"), ``project_dir``, ``work_dir``,
``cache_dir``, ``logs_dir``, ``out_dir``, ``platform``, ``build_for``, ``apt_dir`` (where
python3-apt's modules are), ``path`` (the build's PATH), ``replace_parts`` ({name: part}),
``drop_parts`` ([name]), ``clean_parts`` ([name]: cleaned before planning), ``seed_files``
([{"checksum", "file"}]), ``snap_reuse`` ({"file", "fingerprint"} of a snap packed before, or
null).

Result: ``{"ok": true, "versions", "actions": [{"step", "part", "type", "seconds"}], "plan":
{part: {"plugin", "build-commands", "build-packages", "environment"}}, "prime": {"": dir,
component: dir}, "fingerprints": {same keys: hex}, "snap": file, "snap_reused": bool,
"linters": [text], "timings": {what: seconds}}``; or ``{"ok": false, "error": {"brief",
"details", "resolution", "exit_code"}}``. The exit status is 0 either way unless the request
itself could not be read (2).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

SCHEMA = 1
ACTIONS = ("probe", "plan", "pack")
FIELDS = ("project_dir", "work_dir", "cache_dir", "logs_dir", "out_dir", "platform", "build_for",
          "apt_dir", "path")  # fmt: skip
PROGRESS = "snapbuild-pack: "  # stderr lines meant for a person (the rest goes to the log)


class DriverError(Exception):
    """A failure the result reports as brief, details, resolution and exit code."""

    def __init__(self, brief: str, details: str = "", resolution: str = "", code: int = 1):
        super().__init__(brief)
        self.data = {
            "brief": brief,
            "details": details or None,
            "resolution": resolution or None,
            "exit_code": code,
        }


def enable_python_apt(apt_dir: Path, link_dir: Path) -> None:
    """Put python3-apt's four modules (only those: not Debian's other Python packages) on
    ``sys.path`` through links in ``link_dir``, an empty directory.

    Debian builds python3-apt for its own python3; the extension modules load only into the
    same CPython version (their file name carries it), so that is checked first."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    names = {"apt": "apt", "aptsources": "aptsources"}
    names.update({m: f"{m}{suffix}" for m in ("apt_pkg", "apt_inst")})
    missing = [name for name in names.values() if not (apt_dir / name).exists()]
    if missing:
        raise DriverError(
            f"python-apt for Python {sys.version_info[0]}.{sys.version_info[1]} is not "
            "installed (Debian's python3-apt package): craft-parts' deb backend needs it",
            details=f"{sys.executable} looked in {apt_dir} for: {', '.join(missing)}",
            resolution="apt-get install python3-apt; snapcraft's Python must be the version "
            "python3-apt is built for (Debian 12: 3.11)",
        )
    for name in names.values():
        (link_dir / name).symlink_to(apt_dir / name)
    sys.path.append(str(link_dir))


def host_base_packages(_info: object = None) -> set[str]:
    """Stand-in for core24's package list: installed Essential/Protected packages and their
    Pre-Depends and Depends, transitively (what any base provides, never staged)."""
    fields = (
        "${db:Status-Abbrev}\t${Package}\t${Essential}\t${Protected}\t${Pre-Depends}, ${Depends}\n"
    )
    out = subprocess.run(
        ["dpkg-query", "-W", "-f", fields], capture_output=True, text=True, check=True
    ).stdout
    depends: dict[str, set[str]] = {}
    todo: list[str] = []
    for line in out.splitlines():
        status, name, essential, protected, relations = line.split("\t")
        if not status.startswith("ii"):
            continue
        depends[name] = {
            alternative.split()[0].split(":")[0]
            for group in relations.split(",")
            for alternative in group.split("|")
            if alternative.strip()
        }
        if "yes" in (essential, protected):
            todo.append(name)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in seen and name in depends:
            seen.add(name)
            todo.extend(depends[name])
    return seen


def installed_versions(names: list[str]) -> tuple[dict[str, str], list[str]]:
    """({name: version} of the installed packages, [names not installed]); ``name=version``
    and ``name:arch`` entries are checked by name, as craft-parts' own check does."""
    plain = sorted({n.split("=")[0].split(":")[0] for n in names})
    if not plain:
        return {}, []
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package}\t${db:Status-Abbrev}\t${Version}\n", *plain],
        capture_output=True,
        text=True,
    ).stdout
    found = {}
    for line in out.splitlines():
        name, status, version = (line.split("\t") + ["", ""])[:3]
        if status.startswith("ii"):
            found[name] = version
    return found, [n for n in plain if n not in found]


def check_build_packages(_cls: object, package_names: list[str], **_options: object) -> list[str]:
    """Replaces the deb repository's ``install_packages``: build-packages are the host's own."""
    found, missing = installed_versions(list(package_names))
    if missing:
        raise DriverError(
            f"build-packages not installed on this machine: {', '.join(missing)}",
            details="snapbuild pack installs nothing on the host: it treats build-packages as "
            "installed and checks that they are (dpkg-query)",
            resolution=f"apt-get install {' '.join(missing)}",
        )
    return sorted(f"{name}={version}" for name, version in found.items())


def fingerprint(root: Path) -> str:
    """What a packed file depends on: every path, type and mode under ``root``, each file's
    size and mtime, and the bytes of ``meta/`` (rewritten by every run, usually unchanged)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        st = path.lstat()
        if path.is_symlink():
            digest.update(f"L {rel} {os.readlink(path)}\n".encode())
        elif path.is_dir():  # its entries count, not its time (rewriting a file changes it)
            digest.update(f"D {rel} {st.st_mode}\n".encode())
        elif rel.startswith("meta/"):
            digest.update(f"M {rel} {st.st_mode} ".encode() + path.read_bytes() + b"\n")
        else:
            digest.update(f"F {rel} {st.st_mode} {st.st_size} {st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _setup(req: dict[str, Any], result: dict[str, Any]) -> tuple[Any, Any, Any]:
    """snapcraft's start-up and services for the request's project: (factory, lifecycle, model)."""
    links = tempfile.mkdtemp(prefix="snapbuild-python-apt-")
    atexit.register(shutil.rmtree, links, ignore_errors=True)
    enable_python_apt(Path(req["apt_dir"]), Path(links))
    try:
        import craft_cli
        import craft_parts
        import snapcraft
        from craft_parts.plugins.dotnet_v2_plugin import DotnetV2Plugin
        from snapcraft import application, services
        from snapcraft.parts import plugins as snapcraft_plugins
    except ImportError as exc:
        raise DriverError(
            f"snapcraft is not importable by {sys.executable}: {exc}",
            resolution="pass --snapcraft with snapcraft 9.0.1's executable or its venv's python",
        ) from exc
    result["versions"] = {
        "snapcraft": snapcraft.__version__,
        "craft-parts": craft_parts.__version__,
        "python": sys.version.split()[0],
    }
    if req["action"] == "probe":
        return None, None, None
    logs = Path(req["logs_dir"])
    craft_cli.emit.init(
        craft_cli.EmitterMode.QUIET,
        "snapcraft",
        "snapbuild-pack",
        log_filepath=logs / "snapcraft.log",
    )
    os.environ["PATH"] = req["path"]
    os.chdir(req["project_dir"])  # snapcraft resolves the project and local sources from here
    craft_parts.Features.reset()
    craft_parts.Features(enable_partitions=True)  # Snapcraft._enable_craft_parts_features
    craft_parts.plugins.register(snapcraft_plugins.get_plugins(core22=False))
    craft_parts.plugins.unregister("dotnet")
    craft_parts.plugins.register({"dotnet": DotnetV2Plugin})
    craft_parts.packages.Repository.install_packages = classmethod(check_build_packages)
    services.register_snapcraft_services()
    factory = services.SnapcraftServiceFactory(app=application.APP_METADATA)
    factory.update_kwargs("project", project_dir=Path(req["project_dir"]))
    # craft-application's _configure_services; work_dir apart from the project, as managed runs
    factory.update_kwargs(
        "lifecycle",
        cache_dir=Path(req["cache_dir"]),
        work_dir=Path(req["work_dir"]),
        use_host_sources=False,
    )
    project = factory.get("project")
    project.configure(platform=req["platform"], build_for=req["build_for"])
    model = project.get()
    dropped = set(req.get("drop_parts") or ())
    for name in dropped:
        model.parts.pop(name, None)
    for part in model.parts.values():  # the gpu extension's cleanup part comes after all parts
        if dropped & set(part.get("after") or ()):
            part["after"] = [name for name in part["after"] if name not in dropped]
    model.parts.update(req.get("replace_parts") or {})
    from craft_parts.sources.cache import FileCache

    for seed in req.get("seed_files") or ():
        FileCache(Path(req["cache_dir"])).cache(filename=seed["file"], key=seed["checksum"])
    craft_parts.callbacks.register_stage_packages_filter(host_base_packages)
    lifecycle = factory.get("lifecycle")  # snapcraft's Lifecycle.setup() runs here
    lifecycle._lcm._executor._extra_build_snaps = []  # the base snap: no snapd to install it
    return factory, lifecycle, model


def _plan(lcm: Any) -> dict[str, Any]:
    """Each part's build commands, build-packages and build environment, as craft-parts writes
    them into ``parts/<part>/run/build.sh``."""
    from craft_parts import Step, plugins
    from craft_parts.executor.environment import generate_step_environment
    from craft_parts.infos import PartInfo, StepInfo

    out: dict[str, Any] = {}
    for part in lcm._part_list:
        info = PartInfo(lcm.project_info, part)
        plugin = plugins.get_plugin(part=part, part_info=info, properties=part.plugin_properties)
        env = generate_step_environment(
            part=part, plugin=plugin, step_info=StepInfo(info, Step.BUILD)
        )
        out[part.name] = {
            "plugin": part.plugin_name,
            "build-commands": plugin.get_build_commands(),
            "build-packages": sorted(plugin.get_build_packages()),
            "environment": env,
        }
    return out


def _run_lifecycle(req: dict[str, Any], lifecycle: Any, result: dict[str, Any]) -> None:
    from craft_parts import Step

    lcm = lifecycle._lcm
    known = {part.name for part in lcm._part_list}
    stale = [name for name in req.get("clean_parts") or () if name in known]
    if stale:  # their local source lost files, which craft-parts' update would keep
        lcm.clean(Step.PULL, part_names=stale)
        lcm.reload_state()  # the sequencer read the states before they were removed
        result["cleaned"] = stale
    actions = lcm.plan(Step.PRIME)
    result["actions"] = []
    with (Path(req["logs_dir"]) / "parts.log").open("a", encoding="utf-8") as log:
        started = time.monotonic()
        with lcm.action_executor() as executor:  # prologue: build-packages, callbacks
            result["timings"]["prologue"] = round(time.monotonic() - started, 2)
            for action in actions:
                what = f"{action.step.name.lower()} {action.part_name}"
                print(
                    f"{PROGRESS}{what} ({action.action_type.name.lower()})",
                    file=sys.stderr,
                    flush=True,
                )
                log.write(f"\n===== {what}\n")
                log.flush()
                started = time.monotonic()
                executor.execute(action, stdout=log, stderr=log)
                result["actions"].append(
                    {
                        "step": action.step.name.lower(),
                        "part": action.part_name,
                        "type": action.action_type.name.lower(),
                        "seconds": round(time.monotonic() - started, 2),
                    }
                )


def _pack(
    req: dict[str, Any], factory: Any, lifecycle: Any, model: Any, result: dict[str, Any]
) -> None:
    from snapcraft import linters
    from snapcraft import pack as snapcraft_pack
    from snapcraft.utils import process_version

    timings = result["timings"]
    started = time.monotonic()
    factory.get("package").write_metadata(lifecycle.prime_dir)
    timings["metadata"] = round(time.monotonic() - started, 2)
    prime = {name or "": str(path) for name, path in lifecycle.prime_dirs.items()}
    result["prime"] = prime
    result["fingerprints"] = {name: fingerprint(Path(path)) for name, path in prime.items()}
    reuse = req.get("snap_reuse") or {}
    if (
        reuse.get("fingerprint") == result["fingerprints"][""]
        and Path(reuse.get("file", "")).is_file()
    ):
        result.update(snap=reuse["file"], snap_reused=True, linters=[])
        return
    started = time.monotonic()
    issues = linters.run_linters(lifecycle.prime_dir, lint=model.lint)
    result["linters"] = [f"{i.type} {i.name} {i.result}: {i.text}" for i in issues]
    timings["linters"] = round(time.monotonic() - started, 2)
    started = time.monotonic()
    name = snapcraft_pack.pack_snap(
        lifecycle.prime_dir,
        output=req["out_dir"],
        compression=model.compression,
        name=model.name,
        version=process_version(model.version),
        target=req["build_for"],
    )
    timings["snap pack"] = round(time.monotonic() - started, 2)
    result.update(snap=str(Path(req["out_dir"]) / name), snap_reused=False)


def handle(req: dict[str, Any]) -> dict[str, Any]:
    """Carry out one request; every failure becomes the result's ``error``."""
    result: dict[str, Any] = {"ok": True, "timings": {}}
    try:
        started = time.monotonic()
        factory, lifecycle, model = _setup(req, result)
        result["timings"]["setup"] = round(time.monotonic() - started, 2)
        if req["action"] == "plan":
            result["plan"] = _plan(lifecycle._lcm)
        elif req["action"] == "pack":
            _run_lifecycle(req, lifecycle, result)
            _pack(req, factory, lifecycle, model, result)
    except DriverError as exc:
        return {**result, "ok": False, "error": exc.data}
    except Exception as exc:  # craft errors carry brief/details/resolution; others are bugs
        print(traceback.format_exc(), file=sys.stderr)
        return {**result, "ok": False, "error": _error_of(exc)}
    finally:
        if req.get("action") != "probe":
            _end_emitter()
    return result


def _error_of(exc: Exception) -> dict[str, Any]:
    """A craft error's own brief, details and resolution; for anything else, its last line."""
    details = getattr(exc, "details", None)
    if not hasattr(exc, "resolution"):
        details = "\n".join(filter(None, [details, f"{type(exc).__name__}: {exc}"]))
    brief = str(getattr(exc, "brief", "") or exc) or type(exc).__name__
    return {"brief": brief, "details": details, "resolution": getattr(exc, "resolution", None),
            "exit_code": 1}  # fmt: skip


def _end_emitter() -> None:
    try:
        import craft_cli

        craft_cli.emit.ended_ok()
    except Exception:  # noqa: BLE001 - the emitter was never started: nothing to end
        pass


def read_request(text: str) -> dict[str, Any]:
    """The request object, checked for the fields every action needs."""
    try:
        req = json.loads(text)
    except ValueError as exc:
        raise DriverError(f"the request is not JSON: {exc}", code=2) from exc
    if not isinstance(req, dict) or req.get("schema") != SCHEMA or req.get("action") not in ACTIONS:
        raise DriverError(
            f"the request needs schema {SCHEMA} and an action of {', '.join(ACTIONS)}", code=2
        )
    needed = ("apt_dir",) if req["action"] == "probe" else FIELDS
    absent = [key for key in needed if not isinstance(req.get(key), str)]
    if absent:
        raise DriverError(f"the request lacks {', '.join(absent)}", code=2)
    return req


def main() -> int:
    """Read the request, keep stdout for the result alone (every child's output goes to stderr),
    answer."""
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        req = read_request(sys.stdin.read())
    except DriverError as exc:
        json.dump({"ok": False, "error": exc.data}, answer)
        return 2
    for key in ("logs_dir", "out_dir", "cache_dir"):
        if req.get(key):
            Path(req[key]).mkdir(parents=True, exist_ok=True)
    json.dump(handle(req), answer)
    answer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
