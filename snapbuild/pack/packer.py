"""``snapbuild pack``: render a model's project, build it as snapcraft does, pack it.

The steps, each judged by the tool snapcraft itself uses:

1. render with the builder (:func:`snapbuild.project.builder.make`) for this machine's
   architecture, and sync the result into the work dir's project, touching only files that
   changed (craft-parts re-runs a part whose local source is newer than its last run);
2. prepare offline sources and decide what cannot be built here (:mod:`snapbuild.pack.inputs`);
3. run the driver (:mod:`snapbuild.pack.driver`) in snapcraft's Python, inside a mount namespace
   where ``/usr/bin/python3`` is 3.12 when it is not already: craft-parts pulls, builds, stages
   and primes every part, snapcraft writes the metadata, lints, and packs the ``.snap`` with
   ``snap pack``;
4. pack each component's prime tree as snapd's packer does (:mod:`snapbuild.pack.component`);
5. copy the ``.snap`` and ``.comp`` files into the output directory.

The work dir (``<snapbuild cache>/pack/<model>-<variant>-<arch>``) is kept: craft-parts skips
the steps whose inputs did not change, and a snap or component whose prime tree is unchanged
is not packed again, so a second pack of the same project takes seconds, not minutes.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtimes.catalog import load_catalog
from snapbuild.manifest.loader import load_manifest
from snapbuild.manifest.model import Manifest
from snapbuild.pack.calling import driver_request, run_driver
from snapbuild.pack.component import pack_component
from snapbuild.pack.host import Host, HostError, find_host
from snapbuild.pack.inputs import Inputs, Skipped, parts_to_clean, prepare_inputs, sync_tree
from snapbuild.paths import cache_dir
from snapbuild.project.builder import BuiltProject, make
from snapbuild.project.plan import plan_build
from snapcommon.errors import UsageError

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Packed:
    """What a pack left in the output directory, what it could not build, and how long it took."""

    model: str
    version: str
    variant: str
    architecture: str
    snap: Path
    components: dict[str, Path]
    skipped: tuple[Skipped, ...]
    reused: tuple[str, ...]  # files not packed again: their prime tree had not changed
    timings: dict[str, float]
    work: Path
    notes: tuple[str, ...] = ()

    def to_data(self) -> dict[str, Any]:
        """JSON-ready (``snapbuild pack --json``)."""
        return {
            "model": self.model,
            "version": self.version,
            "variant": self.variant,
            "architecture": self.architecture,
            "snap": str(self.snap),
            "components": {name: str(path) for name, path in self.components.items()},
            "skipped": [s.to_data() for s in self.skipped],
            "reused": list(self.reused),
            "timings": self.timings,
            "work": str(self.work),
            "notes": list(self.notes),
        }


def host_architecture() -> str:
    """This machine's Debian architecture (amd64, arm64...), the only one it builds for."""
    done = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        raise HostError("cannot tell this machine's architecture (dpkg --print-architecture)")
    return done.stdout.strip()


def work_dir(manifest: Manifest, variant: str | None, engines: Sequence[str], arch: str) -> Path:
    """Where a project's build is kept between packs."""
    name = f"{manifest.name}-{variant or 'all'}-{arch}"
    if engines:
        name += "-" + hashlib.sha256(",".join(sorted(engines)).encode()).hexdigest()[:8]
    return cache_dir() / "pack" / name


