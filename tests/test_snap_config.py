"""The snap's settings: parsing, key spelling, and whole-change validation with reasons."""

from __future__ import annotations

import socket

import pytest

from snapbuild.manifest.loader import load_manifest
from snapbuild.selection.decision import Candidate, MemoryEstimate
from snapcommon.errors import UsageError
from snaps import config

GIB = 2**30


@pytest.fixture(scope="module")
def manifest():  # type: ignore[no-untyped-def]
    return load_manifest("smollm2")


def _candidate(available: int) -> Candidate:
    # 1 GiB of weights, 1 MiB of KV cache per token at 1024 tokens, no headroom
    return Candidate(
        engine="cpu",
        runtime="llama.cpp-cpu",
        device="cpu",
        quantization="Q4_1",
        artifact="smollm2-q4-1",
        compatible=True,
        reasons=(),
        memory=MemoryEstimate(
            weights=GIB,
            kv_cache=1024 * 2**20,
            compute=0,
            overhead=0,
            required=2 * GIB,
            available=available,
            pool="ram",
            context_size=1024,
        ),
        context_size=1024,
    )


def test_keys_are_normalized_to_snapd_option_names() -> None:
    assert config.normalize_key("context_size") == "context-size"
    assert config.normalize_key("env.OMP_NUM_THREADS") == "env.omp-num-threads"
    assert config.env_option_to_var("omp-num-threads") == "OMP_NUM_THREADS"
    with pytest.raises(UsageError) as err:
        config.normalize_key("colour")
    assert err.value.brief == "unknown setting 'colour'"
    assert (
        err.value.resolution
        == "Settings are port, host, context-size, engine, engine-enabled, cors-origins, "
        "remote-images, model and env.NAME."
    )


def test_assignments_are_typed_by_key() -> None:
    assert config.parse_assignment("port=8081") == ("port", 8081)
    assert config.parse_assignment("host=0.0.0.0") == ("host", "0.0.0.0")
    assert config.parse_assignment("env.OMP_NUM_THREADS=4") == ("env.omp-num-threads", "4")
    with pytest.raises(UsageError) as err:
        config.parse_assignment("port=http")
    assert err.value.brief == "port must be a whole number, not 'http'"
    with pytest.raises(UsageError) as err:
        config.parse_assignment("port")
    assert err.value.brief == "'port' is not key=value"


def test_effective_settings_overlay_defaults(manifest) -> None:  # type: ignore[no-untyped-def]
    stored = config.flatten({"port": 9000, "env": {"omp-num-threads": "2"}})
    settings = config.effective(stored, manifest, 2048)
    assert settings.to_data() == {
        "port": 9000,
        "host": "127.0.0.1",
        "context-size": 2048,
        "engine": "auto",
        "cors-origins": "",
        "remote-images": "false",
        "engine-enabled": "true",
        "env": {"OMP_NUM_THREADS": "2"},
    }


def test_remote_images_is_true_or_false(manifest) -> None:  # type: ignore[no-untyped-def]
    allowed = config.effective({"remote-images": "TRUE"}, manifest, 2048)
    assert allowed.remote_images == "true"
    assert config.validate(allowed, manifest, None, own_port=allowed.port) == []
    wrong = config.effective({"remote-images": "sometimes"}, manifest, 2048)
    assert config.validate(wrong, manifest, None, own_port=wrong.port) == [
        "remote-images must be true or false, not 'sometimes' (true lets the server fetch "
        "http(s) image URLs that clients send)"
    ]


def test_engine_enabled_is_true_or_false(manifest) -> None:  # type: ignore[no-untyped-def]
    off = config.effective({"engine-enabled": False}, manifest, 2048)  # `snap set` stores JSON
    assert off.engine_enabled == "false"
    assert config.validate(off, manifest, None, own_port=off.port) == []
    wrong = config.effective({"engine-enabled": "off"}, manifest, 2048)
    assert config.validate(wrong, manifest, None, own_port=wrong.port) == [
        "engine-enabled must be true or false, not 'off' (false stops the engine; the API keeps "
        "its port and answers 503 saying so)"
    ]


