"""``snapbuild fetch --record`` (trust on first use) against a real HTTP server on 127.0.0.1:
a placeholder file is downloaded, and exactly its ``sha256:``/``size:`` lines change and its
``placeholder:`` line goes, every other byte of the hand-written manifest kept; a failed
download leaves the manifest untouched; a recorded file is then verified like any other."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.serving import http_files_server

from snapbuild.cli import cli, run_cli
from snapbuild.fetch.artifacts import artifact_dir, locate
from snapbuild.manifest.loader import load_manifest

WEIGHTS = os.urandom(300_000)
EXTRA = os.urandom(20_000)
Q8 = os.urandom(50_000)
SHA = hashlib.sha256(WEIGHTS).hexdigest()
ZEROS = "0" * 64


@dataclass
class Behaviour:
    """What the server serves, how it misbehaves (once per path), and what it saw."""

    files: dict[str, bytes] = field(default_factory=dict)
    cut_once: set[str] = field(default_factory=set)  # send half, then hang up
    error_once: set[str] = field(default_factory=set)  # answer 500 (after any cut)
    announce: dict[str, int] = field(default_factory=dict)  # a Content-Length to claim
    requests: list[str] = field(default_factory=list)  # "path [range]"


class Handler(http.server.BaseHTTPRequestHandler):
    behaviour: Behaviour

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        # the client may hang up first (a refused download): nothing left to answer
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._answer()

    def _answer(self) -> None:
        b = self.behaviour
        name = self.path.strip("/")
        header = self.headers.get("Range")
        b.requests.append(f"{name} {header}" if header else name)
        if name in b.error_once and name not in b.cut_once:  # cut first, then fail
            b.error_once.discard(name)
            self.send_error(500, "backend exploded")
            return
        payload = b.files[name]
        start = int(header.removeprefix("bytes=").split("-")[0]) if header else 0
        body = payload[start:]
        self.send_response(206 if header else 200)
        self.send_header("Content-Length", str(b.announce.get(name, len(body))))
        if header:
            self.send_header("Content-Range", f"bytes {start}-{len(payload) - 1}/{len(payload)}")
        self.end_headers()
        if name in b.cut_once or name in b.announce:
            b.cut_once.discard(name)
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.connection.shutdown(2)
            return
        self.wfile.write(body)


@pytest.fixture()
def server() -> Iterator[tuple[str, Behaviour]]:
    behaviour = Behaviour(
        files={"model.gguf": WEIGHTS, "extra.bin": EXTRA, "model-q8.gguf": Q8, "huge.gguf": Q8}
    )
    with http_files_server(type("H", (Handler,), {"behaviour": behaviour})) as base:
        yield base, behaviour


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SNAPBUILD_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SNAP", raising=False)
    return tmp_path / "cache"


def manifest_text(base: str, *, q8_file: str = "model-q8.gguf") -> str:
    return f"""\
# A hand-written manifest: its first file's url is real, its size a guess.
schema-version: 1
name: recordme
title: Record test
summary: A manifest whose artifacts are served on loopback
description: test
license: Apache-2.0
version: "1"
architectures: [amd64, arm64]
model:
  architecture: llama
artifacts:
  - name: weights
    format: gguf
    quantization: Q4_0
    files:
      # the weights: not verified when this was written
      - path: model.gguf
        url: {base}/model.gguf
        sha256: "{ZEROS}"
        size: 290000   # "290 kB" on the download page
        placeholder: true
        # checked by nobody yet
      - path: extra.bin
        url: {base}/extra.bin
        sha256: {hashlib.sha256(EXTRA).hexdigest()}
        size: {len(EXTRA)}
  - name: weights-q8
    format: gguf
    quantization: Q8_0
    files:
      - path: model-q8.gguf
        url: {base}/{q8_file}
        sha256: '{ZEROS}'
        size: 40000
        placeholder: true  # guessed
engines:
  - name: cpu
    summary: cpu
    runtime: llama.cpp-cpu
    artifact: weights
  - name: cpu-q8
    summary: cpu q8
    runtime: llama.cpp-cpu
    artifact: weights-q8
"""


def recorded_text(original: str) -> str:
    """``original`` with exactly the three lines of the weights' first file changed."""
    lines = original.splitlines(keepends=True)
    changes = {
        f'        sha256: "{ZEROS}"\n': f'        sha256: "{SHA}"\n',
        '        size: 290000   # "290 kB" on the download page\n': (
            f'        size: {len(WEIGHTS)}   # "290 kB" on the download page\n'
        ),
        "        placeholder: true\n": "",
    }
    assert all(lines.count(old) == 1 for old in changes)
    return "".join(changes.get(line, line) for line in lines)


@pytest.fixture()
def manifest_file(tmp_path: Path, server: tuple[str, Behaviour]) -> Path:
    path = tmp_path / "recordme.yaml"
    path.write_text(manifest_text(server[0]))
    return path