def pack(
    manifest: str | Path | Manifest,
    out: Path,
    *,
    variant: str | None = None,
    engines: Sequence[str] = (),
    snapcraft: str | Path | None = None,
    python312: str | Path | None = None,
    work: Path | None = None,
    clean: bool = False,
    build_native: bool = True,
    progress: Progress | None = None,
) -> Packed:
    """Build and pack ``manifest``'s snap and components for this machine into ``out``.
    ``build_native`` False leaves out native runtimes never built here instead of building
    them (tens of minutes each)."""
    started = time.monotonic()
    loaded, arch, host = _start(manifest, variant, engines, snapcraft, python312)
    work = (work or work_dir(loaded, variant, engines, arch)).resolve()
    timings: dict[str, float] = {}
    with _locked(work, clean, progress):
        built, inputs = _prepare(
            loaded, arch, variant, engines, work, host, timings, progress, build_native
        )
        record = _read_record(work)
        request = driver_request("pack", work, arch, inputs)
        request["snap_reuse"] = record.get("snap")
        request["clean_parts"] = parts_to_clean(
            {**built.project["parts"], **inputs.replace_parts},
            work / "project",
            work / "craft" / "parts",
        )
        result = run_driver(host, request, work, progress)
        timings.update({f"driver: {k}": v for k, v in result["timings"].items()})
        timings["driver: lifecycle"] = round(sum(a["seconds"] for a in result["actions"]), 2)
        snap = Path(result["snap"])
        reused = [snap.name] if result["snap_reused"] else []
        if not result["snap_reused"]:
            _linters(result["linters"], work, inputs)
        record = {
            "snap": {"file": str(snap), "fingerprint": result["fingerprints"][""]},
            "components": dict(record.get("components", {})),
        }
        skipped = {s.name for s in inputs.skipped}
        packed: dict[str, Path] = {}
        for name, prime in sorted(result["prime"].items()):
            if not name or name in skipped:
                continue
            t0 = time.monotonic()
            path, again = _component(
                Path(prime),
                work / "packed",
                built.project["compression"],
                result["fingerprints"][name],
                record["components"].get(name),
            )
            record["components"][name] = {
                "file": str(path),
                "fingerprint": result["fingerprints"][name],
            }
            packed[name] = path
            if again:
                reused.append(path.name)
            else:
                timings[f"mksquashfs {name}"] = round(time.monotonic() - t0, 2)
        (work / "packed" / "packed.json").write_text(json.dumps(record, indent=2) + "\n")
        t0 = time.monotonic()
        snap_out, comps_out = _deliver(snap, packed, out)
        timings["copy to output"] = round(time.monotonic() - t0, 2)
    timings["total"] = round(time.monotonic() - started, 2)
    return Packed(
        model=loaded.name,
        version=loaded.version,
        variant=built.plan.variant,
        architecture=arch,
        snap=snap_out,
        components=comps_out,
        skipped=tuple(inputs.skipped),
        reused=tuple(reused),
        timings=timings,
        work=work,
        notes=tuple(inputs.notes),
    )


def plan(
    manifest: str | Path | Manifest,
    *,
    variant: str | None = None,
    engines: Sequence[str] = (),
    snapcraft: str | Path | None = None,
    python312: str | Path | None = None,
    work: Path | None = None,
) -> dict[str, Any]:
    """The rendered project's parts as craft-parts plans them (nothing replaced, nothing run):
    ``{part: {"plugin", "build-commands", "build-packages", "environment"}}``."""
    loaded, arch, host = _start(manifest, variant, engines, snapcraft, python312)
    work = (work or work_dir(loaded, variant, engines, arch)).resolve()
    with _locked(work, clean=False):
        _render(loaded, arch, variant, engines, work)
        result = run_driver(host, driver_request("plan", work, arch, Inputs()), work, None)
    plans: dict[str, Any] = result["plan"]
    return plans


def _start(
    manifest: str | Path | Manifest,
    variant: str | None,
    engines: Sequence[str],
    snapcraft: str | Path | None,
    python312: str | Path | None,
) -> tuple[Manifest, str, Host]:
    """The manifest, this machine's architecture and tools; bad input is refused (exit 2)
    before the machine is examined."""
    loaded = manifest if isinstance(manifest, Manifest) else load_manifest(str(manifest))
    arch = host_architecture()
    if arch not in loaded.architectures:
        raise UsageError(
            f"{loaded.name!r} is not built for this machine's architecture ({arch})",
            details=f"the manifest lists: {', '.join(loaded.architectures)}",
            resolution="pack it on a machine of one of those architectures",
        )
    plan_build(loaded, load_catalog(), engines=engines, variant=variant, architectures=(arch,))
    return loaded, arch, find_host(snapcraft, python312)


def _render(
    manifest: Manifest, arch: str, variant: str | None, engines: Sequence[str], work: Path
) -> BuiltProject:
    built = make(
        manifest,
        work / "render",
        force=True,
        variant=variant,
        engines=tuple(engines),
        architectures=(arch,),
    )
    sync_tree(work / "render", work / "project")
    return built


