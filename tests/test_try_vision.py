"""End to end through the snap: `snapbuild try` on the tiny vision model stages its projector
as its own component, the daemon starts llama-server with it, the official ``openai`` client
sends a generated PNG, `<snap> chat --image` attaches one, and `remote-images` is a setting."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import requests
from support.llama import needs_llama_server
from support.tiny_vision import IMAGE_TOKENS, vision_manifest, write_png

from snapbuild.trial.sandbox import Trial

pytestmark = [pytest.mark.slow, needs_llama_server]
NAME = "tinyvision"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_health(port: int, timeout: float = 90) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            resp = requests.get(f"http://127.0.0.1:{port}/health", timeout=2)
            if resp.status_code == 200:
                body: dict[str, object] = resp.json()
                return body
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise AssertionError(f"no healthy server on port {port}")


@pytest.fixture(scope="module")
def tried(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Trial, str, int, Path]]:
    models = tmp_path_factory.mktemp("models")
    manifest = vision_manifest(models, NAME)
    png = write_png(models / "picture.png")
    work = tmp_path_factory.mktemp("try") / NAME
    port = free_port()
    command = [
        str(Path(sys.executable).parent / "snapbuild"),
        "try",
        str(manifest),
        "--as",
        "trial",
    ]
    proc = subprocess.run(
        [*command, "--work-dir", str(work), "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    trial = Trial(work=work, name=NAME)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    try:
        assert trial.snapctl("start", f"{NAME}.server").returncode == 0
        wait_health(port)
        yield trial, proc.stdout + proc.stderr, port, png
    finally:
        trial.stop()


def test_the_projector_is_its_own_component(tried: tuple[Trial, str, int, Path]) -> None:
    _, output, _, _ = tried
    install = [line for line in output.splitlines() if "requesting components" in line]
    assert install == [
        "  install: requesting components (snapd installs them after this hook): llamacpp-cpu, "
        "weights, projector"
    ]


def test_status_and_health_say_images(tried: tuple[Trial, str, int, Path]) -> None:
    trial, _, port, _ = tried
    status = json.loads(trial.run("status", "--json").stdout)
    assert status["inputs"] == ["text", "vision"]
    assert "inputs:       text, vision" in trial.run("status").stdout.splitlines()
    health = requests.get(f"http://127.0.0.1:{port}/health", timeout=5).json()
    assert health["inputs"] == ["text", "vision"]
    assert health["runtime_info"]["projector"].endswith("tiny-vision-mmproj.gguf")


def test_openai_client_sends_a_png_through_the_snap(tried: tuple[Trial, str, int, Path]) -> None:
    _, _, port, png = tried
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
    url = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")
    content = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    reply = client.chat.completions.create(
        model=NAME,
        messages=[{"role": "user", "content": content}],  # type: ignore[list-item,misc]
        max_tokens=5,
        # random weights may sample end-of-turn at any step; the image is what is tested here
        extra_body={"ignore_eos": True},
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 5
    assert reply.usage.prompt_tokens > IMAGE_TOKENS
    refused = requests.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json={
            "model": NAME,
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}],
                }
            ],
        },
        timeout=30,
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "remote_image_refused"


def test_chat_attaches_an_image(tried: tuple[Trial, str, int, Path]) -> None:
    trial, _, _, png = tried
    proc = trial.run(
        "chat", "--max-tokens", "4", "--temperature", "0", "--image", str(png),
        input_text="Describe.\n",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    bad = trial.run("chat", "--image", str(trial.work / "env.sh"), input_text="Hi\n")
    assert bad.returncode != 0
    assert "is not a PNG, JPEG or WebP image" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_remote_images_setting_is_checked(tried: tuple[Trial, str, int, Path]) -> None:
    trial, _, _, _ = tried
    bad = trial.run("set", "remote-images=maybe")
    assert bad.returncode != 0
    assert "remote-images must be true or false, not 'maybe'" in bad.stderr