def test_record_edits_three_lines_then_plain_fetch_verifies(
    manifest_file: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = manifest_file.read_text()
    assert run_cli(cli, ["fetch", str(manifest_file), "--engine", "cpu", "--record"]) == 0
    out, _ = capsys.readouterr()
    directory = cache / "recordme" / "weights"
    assert out == (
        f"recorded weights/model.gguf in {manifest_file}: size 300000 (placeholder said "
        f"290000), sha256 {SHA}\n"
        f"downloaded: {directory / 'model.gguf'}\n"
        f"downloaded: {directory / 'extra.bin'}\n"
    )
    assert manifest_file.read_text() == recorded_text(original)
    assert sorted(p.name for p in manifest_file.parent.iterdir()) == ["cache", "recordme.yaml"]
    manifest = load_manifest(manifest_file)
    weights = manifest.artifact("weights")
    assert (weights.files[0].sha256, weights.files[0].size) == (SHA, len(WEIGHTS))
    assert not weights.files[0].placeholder
    assert manifest.artifact("weights-q8").files[0].placeholder  # the other artifact: as it was
    assert locate(manifest, weights) == directory
    assert (directory / "model.gguf").read_bytes() == WEIGHTS
    (directory / "model.gguf").unlink()  # a plain fetch now downloads and checks the sha256
    assert run_cli(cli, ["fetch", str(manifest_file), "--engine", "cpu"]) == 0
    assert capsys.readouterr().out == (
        f"downloaded: {directory / 'model.gguf'}\ncached: {directory / 'extra.bin'}\n"
    )


def test_server_error_mid_way_leaves_manifest_untouched(
    manifest_file: Path,
    cache: Path,
    server: tuple[str, Behaviour],
    capsys: pytest.CaptureFixture[str],
) -> None:
    base, behaviour = server
    original = manifest_file.read_bytes()
    behaviour.cut_once.add("model.gguf")
    behaviour.error_once.add("model.gguf")
    command = ["fetch", str(manifest_file), "--engine", "cpu", "--record", "--json"]
    assert run_cli(cli, command) == 1
    manifest = load_manifest(manifest_file)
    directory = artifact_dir(manifest, manifest.artifacts[0])
    assert sorted(p.name for p in directory.iterdir()) == ["model.gguf.part"]
    partial = (directory / "model.gguf.part").stat().st_size
    assert 0 < partial < len(WEIGHTS)
    assert capsys.readouterr().err.startswith(
        f"Error: the download of weights/model.gguf was cut off after {partial} of 300000 bytes\n"
    )
    assert manifest_file.read_bytes() == original
    assert run_cli(cli, command) == 1
    assert capsys.readouterr().err == (
        "Error: could not download weights/model.gguf: the server answered 500 backend "
        f"exploded\n  from {base}/model.gguf\n"
        "Fix: check the URL in the manifest, or run again later\n"
    )
    assert manifest_file.read_bytes() == original
    assert run_cli(cli, command) == 0  # resumes the .part, then records
    assert behaviour.requests == [
        "model.gguf",
        f"model.gguf bytes={partial}-",
        f"model.gguf bytes={partial}-",
        "extra.bin",
    ]
    assert capsys.readouterr().out == (
        "{\n"
        '  "artifact": "weights",\n'
        f'  "manifest": "{manifest_file}",\n'
        '  "recorded": [\n'
        "    {\n"
        '      "file": "weights/model.gguf",\n'
        '      "size": 300000,\n'
        f'      "sha256": "{SHA}"\n'
        "    }\n"
        "  ],\n"
        '  "files": [\n'
        "    {\n"
        f'      "path": "{directory / "model.gguf"}",\n'
        '      "action": "resumed"\n'
        "    },\n"
        "    {\n"
        f'      "path": "{directory / "extra.bin"}",\n'
        '      "action": "downloaded"\n'
        "    }\n"
        "  ]\n"
        "}\n"
    )
    assert manifest_file.read_bytes().decode() == recorded_text(original.decode())


def test_second_record_is_a_noop_verification(
    manifest_file: Path,
    cache: Path,
    server: tuple[str, Behaviour],
    capsys: pytest.CaptureFixture[str],
) -> None:
    base, behaviour = server
    command = ["fetch", str(manifest_file), "--engine", "cpu", "--record"]
    assert run_cli(cli, command) == 0
    recorded = manifest_file.read_bytes()
    capsys.readouterr()
    assert run_cli(cli, command) == 0
    directory = cache / "recordme" / "weights"
    assert capsys.readouterr().out == (
        f"nothing to record: weights has no placeholder files in {manifest_file}\n"
        f"cached: {directory / 'model.gguf'}\n"
        f"cached: {directory / 'extra.bin'}\n"
    )
    assert manifest_file.read_bytes() == recorded
    # the recorded checksum is now enforced: upstream changing the file is caught, not recorded
    (directory / "model.gguf").unlink()
    changed = behaviour.files["model.gguf"] = os.urandom(len(WEIGHTS))
    assert run_cli(cli, [*command, "--json"]) == 1
    assert capsys.readouterr() == (
        "",
        "Error: weights/model.gguf failed its checksum\n"
        f"  from {base}/model.gguf\n"
        f"  expected sha256 {SHA}\n"
        f"  got      sha256 {hashlib.sha256(changed).hexdigest()}\n"
        "  the download was deleted\n"
        "Fix: run again; if it fails the same way, the file upstream changed: update the "
        "manifest's sha256 and size\n",
    )
    assert manifest_file.read_bytes() == recorded
    assert sorted(p.name for p in directory.iterdir() if p.name[0] != ".") == ["extra.bin"]


def test_placeholder_without_record_says_how(
    manifest_file: Path, server: tuple[str, Behaviour], capsys: pytest.CaptureFixture[str]
) -> None:
    original = manifest_file.read_bytes()
    assert run_cli(cli, ["fetch", str(manifest_file), "--engine", "cpu-q8"]) == 2
    assert capsys.readouterr() == (
        "",
        "Error: weights-q8/model-q8.gguf has no verified download yet\n"
        "  the manifest 'recordme' marks its url, size and sha256 as a placeholder\n"
        f"Fix: run `snapbuild fetch {manifest_file} --engine cpu-q8 --record` to download it "
        "and record its size and sha256 (trust on first use), or fill them in by hand\n",
    )
    assert server[1].requests == []
    assert manifest_file.read_bytes() == original


def test_bare_name_says_which_file_was_edited(
    tmp_path: Path,
    server: tuple[str, Behaviour],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = tmp_path / "home"
    (home / "manifests").mkdir(parents=True)
    shipped = home / "manifests" / "recordme.yaml"
    shipped.write_text(manifest_text(server[0]))
    monkeypatch.setenv("SNAPBUILD_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    assert run_cli(cli, ["fetch", "recordme", "--engine", "cpu-q8", "--record"]) == 0
    target = tmp_path / "cache" / "recordme" / "weights-q8" / "model-q8.gguf"
    sha = hashlib.sha256(Q8).hexdigest()
    assert capsys.readouterr().out == (
        f"recorded weights-q8/model-q8.gguf in {shipped}: size 50000 (placeholder said 40000), "
        f"sha256 {sha}\ndownloaded: {target}\n"
    )
    # single-quoted stays single-quoted; the placeholder line goes with its comment
    assert shipped.read_text() == manifest_text(server[0]).replace(
        f"        sha256: '{ZEROS}'\n        size: 40000\n        placeholder: true  # guessed\n",
        f"        sha256: '{sha}'\n        size: 50000\n",
    )


def test_record_refused_inside_an_installed_snap(
    tmp_path: Path,
    server: tuple[str, Behaviour],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    snap = tmp_path / "snap"
    (snap / "snapbuild" / "manifests").mkdir(parents=True)
    shipped = snap / "snapbuild" / "manifests" / "recordme.yaml"
    shipped.write_text(manifest_text(server[0]))
    monkeypatch.setenv("SNAP", str(snap))
    assert run_cli(cli, ["fetch", str(shipped), "--engine", "cpu", "--record"]) == 2
    assert capsys.readouterr().err == (
        f"Error: cannot record into {shipped}: the manifest is inside the installed snap\n"
        "  --record writes the downloaded files' size and sha256 into the manifest\n"
        f"Fix: copy it somewhere writable (cp {shipped} ./recordme.yaml) and run: "
        "snapbuild fetch ./recordme.yaml --record\n"
    )
    assert server[1].requests == []


def test_announced_size_over_the_store_limit_is_refused_before_downloading(
    tmp_path: Path, server: tuple[str, Behaviour], capsys: pytest.CaptureFixture[str]
) -> None:
    base, behaviour = server
    behaviour.announce["huge.gguf"] = 6_000_000_000
    path = tmp_path / "huge.yaml"
    path.write_text(manifest_text(base, q8_file="huge.gguf"))
    original = path.read_bytes()
    assert run_cli(cli, ["fetch", str(path), "--engine", "cpu-q8", "--record"]) == 2
    assert capsys.readouterr().err == (
        "Error: weights-q8/model-q8.gguf is 6000000000 bytes, over the Store's 5000000000-byte "
        "component limit\n"
        f"  from {base}/huge.gguf; --record records whole files, not shards\n"
        "Fix: split the file into shards and write each shard's url, size and sha256 into the "
        "manifest by hand\n"
    )
    assert path.read_bytes() == original
