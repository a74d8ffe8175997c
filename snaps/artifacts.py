"""Where an engine's weights are on disk, and putting split weights back together.

The Store caps a component at 5 GB, so the builder ships big weights in pieces and writes
``$SNAP/snapbuild/components.yaml`` saying which components an engine needs and, per artifact
file, either the component holding it or the ordered pieces to join (with the whole file's
sha256); :mod:`snapbuild.project.engine_data` reads it. An artifact therefore lives in one of three
layouts:

- **plain**: every file whole in the artifact's one component (the model is read in place);
- **joined**: some files stored as ``<file>.part-NN`` pieces, concatenated at install time into
  ``$SNAP_COMMON/artifacts/<artifact>/<file>`` (verified, atomically renamed);
- **gathered**: whole files spread over several components (GGUF splits, which llama.cpp loads
  from the first split only when all splits sit in one directory), linked into that same
  directory.

:func:`ready` prepares (joins, gathers) and resolves in one step. It runs where the components
are certainly installed: in the daemon, once it has seen them appear (snapd installs components a
hook asks for only after that hook), and in `use-engine`, where `snapctl install` blocks. Never in
a hook. :func:`resolve` knows all three layouts and checks every file is in place.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from snapbuild.manifest.model import Manifest
from snapbuild.project.engine_data import (
    ENGINE_DATA_FILE,
    ArtifactLayout,
    FileLayout,
    PieceRef,
    artifact_layout,
    packed_components,
    read_engine_data,
)
from snapcommon.errors import EXIT_NO_ENGINE, SnapbuildError
from snaps import verify
from snaps.env import SnapEnv

CHUNK = 8 * 1024 * 1024
SPACE_MARGIN = 64 * 1024 * 1024  # keep this much free after joining: the disk is shared
GGUF_SPLIT_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


class ArtifactError(SnapbuildError):
    """The weights are not where they should be, or could not be put back together."""


def engine_data_path(env: SnapEnv) -> Path:
    """The builder's install-time engine data, packed next to the manifest."""
    return env.snap / "snapbuild" / ENGINE_DATA_FILE


def engine_components(env: SnapEnv, manifest: Manifest, engine: str) -> list[str] | None:
    """The components ``engine`` needs as the builder packed them (None without engine data);
    ``manifest`` a ladder's option view: for that option."""
    return packed_components(read_engine_data(engine_data_path(env)), engine, manifest.view_of)


def option_components(env: SnapEnv) -> dict[str, set[str]]:
    """A ladder's artifact components per option, as the builder packed them (empty for a snap
    with one model): what to remove when the snap switches to another size."""
    data = read_engine_data(engine_data_path(env)) or {}
    runtimes = {
        name for name, c in (data.get("components") or {}).items() if c.get("kind") == "runtime"
    }
    return {
        option: {c for e in entry["engines"].values() for c in e["components"]} - runtimes
        for option, entry in (data.get("options") or {}).items()
    }


def layout(env: SnapEnv, manifest: Manifest, artifact: str) -> ArtifactLayout:
    """How ``artifact`` is stored in this snap
    (:func:`snapbuild.project.engine_data.artifact_layout`)."""
    return artifact_layout(read_engine_data(engine_data_path(env)), manifest, artifact)


def artifacts_root(env: SnapEnv) -> Path:
    """Where joined and gathered artifacts live: shared by revisions, so a refresh keeps them."""
    return env.common / "artifacts"


def assembled_dir(env: SnapEnv, artifact: str) -> Path:
    return artifacts_root(env) / artifact


# resolving (the daemon) ---------------------------------------------------------------------
def resolve(env: SnapEnv, manifest: Manifest, engine: str) -> Path:
    """The path the runtime loads for ``engine``: a file, the first GGUF split, or a directory.

    Checks that every file is in place (a joined copy, a live link, or a component file), so a
    daemon with missing weights stops with a clear message instead of a loader traceback.
    """
    eng = manifest.engine(engine)
    if eng is None:
        raise ArtifactError(f"engine {engine!r} is not in this snap", exit_code=EXIT_NO_ENGINE)
    return _resolve_artifact(env, manifest, manifest.weights(eng).name, engine)


def resolve_projector(env: SnapEnv, manifest: Manifest, engine: str) -> Path | None:
    """The projector file ``engine`` loads beside its weights (llama.cpp's mmproj), or None."""
    eng = manifest.engine(engine)
    if eng is None or eng.projector is None:
        return None
    return _resolve_artifact(env, manifest, eng.projector, engine)


def _resolve_artifact(env: SnapEnv, manifest: Manifest, artifact: str, engine: str) -> Path:
    lay = layout(env, manifest, artifact)
    base = _base(env, lay)
    missing = [f.path for f in lay.files if not (base / f.path).is_file()]
    if missing:
        where = "joined/gathered at install time" if lay.assembled else "in its component"
        raise ArtifactError(
            f"model file(s) of {lay.name} missing from {base}: {', '.join(missing)}",
            details=f"they should be {where}; components: {', '.join(lay.components)}",
            resolution=f"Run `{env.name} use-engine {engine}` to install and prepare them.",
            exit_code=EXIT_NO_ENGINE,
        )
    return model_path(base, lay)


