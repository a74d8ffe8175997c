"""Images through the uniform API, for real: the tiny Gemma 3-style vision model
(tests/support/tiny_vision.py) served by ``snapbuild serve`` (llama-server with ``--mmproj``),
the official ``openai`` client sending generated PNGs, and every refusal the gateway makes."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from support.llama import needs_llama_server
from support.serving import snapbuild_serve, tiny_manifest
from support.tiny_models import write_tiny_llama_gguf
from support.tiny_vision import IMAGE_TOKENS, vision_manifest, write_png

pytestmark = [pytest.mark.slow, needs_llama_server]


def _data_url(path: Path, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode("ascii")


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("images")
    from PIL import Image

    out = {"png": write_png(tmp / "a.png"), "png2": write_png(tmp / "b.png", seed=1)}
    with Image.open(out["png"]) as img:
        img.save(tmp / "a.jpg", format="JPEG")
        img.save(tmp / "a.webp", format="WEBP")
        img.save(tmp / "a.gif", format="GIF")
        Image.new("RGB", (4200, 4100), (9, 99, 199)).save(tmp / "huge.png", format="PNG")
    out.update(jpg=tmp / "a.jpg", webp=tmp / "a.webp", gif=tmp / "a.gif", huge=tmp / "huge.png")
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    manifest = vision_manifest(tmp_path_factory.mktemp("vision"))
    args = [str(manifest), "--port", "auto", "--threads", "2", "--context-size", "512"]
    with snapbuild_serve(*args) as base:
        yield base


def _client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)


def _ask(*parts: dict[str, Any], text: str = "What is in the picture?") -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": text}, *parts]}]


def _image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def _post(base: str, messages: list[dict[str, Any]]) -> httpx.Response:
    body = {"model": "tinyvision", "messages": messages, "max_tokens": 4}
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60)


def test_models_and_health_say_the_model_takes_images(served: str) -> None:
    models = httpx.get(f"{served}/v1/models").json()
    assert [m["inputs"] for m in models["data"]] == [["text", "vision"]]
    health = httpx.get(f"{served}/health").json()
    assert health["inputs"] == ["text", "vision"]
    assert health["runtime_info"]["projector"].endswith("tiny-vision-mmproj.gguf")


def test_openai_client_sends_a_png_and_gets_an_answer(served: str, images: dict[str, Path]) -> None:
    client = _client(served)
    plain = client.chat.completions.create(
        model="tinyvision",
        messages=_ask(text="Hi"),  # type: ignore[arg-type]
        max_tokens=4,
        temperature=0,
    )
    seen = client.chat.completions.create(
        model="tinyvision",
        messages=_ask(_image(_data_url(images["png"])), text="Hi"),  # type: ignore[arg-type]
        max_tokens=4,
        temperature=0,
        extra_body={"ignore_eos": True},  # random weights: greedy may still pick end-of-turn
    )
    assert seen.choices[0].finish_reason == "length"
    assert seen.usage is not None and plain.usage is not None
    assert seen.usage.completion_tokens == 4
    # the image really went in: the prompt grew by its tokens (plus <start/end_of_image> text)
    assert seen.usage.prompt_tokens >= plain.usage.prompt_tokens + IMAGE_TOKENS


def test_responses_api_takes_input_images(served: str, images: dict[str, Path]) -> None:
    """``input_image`` parts of the Responses API go through the same checks and into the same
    prompt; a refusal names the Responses field, not the chat one it became."""
    client = _client(served)
    ask = {"type": "input_text", "text": "Hi"}
    plain = client.responses.create(model="tinyvision", input="Hi", max_output_tokens=4)
    seen = client.responses.create(
        model="tinyvision",
        instructions="Describe it.",
        input=[
            {
                "role": "user",
                "content": [ask, {"type": "input_image", "image_url": _data_url(images["png"])}],
            }
        ],
        max_output_tokens=4,
    )  # type: ignore[arg-type]
    assert seen.usage is not None and plain.usage is not None
    assert seen.usage.input_tokens >= plain.usage.input_tokens + IMAGE_TOKENS
    gif = {"type": "input_image", "image_url": _data_url(images["gif"], "image/gif")}
    refused = httpx.post(
        f"{served}/v1/responses",
        json={
            "model": "tinyvision",
            "instructions": "Describe it.",
            "input": [{"role": "user", "content": [ask, gif]}],
        },
    )
    error = refused.json()["error"]
    assert (refused.status_code, error["code"]) == (400, "unsupported_image_format")
    assert error["param"] == "input[0].content[1].image_url"
    assert "input[0].content[1].image_url" in error["message"]


def test_several_images_in_every_format(served: str, images: dict[str, Path]) -> None:
    one = _post(served, _ask(_image(_data_url(images["png"]))))
    parts = [
        _image(_data_url(images["png"])),
        _image(_data_url(images["jpg"], "image/jpeg")),
        _image(_data_url(images["webp"], "image/webp")),
    ]
    three = _post(served, _ask(*parts))
    assert one.status_code == 200 and three.status_code == 200, three.text
    grown = three.json()["usage"]["prompt_tokens"] - one.json()["usage"]["prompt_tokens"]
    assert grown >= 2 * IMAGE_TOKENS


def test_streamed_image_chat(served: str, images: dict[str, Path]) -> None:
    stream = _client(served).chat.completions.create(
        model="tinyvision",
        messages=_ask(_image(_data_url(images["png2"]))),  # type: ignore[arg-type]
        max_tokens=3,
        stream=True,
        temperature=0,
        extra_body={"ignore_eos": True},  # random weights may end the turn at any step
    )
    reasons = [c.choices[0].finish_reason for c in stream if c.choices]  # type: ignore[union-attr]
    assert reasons[-1] == "length"


@pytest.mark.parametrize(
    ("case", "status", "code"),
    [
        ("remote", 400, "remote_image_refused"),
        ("gif", 400, "unsupported_image_format"),
        ("not-base64", 400, "invalid_image"),
        ("not-an-image", 400, "invalid_image"),
        ("wrong-type", 400, "invalid_image"),
        ("too-many", 400, "too_many_images"),
        ("too-many-pixels", 413, "image_too_large"),
        ("file-url", 400, "invalid_image"),
    ],
)
def test_refusals_name_the_field(
    served: str, images: dict[str, Path], case: str, status: int, code: str
) -> None:
    png = _data_url(images["png"])
    parts = {
        "remote": [_image("https://example.com/cat.png")],
        "gif": [_image(_data_url(images["gif"], "image/gif"))],
        "not-base64": [_image("data:image/png;base64,@@@@")],
        "not-an-image": [_image("data:image/png;base64," + base64.b64encode(b"hello").decode())],
        "wrong-type": [_image(png.replace("image/png", "image/jpeg"))],
        "too-many": [_image(png)] * 9,
        "too-many-pixels": [_image(_data_url(images["huge"]))],
        "file-url": [_image("file:///etc/passwd")],
    }[case]
    response = _post(served, _ask(*parts))
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert error["param"] == "messages[0].content[1].image_url"
    assert error["message"].startswith("messages[0].content[1].image_url") or case == "too-many"
    assert _post(served, _ask(_image(png))).status_code == 200  # the server is still fine


def test_an_image_over_the_byte_limit_is_413(served: str) -> None:
    big = "data:image/png;base64," + "A" * (8 * 1024 * 1024)
    response = _post(served, _ask(_image(big)))
    assert response.status_code == 413


@pytest.fixture(scope="module")
def text_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("textonly")
    model = write_tiny_llama_gguf(tmp / "tiny.gguf")
    manifest = tiny_manifest(tmp, "tinytext", model, runtime="llama.cpp-cpu", fmt="gguf")
    with snapbuild_serve(str(manifest), "--port", "auto", "--threads", "2") as base:
        yield base


def test_text_only_model_refuses_images_naming_the_field(
    text_only: str, images: dict[str, Path]
) -> None:
    assert httpx.get(f"{text_only}/v1/models").json()["data"][0]["inputs"] == ["text"]
    messages = _ask(_image(_data_url(images["png"])))
    body = {"model": "tinytext", "messages": messages, "max_tokens": 2}
    response = httpx.post(f"{text_only}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "messages[0].content[1].image_url"
    assert error["code"] == "images_not_supported"
    assert "takes text only" in error["message"]