def _prepare(
    manifest: Manifest,
    arch: str,
    variant: str | None,
    engines: Sequence[str],
    work: Path,
    host: Host,
    timings: dict[str, float],
    progress: Progress | None,
    build_native: bool,
) -> tuple[BuiltProject, Inputs]:
    t0 = time.monotonic()
    built = _render(manifest, arch, variant, engines, work)
    timings["render"] = round(time.monotonic() - t0, 2)
    _refuse_extensions(built, host)
    t0 = time.monotonic()
    inputs = prepare_inputs(
        manifest,
        built.plan,
        built.project["parts"],
        load_catalog(),
        work / "inputs",
        progress,
        build_native=build_native,
    )
    inputs.skipped += [
        Skipped(
            other,
            "architecture",
            f"not this machine's architecture ({arch})",
            f"pack on an {other} machine, or build with snapcraft remote-build",
        )
        for other in manifest.architectures
        if other != arch
    ]
    timings["inputs"] = round(time.monotonic() - t0, 2)
    return built, inputs


def _refuse_extensions(built: BuiltProject, host: Host) -> None:
    """snapcraft's extensions add parts made from snapcraft's extension data
    (``<prefix>/share/snapcraft/extensions``: a snap-installed snapcraft has it, a pip-installed
    one does not), and the ``gpu`` extension's cleanup part clones github.com/canonical/gpu-snap.
    Those parts are the snap's own (the apps' command-chain), so without the data no snap can be
    packed."""
    data = host.snapcraft_python.parent.parent / "share" / "snapcraft" / "extensions"
    used = sorted({x for app in built.project["apps"].values() for x in app.get("extensions", [])})
    if [x for x in used if not (data / x).is_dir()]:
        raise HostError(
            f"{built.plan.model} ({built.plan.variant}) uses snapcraft's {', '.join(used)} "
            "extension, whose parts cannot be built here",
            details=f"its parts need snapcraft's extension data, absent from {data} (a "
            "pip-installed snapcraft has none); the gpu extension's cleanup part also clones "
            "github.com/canonical/gpu-snap",
            resolution="pack the CPU variant here (--variant cpu), and build GPU variants with "
            "snapcraft (snapbuild ci's workflow)",
        )


def _linters(found: list[str], work: Path, inputs: Inputs) -> None:
    """snapcraft's lint results, kept in the logs and counted in the notes."""
    (work / "logs" / "linters.txt").write_text("".join(f"{line}\n" for line in found))
    if found:
        inputs.notes.append(
            f"snapcraft's linters: {len(found)} findings in {work / 'logs' / 'linters.txt'} (the "
            "library linter looks for the base's libraries in /snap/core24, absent here)"
        )


def _component(
    prime: Path, packed: Path, compression: str, fingerprint: str, before: dict[str, str] | None
) -> tuple[Path, bool]:
    """The component's ``.comp`` file: the one packed before when its prime tree is unchanged."""
    if before and before.get("fingerprint") == fingerprint and Path(before["file"]).is_file():
        return Path(before["file"]), True
    return pack_component(prime, packed, compression), False


def _deliver(snap: Path, components: dict[str, Path], out: Path) -> tuple[Path, dict[str, Path]]:
    """Copies (never links: the work dir's files may be packed again in place) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)

    def copy(path: Path) -> Path:
        target = out / path.name
        if target.resolve() != path.resolve():
            shutil.copyfile(path, target)
        return target

    return copy(snap), {name: copy(path) for name, path in components.items()}


def _read_record(work: Path) -> dict[str, Any]:
    try:
        record: dict[str, Any] = json.loads((work / "packed" / "packed.json").read_text())
    except (OSError, ValueError):
        return {}
    return record


@contextmanager
def _locked(work: Path, clean: bool, progress: Progress | None = None) -> Iterator[None]:
    """One pack at a time per work dir (a second one waits); ``clean`` starts it afresh."""
    work.mkdir(parents=True, exist_ok=True)
    with (work / ".lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            if progress:
                progress(f"waiting for another snapbuild pack using {work}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if clean:
            for entry in work.iterdir():
                if entry.name != ".lock":
                    shutil.rmtree(
                        entry
                    ) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        yield