def model_path(base: Path, lay: ArtifactLayout) -> Path:
    """One file: that file. GGUF splits: the first split. Several other files: the directory."""
    if len(lay.files) == 1:
        return base / lay.files[0].path
    if lay.format == "gguf":
        firsts = [f.path for f in lay.files if (m := GGUF_SPLIT_RE.search(f.path)) and m[1] == "1"]
        firsts = firsts or [f.path for f in lay.files if GGUF_SPLIT_RE.search(f.path) is None]
        if firsts:
            return base / sorted(firsts)[0]
        return base / sorted(f.path for f in lay.files)[0]
    return base


# preparing (the daemon, use-engine) ---------------------------------------------------------
def ready(env: SnapEnv, manifest: Manifest, engine: str, say: Callable[[str], None]) -> Path:
    """Put ``engine``'s weights in loadable shape and return the path the runtime loads.

    Joins and gathers (verified), then removes joined copies of artifacts ``engine`` does not
    use, so a switch does not leave old weights filling the disk; every file the engine loads
    is hashed once before its first load (:mod:`snaps.verify`).
    """
    prepare(env, manifest, engine, say)
    eng = manifest.engine(engine)
    assert eng is not None  # prepare raised otherwise
    for name in prune(env, keep={a.name for a in manifest.engine_artifacts(eng)}):
        say(f"removed the joined copy of {name}: no engine uses it any more")
    path = resolve(env, manifest, engine)
    for artifact in manifest.engine_artifacts(eng):
        lay = layout(env, manifest, artifact.name)
        loaded = {f.path: (_base(env, lay) / f.path).resolve() for f in lay.files if not f.joined}
        verify.check_once(env, manifest, lay.name, loaded, say)  # joined ones: checked at join
    return path


def _base(env: SnapEnv, lay: ArtifactLayout) -> Path:
    """Where the runtime loads ``lay``'s files from: the assembled copy, or its component."""
    return assembled_dir(env, lay.name) if lay.assembled else env.component_dir(lay.components[0])


def prepare(
    env: SnapEnv, manifest: Manifest, engine: str, say: Callable[[str], None]
) -> Path | None:
    """Join and gather ``engine``'s artifact after its components are installed.

    Does nothing for a plain artifact; skips a joined file already verified. Returns the
    assembled directory, or None when the model is read in place.
    """
    eng = manifest.engine(engine)
    if eng is None:
        raise ArtifactError(f"engine {engine!r} is not in this snap")
    if eng.projector is not None:
        _prepare_artifact(env, manifest, eng.projector, say)
    return _prepare_artifact(env, manifest, manifest.weights(eng).name, say)


def _prepare_artifact(
    env: SnapEnv, manifest: Manifest, artifact: str, say: Callable[[str], None]
) -> Path | None:
    lay = layout(env, manifest, artifact)
    if not lay.assembled:
        return None
    target = assembled_dir(env, lay.name)
    target.mkdir(parents=True, exist_ok=True)
    todo = [f for f in lay.files if f.joined and not _verified(env, lay.name, f, target)]
    for file in todo:
        _check_pieces(env, lay, file)
    _ensure_space(env, manifest, lay, todo, target, say)
    for file in todo:
        say(f"joining {lay.name}/{file.path} from {len(file.pieces)} pieces ({file.size} bytes)")
        join(env, manifest, lay, file, target)
    for file in lay.files:
        if not file.joined:
            assert file.component is not None
            _link(target / file.path, env.component_dir(file.component) / file.path)
    return target


def _check_pieces(env: SnapEnv, lay: ArtifactLayout, file: FileLayout) -> None:
    for piece in file.pieces:
        comp = env.component_dir(piece.component)
        if not comp.is_dir():
            raise ArtifactError(
                f"cannot join {lay.name}/{file.path}: component {piece.component} is not installed",
                details=f"{comp} is missing; it holds piece {piece.path}",
                resolution=f"Install it: `snap install {env.name}+{piece.component}`, then run "
                f"`{env.name} use-engine --auto`.",
            )
        if not (comp / piece.path).is_file():
            raise ArtifactError(
                f"cannot join {lay.name}/{file.path}: piece {piece.path} is missing from "
                f"component {piece.component}",
                details=f"looked for {comp / piece.path}",
                resolution=f"Reinstall the component: `snap remove {env.name}+{piece.component}` "
                f"then `snap install {env.name}+{piece.component}`.",
            )


