"""Chat templates for GGUFs without one: the model family's (kept as data) when the vocabulary
has its markers, else chat is refused with a 400 while completions work; never a generic
fallback whose markers leak into answers. Real llama.cpp on generated GGUFs."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import httpx
import jinja2
import pytest
from pydantic import ValidationError
from support.new_models import write_chat_gguf
from support.serving import app_in_thread

from runtimes.chat_templates import TemplateTable, choose_template, families, read_table
from runtimes.engine import LoadOptions
from runtimes.inprocess.adapter import Message, SamplingParams

GEMMA = ("<bos>", "<start_of_turn>", "<end_of_turn>", "<eos>")
CHATML = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello"},
    {"role": "user", "content": "Why?"},
]


def _choose(arch: str, tokens: tuple[str, ...], **extra: str) -> tuple[str, str | None]:
    meta = {"general.architecture": arch, **extra}
    choice = choose_template(meta, set(tokens).__contains__, extra.get("supplied"))
    return choice.label, choice.template


def test_the_order_manifest_gguf_family_none() -> None:
    assert _choose("llama", CHATML, supplied="{{ x }}") == ("manifest", "{{ x }}")
    own = {"tokenizer.chat_template": "{{ own }}"}
    assert _choose("llama", CHATML, **own) == ("gguf", "{{ own }}")
    assert _choose("gemma3", GEMMA)[0] == "family:gemma"
    assert _choose("llama", CHATML)[0] == "family:chatml"
    assert _choose("gemma3", CHATML)[0] == "family:chatml"  # markers decide, not the name only
    assert _choose("qwen2", GEMMA) == ("none", None)  # gemma markers, not a gemma model
    assert _choose("llama", ("<s>", "</s>")) == ("none", None)


def test_every_family_renders_and_uses_its_markers() -> None:
    expected = {
        "gemma": "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
        "Hello<end_of_turn>\n<start_of_turn>user\nWhy?<end_of_turn>\n<start_of_turn>model\n",
        "llama3": "<bos><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant"
        "<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhy?"
        "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        "chatml": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n"
        "<|im_start|>assistant\n",
    }
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    rendered = {
        f.name: env.from_string(f.template).render(
            messages=MESSAGES, bos_token="<bos>", eos_token="<eos>", add_generation_prompt=True
        )
        for f in families()
    }
    assert rendered == expected
    for family in families():
        assert set(family.stop) <= set(family.tokens)
        assert all(token in family.template for token in family.tokens)


@pytest.mark.parametrize(
    ("index", "changes", "message"),
    [
        (0, {"tokens": ["<start_of_turn>", "<eot>"]}, "gemma: the template never writes <eot>"),
        (1, {"stop": ["<|eot_id|>", "</s>"]}, "llama3: stop strings </s> are not its tokens"),
        (2, {"tokens": []}, "families.2.tokens\n  Tuple should have at least 1 item"),
        (2, {"name": "gemma"}, "family names listed twice: gemma"),
        (0, {"roles": ["user"]}, "families.0.roles\n  Extra inputs are not permitted"),
    ],
)
def test_a_broken_template_table_is_rejected(
    index: int, changes: dict[str, object], message: str
) -> None:
    data = read_table()
    assert TemplateTable.model_validate(data).families == families()
    entries = list(data["families"])
    entries[index] = {**entries[index], **changes}
    with pytest.raises(ValidationError, match=message):
        TemplateTable.model_validate({**data, "families": entries})


def _adapter(path: Path) -> object:
    from runtimes.inprocess.llamacpp import LlamaCppAdapter

    adapter = LlamaCppAdapter(LoadOptions(artifact=path, runtime="llama.cpp-cpu", context_size=256))
    adapter.load()
    return adapter


@pytest.mark.slow
def test_a_gguf_without_template_chats_with_its_familys(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    adapter = _adapter(write_chat_gguf(tmp_path / "m.gguf", specials=CHATML))
    info = adapter.describe()  # type: ignore[attr-defined]
    assert info["chat-template"] == "family:chatml"
    assert "chat" in info["capabilities"]
    prompt = adapter._chat_prompt([Message("user", "Hi")])  # type: ignore[attr-defined]
    assert prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    for seed in range(4):
        params = SamplingParams(max_tokens=48, seed=seed, temperature=1.0)
        text = "".join(
            d.text
            for d in adapter.chat([Message("user", "Hi")], params, threading.Event())  # type: ignore[attr-defined]
        )
        assert "<|im_" not in text


@pytest.mark.slow
def test_no_usable_template_refuses_chat_with_400_and_completes(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from runtimes.gateway.server import create_app
    from runtimes.inprocess.llamacpp import LlamaCppAdapter

    path = write_chat_gguf(tmp_path / "base.gguf", specials=("<s>", "</s>"))
    options = LoadOptions(artifact=path, runtime="llama.cpp-cpu", context_size=256)
    app = create_app(
        LlamaCppAdapter(options), model_id="base", engine_name="cpu", device="cpu", context_size=256
    )
    with app_in_thread(app) as base:
        health = httpx.get(f"{base}/health").json()
        assert health["runtime_info"]["chat-template"] == "none"
        assert health["runtime_info"]["capabilities"] == ["completion", "embeddings"]
        chat = httpx.post(
            f"{base}/v1/chat/completions",
            json={"model": "base", "messages": [{"role": "user", "content": "Hi"}]},
        )
        assert chat.status_code == 400
        assert chat.json()["error"]["code"] == "unsupported_operation"
        assert "does not support chat" in chat.json()["error"]["message"]
        done = httpx.post(
            f"{base}/v1/completions",
            json={"model": "base", "prompt": "Hi", "max_tokens": 4, "ignore_eos": True},
        )
        assert done.status_code == 200 and done.json()["usage"]["completion_tokens"] == 4


@pytest.mark.slow
def test_the_manifests_template_wins(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from runtimes.inprocess.llamacpp import LlamaCppAdapter

    path = write_chat_gguf(tmp_path / "base.gguf", specials=("<s>", "</s>"))
    template = "{% for m in messages %}Q: {{ m['content'] }}\n{% endfor %}A:"
    options = LoadOptions(
        artifact=path, runtime="llama.cpp-cpu", context_size=256, chat_template=template
    )
    adapter = LlamaCppAdapter(options)
    adapter.load()
    assert adapter.describe()["chat-template"] == "manifest"
    assert adapter._chat_prompt([Message("user", "Hi")]) == "Q: Hi\nA:"


@pytest.mark.slow
def test_llama_server_path_refuses_chat_without_a_template_and_completes(tmp_path: Path) -> None:
    """The same rule where llama-server serves: no template anywhere means no chat (400), not
    llama-server's built-in ChatML with its markers leaking into answers."""
    from support.llama import llama_server
    from support.serving import snapbuild_serve

    if llama_server() is None:
        pytest.skip("llama-server is not built here: run `make install`")
    path = write_chat_gguf(tmp_path / "base.gguf", specials=("<s>", "</s>"))
    manifest = tmp_path / "base.yaml"
    made = subprocess.run(
        [sys.executable, "-c", "from snapbuild.cli import main; main()", "new", str(path), "-o",
         str(manifest),
         "--name", "base"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    with snapbuild_serve(str(manifest), "--threads", "2", "--port", "auto") as base:
        chat = httpx.post(
            f"{base}/v1/chat/completions",
            json={"model": "base", "messages": [{"role": "user", "content": "Hi"}]},
            timeout=60,
        )
        assert chat.status_code == 400, chat.text
        assert "does not support chat" in chat.json()["error"]["message"]
        done = httpx.post(
            f"{base}/v1/completions",
            json={"model": "base", "prompt": "Hi", "max_tokens": 4},
            timeout=60,
        )
        assert done.status_code == 200, done.text
