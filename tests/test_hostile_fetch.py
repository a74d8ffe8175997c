"""User faults while fetching, as user errors: a disk too small for the download (refused before
the first byte), a disk that fills up mid-way (the partial file removed), and a cached file
whose bytes changed after it was verified (hashed again, named, downloaded again). Every
command runs bounded; the files are served from loopback."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support import hostile
from support.bounded import MIB, Bounded, snapbuild
from support.serving import http_files_server

from snapbuild.fetch.artifacts import FetchError, fetch, locate
from snapbuild.manifest.loader import load_manifest

PAYLOAD = hostile.model_gguf() + b"\0" * 300_000  # a readable GGUF, padded past 300 KB
SHA = hashlib.sha256(PAYLOAD).hexdigest()
GB = 1000**3


class Files(http.server.BaseHTTPRequestHandler):
    requests: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        Files.requests.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAYLOAD)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client gave up (its disk filled up)
            self.wfile.write(PAYLOAD)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def base() -> Iterator[str]:
    Files.requests = []
    with http_files_server(Files) as url:
        yield url


def _manifest(directory: Path, url: str, *, size: int = len(PAYLOAD), shards: int = 0) -> Path:
    file: dict[str, object] = {"path": "model.gguf", "url": f"{url}/model.gguf", "sha256": SHA}
    file["size"] = size
    if shards:
        each = -(-size // shards)
        sizes = [each] * (shards - 1) + [size - each * (shards - 1)]
        file["shards"] = [
            {"url": f"{url}/s{i}", "sha256": SHA, "size": n} for i, n in enumerate(sizes)
        ]
    data = {
        "schema-version": 1,
        "name": "fetchme",
        "title": "t",
        "summary": "s",
        "description": "d",
        "license": "MIT",
        "version": "1",
        "architectures": ["amd64", "arm64"],
        "model": {"architecture": "llama"},
        "artifacts": [
            {"name": "weights", "format": "gguf", "quantization": "F32", "files": [file]}
        ],
        "engines": [
            {"name": "cpu", "summary": "c", "runtime": "llama.cpp-cpu", "artifact": "weights"}
        ],
    }
    path = directory / "fetchme.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _bounded(result: Bounded, what: str) -> None:
    print(f"{what}: {result.describe()}")
    assert not result.timed_out and result.peak_rss < 300 * MIB, what
    assert "Traceback" not in result.stderr and result.returncode != 70, result.stderr


def test_a_download_the_disk_cannot_hold_is_refused_before_the_first_byte(
    tmp_path: Path, base: str
) -> None:
    free = shutil.disk_usage(tmp_path).free
    size = free + 10 * GB
    manifest = _manifest(tmp_path, base, size=size, shards=-(-size // (4 * GB)))
    cache = tmp_path / "cache"
    result = snapbuild("fetch", str(manifest), env={"SNAPBUILD_CACHE": str(cache)})
    _bounded(result, "fetch larger than the disk")
    assert result.returncode == 2
    assert "not enough free disk space for downloading weights/model.gguf" in result.stderr
    assert "SNAPBUILD_CACHE" in result.stderr
    assert Files.requests == []  # nothing was downloaded
    assert not any(p.is_file() for p in cache.rglob("*"))


def test_a_disk_that_fills_up_mid_way_leaves_no_partial_file(tmp_path: Path, base: str) -> None:
    manifest = _manifest(tmp_path, base)
    cache = tmp_path / "cache"
    env = {"SNAPBUILD_CACHE": str(cache)}
    result = snapbuild("fetch", str(manifest), env=env, file_size=100_000)
    _bounded(result, "fetch onto a full disk")
    assert result.returncode == 2
    assert "the disk filled up while downloading weights/model.gguf" in result.stderr
    assert "the partial file was deleted" in result.stderr
    assert [p.name for p in cache.rglob("*") if p.is_file()] == []
    again = snapbuild("fetch", str(manifest), env=env)  # with room, the same command works
    assert again.returncode == 0, again.stderr


def _flip(path: Path, *, keep_mtime: bool = False) -> None:
    """Change bytes in place: same size; the mtime moves unless ``keep_mtime``."""
    st = path.stat()
    with path.open("r+b") as fh:
        fh.seek(len(PAYLOAD) - 10)
        fh.write(b"\xff" * 4)
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_corrupted_cached_file_is_caught_and_fetched_again(
    tmp_path: Path, base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("SNAPBUILD_CACHE", str(cache))
    manifest_file = _manifest(tmp_path, base)
    manifest = load_manifest(manifest_file)
    [got] = fetch(manifest, manifest.artifacts[0], progress=None)
    assert got.action == "downloaded"
    _flip(got.path)
    env = {"SNAPBUILD_CACHE": str(cache)}
    result = snapbuild("validate", str(manifest_file), env=env)
    _bounded(result, "validate a corrupted cache")
    assert result.returncode == 2
    assert "sha256" in result.stderr and "`snapbuild fetch` downloads it again" in result.stderr
    with pytest.raises(FetchError, match="changed since it was verified"):
        locate(manifest, manifest.artifacts[0])  # serve and try refuse it, saying so
    result = snapbuild("fetch", str(manifest_file), env=env)
    _bounded(result, "fetch over a corrupted cache")
    assert result.returncode == 0
    assert "downloaded: " in result.stdout
    assert "model.gguf: the cached copy changed since it was verified" in result.stderr
    assert got.path.read_bytes() == PAYLOAD
    assert locate(manifest, manifest.artifacts[0]) == got.path


def test_validate_deep_hashes_even_an_unchanged_looking_file(
    tmp_path: Path, base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("SNAPBUILD_CACHE", str(cache))
    manifest_file = _manifest(tmp_path, base)
    manifest = load_manifest(manifest_file)
    [got] = fetch(manifest, manifest.artifacts[0], progress=None)
    _flip(got.path, keep_mtime=True)  # size and mtime as verified: the stamp still holds
    env = {"SNAPBUILD_CACHE": str(cache)}
    assert snapbuild("validate", str(manifest_file), env=env).returncode == 0
    deep = snapbuild("validate", "--deep", str(manifest_file), env=env)
    _bounded(deep, "validate --deep")
    assert deep.returncode == 2 and "has sha256" in deep.stderr