def _ensure_space(
    env: SnapEnv,
    manifest: Manifest,
    lay: ArtifactLayout,
    todo: list[FileLayout],
    target: Path,
    say: Callable[[str], None],
) -> None:
    """Fail before writing a byte when the disk cannot hold the joined files.

    Copies of artifacts no engine uses any more are removed first when that makes room.
    """
    for leftover in target.glob(".*.partial"):
        leftover.unlink()  # an earlier join that was interrupted
    need = sum(f.size for f in todo)
    if not need or shutil.disk_usage(target).free >= need + SPACE_MARGIN:
        return
    for name in prune(env, keep={lay.name}):
        say(f"removed the joined copy of {name} to make room (no engine uses it now)")
    free = shutil.disk_usage(target).free
    if free < need + SPACE_MARGIN:
        raise ArtifactError(
            f"not enough free disk space to join {lay.name}",
            details=f"joining needs {need} bytes (plus {SPACE_MARGIN} spare) in {target}; "
            f"{free} bytes are free",
            resolution=f"Free at least {need + SPACE_MARGIN - free} bytes on that disk, then run "
            f"`{env.name} use-engine --auto`.",
        )


def join(
    env: SnapEnv, manifest: Manifest, lay: ArtifactLayout, file: FileLayout, target: Path
) -> Path:
    """Concatenate ``file``'s pieces into a temp file, verify sha256, rename it into place.

    Each piece is checked against the manifest's shard checksum on the way, so a corrupt piece
    is named; the whole file is checked against the builder's recorded sha256. On any failure
    the temp file is removed: a joined file is either verified or absent.
    """
    dest = target / file.path
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.partial")
    shards = _shard_sums(manifest, lay.name, file)
    whole = hashlib.sha256()
    try:
        with tmp.open("wb") as out:
            for i, piece in enumerate(file.pieces):
                part = hashlib.sha256()
                with (env.component_dir(piece.component) / piece.path).open("rb") as src:
                    while chunk := src.read(CHUNK):
                        out.write(chunk)
                        whole.update(chunk)
                        part.update(chunk)
                if shards and part.hexdigest() != shards[i]:
                    what = f"piece {piece.path} in component {piece.component}"
                    raise _corrupt(env, lay, file, what, shards[i], part.hexdigest(), piece)
            out.flush()
            os.fsync(out.fileno())
        if whole.hexdigest() != file.sha256:
            raise _corrupt(env, lay, file, "the joined file", file.sha256 or "", whole.hexdigest())
        tmp.replace(dest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    _mark_verified(env, lay.name, file, dest)
    return dest


def _corrupt(
    env: SnapEnv,
    lay: ArtifactLayout,
    file: FileLayout,
    what: str,
    want: str,
    got: str,
    piece: PieceRef | None = None,
) -> verify.CorruptArtifact:
    comps = [piece.component] if piece else sorted({p.component for p in file.pieces})
    return verify.CorruptArtifact(
        f"cannot join {lay.name}/{file.path}: {what} is corrupt (sha256 mismatch)",
        details=f"expected sha256 {want}, got {got}; nothing was written",
        resolution="Reinstall the component(s) ("
        + ", ".join(f"{env.name}+{c}" for c in comps)
        + f"), then run `{env.name} use-engine --auto`.",
    )


def _shard_sums(manifest: Manifest, artifact: str, file: FileLayout) -> list[str]:
    """The manifest's per-piece checksums, when they line up with the stored pieces."""
    for f in manifest.artifact(artifact).files:
        if f.path == file.path and len(f.shards) == len(file.pieces):
            return [s.sha256 for s in f.shards]
    return []


def _mark_verified(env: SnapEnv, artifact: str, file: FileLayout, dest: Path) -> None:
    """Record the checked copy so later hooks need not hash it again."""
    verify.mark(env, artifact, file.path, dest, file.sha256 or "")


def _verified(env: SnapEnv, artifact: str, file: FileLayout, target: Path) -> bool:
    """A verified copy is there, unchanged since it was checked."""
    dest = target / file.path
    if not dest.is_file() or dest.is_symlink() or not file.sha256:
        return False
    return dest.stat().st_size == file.size and verify.holds(
        env, artifact, file.path, dest, file.sha256
    )


def _link(link: Path, source: Path) -> None:
    """Point ``link`` at ``source`` (a component file), replacing a stale link."""
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and Path(os.readlink(link)) == source:
        return
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(source)


def prune(env: SnapEnv, *, keep: set[str]) -> list[str]:
    """Remove joined/gathered copies of artifacts not in ``keep``; the names removed."""
    root = artifacts_root(env)
    removed: list[str] = []
    for path in sorted(root.iterdir()) if root.is_dir() else ():
        if path.name == verify.VERIFIED_DIR or path.name in keep or not path.is_dir():
            continue
        shutil.rmtree(path)
        with contextlib.suppress(FileNotFoundError):
            verify.record_path(env, path.name).unlink()
        removed.append(path.name)
    return removed