def test_the_snaps_own_variables_are_refused(manifest) -> None:  # type: ignore[no-untyped-def]
    stored = config.flatten(
        {
            "env": {
                "omp-num-threads": "2",
                "ggml-vk-visible-devices": "0",
                "path": "/x",
                "ld-library-path": "/x",
                "snap-data": "/x",
                "snapbuild-llama-root": "/x",
                "pythonpath": "/x",
            }
        }
    )
    settings = config.effective(stored, manifest, 2048)
    problems = config.validate(settings, manifest, None, own_port=settings.port)
    refused = [p.split(" ", 1)[0] for p in problems]
    assert refused == [
        "env.PATH",
        "env.LD_LIBRARY_PATH",
        "env.SNAP_DATA",
        "env.SNAPBUILD_LLAMA_ROOT",
        "env.PYTHONPATH",
    ]
    assert problems[0] == (
        "env.PATH belongs to the snap's own environment (PATH, LD_*, PYTHON*, HOME, TMPDIR, "
        "SNAP*...): use env.* for the runtime's variables, such as OMP_NUM_THREADS or GGML_*; "
        "`unset env.PATH` if it is stored"
    )
    # one stored before the rule (or by snapd without the hook) never reaches the runtime
    assert config.runtime_env(settings.env) == (
        {"OMP_NUM_THREADS": "2", "GGML_VK_VISIBLE_DEVICES": "0"},
        ["LD_LIBRARY_PATH", "PATH", "PYTHONPATH", "SNAPBUILD_LLAMA_ROOT", "SNAP_DATA"],
    )


def test_max_context_is_linear_in_kv_cache(manifest) -> None:  # type: ignore[no-untyped-def]
    # 3 GiB available, 1 GiB fixed, 1 MiB/token: 2048 tokens fit
    assert config.max_context(_candidate(3 * GIB), manifest) == 2048
    # the model's trained maximum (8192) caps it when memory is plenty
    assert config.max_context(_candidate(64 * GIB), manifest) == 8192


def test_context_below_the_manifests_floor_is_refused(manifest) -> None:  # type: ignore[no-untyped-def]
    floor = manifest.min_context_size
    assert config.min_context("cpu", manifest) == floor == config.min_context(None, manifest)
    for size, problems in [
        (floor, []),
        (
            floor - 1,
            [
                f"context-size {floor - 1} is below the smallest this model is served with, "
                f"{floor} tokens (min-context-size in its manifest)"
            ],
        ),
    ]:
        settings = config.effective({"context-size": size}, manifest, 2048)
        got = config.validate(settings, manifest, _candidate(3 * GIB), own_port=settings.port)
        assert got == problems


def test_every_problem_is_reported_at_once(manifest) -> None:  # type: ignore[no-untyped-def]
    settings = config.Settings(
        port=70000, host="bad host!", context_size=4096, engine="turbo", env={"1X": "y"}
    )
    assert config.validate(settings, manifest, _candidate(3 * GIB)) == [
        "host 'bad host!' is not an IP address or host name (use 127.0.0.1 for this machine "
        "only, 0.0.0.0 for every interface)",
        "port 70000 is out of range: use 1-65535",
        "engine 'turbo' is not in this snap (engines: cuda, vulkan, cpu-avx2, cpu, auto)",
        "context-size 4096 does not fit: the most this engine fits here is 2048 tokens",
        "env.1X is not a valid environment variable name",
    ]


def test_busy_port_is_rejected_unless_it_is_ours(manifest) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        settings = config.Settings(port=port, host="127.0.0.1", context_size=1024, engine="auto")
        problems = config.validate(settings, manifest, None)
        assert len(problems) == 1
        assert problems[0].startswith(f"port {port} is busy on 127.0.0.1: another program ")
        assert config.validate(settings, manifest, None, own_port=port) == []
    assert config.validate(settings, manifest, None) == []


def test_cors_origins_are_validated(manifest) -> None:  # type: ignore[no-untyped-def]
    good = config.effective(
        {"cors-origins": "http://localhost:3000, https://app.example.org"}, manifest, 2048
    )
    assert good.origins() == ["http://localhost:3000", "https://app.example.org"]
    assert config.validate(good, manifest, None, own_port=good.port) == []
    assert config.effective({"cors-origins": "*"}, manifest, 2048).origins() == ["*"]
    bad = config.effective({"cors-origins": "localhost:3000"}, manifest, 2048)
    assert config.validate(bad, manifest, None, own_port=bad.port) == [
        "cors-origins: 'localhost:3000' is not an origin (scheme://host[:port], e.g. "
        "http://localhost:3000, or * for any)"
    ]
