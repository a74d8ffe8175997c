"""Split weights at install time, on a real rendered project driven through the real hooks.

A tiny GGUF is cut into three shards and a second artifact ships as three GGUF split files;
the builder renders the project with a small component budget (so every piece lands in its own
component, as a 15 GB model's would), the components are staged from the plan the way snapcraft
would pack them, and the rendered install hook runs under the file-backed snapctl stand-in. The
hook only asks for the components (snapd installs them after it); the daemon's side (the real
`daemon` command, or :func:`snaps.artifacts.ready` it calls) joins and verifies.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.tiny_models import write_tiny_llama_gguf
from support.trials import daemon_outage, idle_server

from snapbuild.manifest.loader import load_manifest
from snapbuild.manifest.model import Manifest
from snapbuild.project import packing
from snapbuild.project.builder import BuiltProject, make
from snapbuild.trial.prime import assemble_prime, write_commands
from snapbuild.trial.sandbox import Trial
from snaps.artifacts import ArtifactError, layout, model_path, ready, resolve
from snaps.env import SnapEnv

NAME = "tiny-shards"
SPLITS = [f"tiny-0000{i}-of-00003.gguf" for i in (1, 2, 3)]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _thirds(data: bytes) -> list[bytes]:
    step = -(-len(data) // 3)
    return [data[i : i + step] for i in range(0, len(data), step)]


def _manifest(model: bytes, splits: list[bytes]) -> dict[str, object]:
    url = "https://example.invalid/tiny"
    return {
        "name": NAME,
        "title": "Tiny sharded model",
        "summary": "A tiny GGUF stored in shards and as GGUF splits",
        "description": "Test manifest for joining shards at install time.",
        "license": "MIT",
        "version": "1",
        "architectures": ["amd64", "arm64"],
        "model": {"architecture": "llama", "parameters": 1_000_000},
        "artifacts": [
            {
                "name": "tiny-sharded",
                "format": "gguf",
                "quantization": "F32",
                "files": [
                    {
                        "path": "tiny.gguf",
                        "url": f"{url}/tiny.gguf",
                        "sha256": _sha(model),
                        "size": len(model),
                        "shards": [
                            {"url": f"{url}/tiny.gguf.{i}", "sha256": _sha(p), "size": len(p)}
                            for i, p in enumerate(_thirds(model))
                        ],
                    }
                ],
            },
            {
                "name": "tiny-split",
                "format": "gguf",
                "quantization": "F32",
                "files": [
                    {"path": n, "url": f"{url}/{n}", "sha256": _sha(d), "size": len(d)}
                    for n, d in zip(SPLITS, splits, strict=True)
                ],
            },
        ],
        "engines": [
            {
                "name": "cpu-sharded",
                "summary": "llama.cpp, joined file",
                "runtime": "llama.cpp-cpu",
                "artifact": "tiny-sharded",
            },
            {
                "name": "cpu-split",
                "summary": "llama.cpp, GGUF splits",
                "runtime": "llama.cpp-cpu",
                "artifact": "tiny-split",
            },
        ],
    }


class Snap:
    """A rendered, primed and staged snap of the tiny manifest, not installed yet."""

    def __init__(self, trial: Trial, built: BuiltProject, model: bytes, splits: list[bytes]):
        self.trial = trial
        self.built = built
        self.model = model
        self.splits = splits

    @property
    def env(self) -> SnapEnv:
        return SnapEnv.from_environ(self.trial.env)

    @property
    def artifacts(self) -> Path:
        return Path(self.trial.env["SNAP_COMMON"]) / "artifacts"

    def staged_piece(self, component: str, path: str) -> Path:
        return self.trial.staged / component / path


@pytest.fixture
def snap(tmp_path: Path, machines_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Snap]:
    model = write_tiny_llama_gguf(tmp_path / "tiny.gguf").read_bytes()
    splits = [os.urandom(50_000 + i) for i in range(3)]
    manifest_file = tmp_path / f"{NAME}.yaml"
    manifest_file.write_text(yaml.safe_dump(_manifest(model, splits), sort_keys=False))
    # the Store's 5 GB limit scaled down: every piece needs a component of its own
    monkeypatch.setattr(packing, "COMPONENT_BUDGET", max(len(p) for p in _thirds(model)))
    monkeypatch.setenv("SNAPBUILD_HOST_ROOT", str(machines_dir / "asus-ux301l" / "machine-root"))
    trial = Trial(work=tmp_path / "work", name=NAME)
    built = make(str(manifest_file), trial.project)
    assemble_prime(trial, "amd64")
    write_commands(trial)
    # the server app idles instead of loading the model: these tests are about the files
    idle_server(trial)
    files = {"tiny.gguf": _thirds(model), **{n: [d] for n, d in zip(SPLITS, splits, strict=True)}}
    for comp in built.plan.components:  # what snapcraft would pack into each component
        (trial.staged / comp.name).mkdir(parents=True)
        for piece in comp.pieces:
            data = files[piece.file][max(piece.index, 1) - 1]
            (trial.staged / comp.name / piece.path).write_bytes(data)
    assert trial.snapctl("set", 'engine="cpu-sharded"').returncode == 0
    yield Snap(trial, built, model, splits)
    trial.stop()


def _hook(snap: Snap, hook: str) -> tuple[int, list[str]]:
    proc = snap.trial.run_hook(hook)
    return proc.returncode, proc.stderr.splitlines()


def _manifest_of(snap: Snap) -> Manifest:
    return load_manifest(str(snap.env.manifest_path))


def _daemon_prepares(snap: Snap, engine: str) -> tuple[Path, list[str]]:
    """What the daemon does once the components are in: ready the weights (its own function)."""
    said: list[str] = []
    path = ready(snap.env, _manifest_of(snap), engine, said.append)
    return path, said


def _daemon(snap: Snap) -> tuple[dict[str, Any], list[str]]:
    """The real daemon, which fails before it would load: its /health, its log until then."""
    return daemon_outage(snap.trial)


def test_install_hook_only_asks_and_the_daemon_side_joins_the_shards(snap: Snap) -> None:
    components = [c.name for c in snap.built.plan.components]
    assert components == [
        "llamacpp-cpu",
        "tiny-sharded",
        "tiny-sharded-2",
        "tiny-sharded-3",
        "tiny-split",
        "tiny-split-2",
        "tiny-split-3",
    ]
    code, err = _hook(snap, "install")
    assert code == 0, err
    assert err == [
        "selected engine cpu-sharded: cpu-sharded was asked for by name and is compatible",
        "requesting components (snapd installs them after this hook): llamacpp-cpu, "
        "tiny-sharded, tiny-sharded-2, tiny-sharded-3",
    ]
    assert not (snap.artifacts / "tiny-sharded").exists()  # the hook joins nothing
    joined, said = _daemon_prepares(snap, "cpu-sharded")
    assert said == [f"joining tiny-sharded/tiny.gguf from 3 pieces ({len(snap.model)} bytes)"]
    assert joined == snap.artifacts / "tiny-sharded" / "tiny.gguf"
    assert not joined.is_symlink() and joined.read_bytes() == snap.model
    assert sorted(p.name for p in (snap.artifacts / "tiny-sharded").iterdir()) == ["tiny.gguf"]
    assert resolve(snap.env, _manifest_of(snap), "cpu-sharded") == joined
    status = json.loads(snap.trial.run("status", "--json").stdout)
    assert (status["engine"], status["service"]["active"]) == ("cpu-sharded", True)

    # post-refresh does not touch the weights; a later start finds the verified copy
    mtime = joined.stat().st_mtime_ns
    code, err = _hook(snap, "post-refresh")
    assert (code, err) == (0, [])
    assert _daemon_prepares(snap, "cpu-sharded") == (joined, [])
    assert joined.stat().st_mtime_ns == mtime


def test_install_hook_succeeds_with_no_component_there_and_queues_them(snap: Snap) -> None:
    """The components are not installed while the hook runs (snapd installs them after it)."""
    aside = snap.trial.work / "aside"
    snap.trial.staged.rename(aside)  # not even available to install yet
    proc = snap.trial.run_hook("install", flush=False)
    assert proc.returncode == 0, proc.stderr
    assert not snap.env.components.exists()
    queue = json.loads((snap.trial.state / "queue.json").read_text())
    wanted = ["+llamacpp-cpu", "+tiny-sharded", "+tiny-sharded-2", "+tiny-sharded-3"]
    assert [(q["command"], q["args"]) for q in queue] == [
        ("install", wanted),
        ("start", ["--enable", f"{NAME}.server"]),
    ]
    assert _selected_engine(snap) == "cpu-sharded"  # the decision is recorded by the hook
    aside.rename(snap.trial.staged)  # snapd got them
    assert snap.trial.snapctl("flush").returncode == 0
    assert sorted(p.name for p in snap.env.components.iterdir()) == [w[1:] for w in wanted]
    services = snap.trial.snapctl("services").stdout.splitlines()
    assert services[1].split() == [f"{NAME}.server", "enabled", "active", "-"]


def _selected_engine(snap: Snap) -> str:
    data = json.loads((Path(snap.trial.env["SNAP_DATA"]) / "decision.json").read_text())
    return str(data["selected"]["engine"])


def test_switching_engine_gathers_splits_and_drops_the_unused_joined_copy(snap: Snap) -> None:
    assert _hook(snap, "install")[0] == 0
    _daemon_prepares(snap, "cpu-sharded")
    # outside a hook `snapctl install` blocks, so use-engine prepares before the restart
    proc = snap.trial.run("use-engine", "cpu-split", "--assume-yes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        "installing components: tiny-split, tiny-split-2, tiny-split-3",
        "removed the joined copy of tiny-sharded: no engine uses it any more",
        *(f"checking tiny-split/{s} (sha256, once before its first load)" for s in SPLITS),
    ]
    assert sorted(p.name for p in snap.artifacts.iterdir()) == [".verified", "tiny-split"]
    assert [p.name for p in (snap.artifacts / ".verified").iterdir()] == ["tiny-split.json"]
    gathered = snap.artifacts / "tiny-split"
    assert sorted(p.name for p in gathered.iterdir()) == SPLITS
    for name, data, comp in zip(
        SPLITS, snap.splits, ["tiny-split", "tiny-split-2", "tiny-split-3"], strict=True
    ):
        assert (gathered / name).is_symlink()
        assert os.readlink(gathered / name) == str(snap.env.component_dir(comp) / name)
        assert (gathered / name).read_bytes() == data
    manifest = _manifest_of(snap)
    assert resolve(snap.env, manifest, "cpu-split") == gathered / SPLITS[0]
    # the joined copy is gone, so the old engine's weights resolve to a clear error
    with pytest.raises(ArtifactError) as exc:
        resolve(snap.env, manifest, "cpu-sharded")
    assert exc.value.brief == (
        f"model file(s) of tiny-sharded missing from {snap.artifacts / 'tiny-sharded'}: tiny.gguf"
    )


def test_a_corrupt_piece_is_answered_as_load_failed_and_leaves_no_joined_file(snap: Snap) -> None:
    piece = snap.staged_piece("tiny-sharded-2", "tiny.gguf.part-02")
    data = bytearray(piece.read_bytes())
    data[100] ^= 0xFF
    piece.write_bytes(bytes(data))
    assert _hook(snap, "install")[0] == 0  # the hook never reads the pieces
    health, err = _daemon(snap)
    assert health["reason"] == "load-failed", err
    good = _sha(_thirds(snap.model)[1])
    brief = (
        "cannot join tiny-sharded/tiny.gguf: piece tiny.gguf.part-02 in component "
        "tiny-sharded-2 is corrupt (sha256 mismatch)"
    )
    assert err == [
        f"joining tiny-sharded/tiny.gguf from 3 pieces ({len(snap.model)} bytes)",
        f"Error: {brief}",
        f"  expected sha256 {good}, got {_sha(bytes(data))}; nothing was written",
        f"Fix: Reinstall the component(s) ({NAME}+tiny-sharded-2), then run "
        f"`{NAME} use-engine --auto`.",
    ]
    assert sorted(p.name for p in (snap.artifacts / "tiny-sharded").iterdir()) == []
    assert health["detail"].startswith(f"{brief} (expected sha256 {good}")
    assert health["resolution"] == (
        f"Reinstall the component(s) ({NAME}+tiny-sharded-2), then run `{NAME} use-engine --auto`."
    )
    note = json.loads((Path(snap.trial.env["SNAP_DATA"]) / "daemon.json").read_text())
    assert (note["phase"], note["message"]) == ("unavailable", f"load-failed: {brief}")


def test_a_missing_piece_names_its_component(snap: Snap) -> None:
    snap.staged_piece("tiny-sharded-3", "tiny.gguf.part-03").unlink()
    assert _hook(snap, "install")[0] == 0
    health, err = _daemon(snap)
    assert health["reason"] == "load-failed"
    assert err[-3:] == [
        "Error: cannot join tiny-sharded/tiny.gguf: piece tiny.gguf.part-03 is missing from "
        "component tiny-sharded-3",
        f"  looked for {snap.env.component_dir('tiny-sharded-3') / 'tiny.gguf.part-03'}",
        f"Fix: Reinstall the component: `snap remove {NAME}+tiny-sharded-3` then "
        f"`snap install {NAME}+tiny-sharded-3`.",
    ]
    assert list((snap.artifacts / "tiny-sharded").iterdir()) == []


def test_too_little_disk_space_fails_before_writing(snap: Snap) -> None:
    data_file = snap.trial.prime / "snapbuild" / "components.yaml"
    data = yaml.safe_load(data_file.read_text())
    free = shutil.disk_usage(snap.trial.work).free
    data["artifacts"]["tiny-sharded"]["files"][0]["size"] = free * 2
    data_file.write_text(yaml.safe_dump(data))
    assert _hook(snap, "install")[0] == 0
    health, err = _daemon(snap)
    assert health["reason"] == "load-failed"
    assert [line for line in err if line.startswith("Error:")] == [
        "Error: not enough free disk space to join tiny-sharded"
    ]
    assert list((snap.artifacts / "tiny-sharded").iterdir()) == []


def test_the_golden_sharded_layout_resolves_each_way(tmp_path: Path, data_dir: Path) -> None:
    expected = data_dir / "build" / "sharded" / "expected" / "snapbuild-data"
    (tmp_path / "snap" / "snapbuild").mkdir(parents=True)
    for name in ("components.yaml", "manifest.yaml"):
        shutil.copy(expected / name, tmp_path / "snap" / "snapbuild" / name)
    env = SnapEnv.from_environ(
        {"SNAP": str(tmp_path / "snap"), "SNAP_DATA": str(tmp_path / "d"), "SNAP_NAME": "big-llm"}
    )
    manifest = load_manifest(str(env.manifest_path))
    cut = layout(env, manifest, "big-cut")
    assert cut.assembled and cut.components == ("big-cut", "big-cut-2", "big-cut-3")
    assert [(p.component, p.path) for p in cut.files[0].pieces] == [
        ("big-cut", "big-Q8_0.gguf.part-01"),
        ("big-cut-2", "big-Q8_0.gguf.part-02"),
        ("big-cut-3", "big-Q8_0.gguf.part-03"),
    ]
    split = layout(env, manifest, "big-split")
    assert split.assembled and not any(f.joined for f in split.files)
    assert model_path(Path("/x"), split) == Path("/x/big-Q6_K-00001-of-00003.gguf")
