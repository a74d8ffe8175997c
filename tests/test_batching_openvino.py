"""OpenVINO continuous batching on the real runtime (tiny generated GGUF): concurrent answers at
temperature 0 are the one-at-a-time answers, token for token; cancelling one sequence leaves
the others running to their end; the server admits as many requests as the plan's sequences.

The adapters compute in f32 (``inference_precision``): with the CPU default on AMX or
AVX512-BF16 machines (bf16), rounding depends on the batch's shape, and a random-weight model's
near-tied logits then flip after a hundred tokens or so (docs/serving.md).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from support.serving import app_in_thread
from support.tiny_models import write_tiny_gguf

from runtimes.engine import LoadOptions
from runtimes.gateway.server import create_app
from runtimes.inprocess.adapter import Delta, Message, SamplingParams
from runtimes.inprocess.openvino import OpenVinoAdapter
from snapbuild.serving.batching import kv_block_tokens

pytestmark = pytest.mark.slow

CONTEXT = 2048
PROMPTS = [
    "Hello there, number one",
    "The second prompt is longer than the first one by a few words",
    "3",
    "A fourth request, about the weather in the mountains",
]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(
        tmp_path_factory.mktemp("ov") / "tiny.gguf", architecture="qwen2", context=CONTEXT
    )


def _adapter(model: Path, sequences: int) -> OpenVinoAdapter:
    adapter = OpenVinoAdapter(
        LoadOptions(
            artifact=model,
            runtime="openvino-cpu",
            context_size=CONTEXT,
            threads=2,
            sequences=sequences,
            kv_block_tokens=kv_block_tokens("openvino-cpu"),
            inference_precision="f32",
        )
    )
    adapter.load()
    return adapter


@pytest.fixture(scope="module")
def single(model: Path) -> OpenVinoAdapter:
    adapter = _adapter(model, 1)
    assert adapter.engine is None and adapter.concurrency == 1
    return adapter


@pytest.fixture(scope="module")
def batched(model: Path) -> Iterator[OpenVinoAdapter]:
    adapter = _adapter(model, 4)
    assert adapter.engine is not None and adapter.concurrency == 4
    yield adapter
    adapter.close()


def _text(deltas: list[Delta]) -> str:
    return "".join(d.text for d in deltas)


def _decoded(single: OpenVinoAdapter, prompt: str, params: SamplingParams) -> str:
    """The one-at-a-time pipeline's answer, from its tokens (not through any streamer)."""
    config = single._config(params, single.count_tokens(prompt))
    tokens = single.pipe.generate(single.tokenizer.encode(prompt), config).tokens[0]
    text: str = single.tokenizer.decode(list(tokens))
    return text


def _together(
    adapter: OpenVinoAdapter, prompts: list[str], params: SamplingParams
) -> list[list[Delta]]:
    """Run every prompt at once, each in its own thread, released together."""
    start = threading.Barrier(len(prompts))

    def one(prompt: str) -> list[Delta]:
        start.wait()
        return list(adapter.complete(prompt, params, threading.Event()))

    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(one, prompts))


def test_concurrent_answers_equal_one_at_a_time_answers(
    single: OpenVinoAdapter, batched: OpenVinoAdapter
) -> None:
    params = SamplingParams(max_tokens=200, temperature=0, ignore_eos=True)
    alone = [list(single.complete(p, params, threading.Event())) for p in PROMPTS]
    together = _together(batched, PROMPTS, params)
    for prompt, solo, batch in zip(PROMPTS, alone, together, strict=True):
        assert _text(batch) == _text(solo) == _decoded(single, prompt, params)
        assert batch[-1] == solo[-1]  # finish reason "length" and exact usage
        assert batch[-1].usage is not None and batch[-1].usage.completion_tokens == 200
    sequential = [list(batched.complete(p, params, threading.Event())) for p in PROMPTS]
    assert [_text(d) for d in sequential] == [_text(d) for d in together]
    figures = batched.metrics()
    assert figures["batch_size_max"] == 4  # all four really decoded in one step
    assert figures["batch_running"] == 0 and figures["batch_queue_depth"] == 0
    assert figures["time_to_first_token_seconds_last"] > 0


def test_chat_and_stop_strings_agree_with_one_at_a_time(
    single: OpenVinoAdapter, batched: OpenVinoAdapter
) -> None:
    greedy = SamplingParams(max_tokens=60, temperature=0, ignore_eos=True)
    plain = _text(list(single.complete(PROMPTS[1], greedy, threading.Event())))
    stop = plain[20:23]  # a stop string this answer is known to reach
    expected = plain[: plain.find(stop)]
    params = SamplingParams(max_tokens=60, temperature=0, ignore_eos=True, stop=(stop,))
    solo = list(single.complete(PROMPTS[1], params, threading.Event()))
    batch = _together(batched, [PROMPTS[1]] * 3, params)
    assert _text(solo) == expected and solo[-1].finish_reason == "stop"
    for answer in batch:
        assert _text(answer) == expected and answer[-1].finish_reason == "stop"
    messages = [Message("system", "Be brief."), Message("user", "Name three rivers.")]
    chat_solo = list(single.chat(messages, greedy, threading.Event()))
    chat_batch = list(batched.chat(messages, greedy, threading.Event()))
    assert _text(chat_batch) == _text(chat_solo) and chat_batch[-1] == chat_solo[-1]


def test_cancelling_one_sequence_leaves_the_others_running(
    single: OpenVinoAdapter, batched: OpenVinoAdapter
) -> None:
    params = SamplingParams(max_tokens=600, temperature=0, ignore_eos=True)
    expected = [_text(list(single.complete(p, params, threading.Event()))) for p in PROMPTS[1:]]
    cancel = threading.Event()
    start = threading.Barrier(4)

    def cancelled() -> list[Delta]:
        start.wait()
        got = []
        for delta in batched.complete(PROMPTS[0], params, cancel):
            got.append(delta)
            if len(got) == 5:
                cancel.set()  # the client hangs up after five pieces
        return got

    def full(prompt: str) -> list[Delta]:
        start.wait()
        return list(batched.complete(prompt, params, threading.Event()))

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        stopped = pool.submit(cancelled)
        others = [pool.submit(full, p) for p in PROMPTS[1:]]
        first = stopped.result()
        rest = [f.result() for f in others]
    assert first[-1].finish_reason == "cancelled"
    assert first[-1].usage is not None and first[-1].usage.completion_tokens < 600
    for answer, text in zip(rest, expected, strict=True):
        assert answer[-1].finish_reason == "length"
        assert answer[-1].usage is not None and answer[-1].usage.completion_tokens == 600
        assert _text(answer) == text
    assert batched.metrics()["batch_running"] == 0


def test_npu_engines_stay_one_at_a_time(model: Path) -> None:
    adapter = OpenVinoAdapter(
        LoadOptions(artifact=model, runtime="openvino-npu", device="npu", sequences=4)
    )
    assert adapter.concurrency == 1 and not adapter.batched
    assert adapter.notes == ["the NPU pipeline takes static shapes: one request at a time"]
    assert adapter.describe()["batching"] == {"mode": "one-at-a-time", "sequences": 1}


def _health(base: str) -> dict[str, int]:
    response = httpx.get(f"{base}/health")
    assert response.status_code == 200
    return dict(response.json()["generations"])


def test_server_streams_concurrently_and_a_disconnect_cancels_only_its_own(
    model: Path, single: OpenVinoAdapter
) -> None:
    adapter = OpenVinoAdapter(
        LoadOptions(
            artifact=model,
            runtime="openvino-cpu",
            context_size=CONTEXT,
            threads=2,
            sequences=4,
            kv_block_tokens=kv_block_tokens("openvino-cpu"),
            inference_precision="f32",
        )
    )
    app = create_app(
        adapter, model_id="tiny", engine_name="cpu", device="cpu", context_size=CONTEXT
    )
    params = SamplingParams(max_tokens=1500, temperature=0, ignore_eos=True)
    expected = [_text(list(single.complete(p, params, threading.Event()))) for p in PROMPTS[1:]]
    with app_in_thread(app) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="-", max_retries=0, timeout=120)
        before = _health(base)

        def stream(prompt: str) -> tuple[str, str | None]:
            chunks = client.completions.create(
                model="tiny",
                prompt=prompt,
                max_tokens=1500,
                temperature=0,
                stream=True,
                extra_body={"ignore_eos": True},
            )
            text, reason = "", None
            for chunk in chunks:
                text += chunk.choices[0].text
                reason = chunk.choices[0].finish_reason or reason
            return text, reason

        def hang_up() -> int:
            body = {
                "model": "tiny",
                "prompt": PROMPTS[0],
                "max_tokens": 1500,
                "stream": True,
                "temperature": 0,
                "ignore_eos": True,  # it must still be running when the client leaves
            }
            seen = 0
            with (
                httpx.Client(timeout=60) as http,
                http.stream("POST", f"{base}/v1/completions", json=body) as response,
            ):
                for line in response.iter_lines():
                    seen += line.startswith("data: ")
                    if seen >= 3:
                        break
            return seen

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            leaving = pool.submit(hang_up)
            answers = list(pool.map(stream, PROMPTS[1:]))
            assert leaving.result() == 3
        assert answers == [(text, "length") for text in expected]
        deadline = time.monotonic() + 30
        while _health(base)["active"] and time.monotonic() < deadline:
            time.sleep(0.05)
        after = _health(base)
        assert after["active"] == 0
        assert after["completed"] == before["completed"] + 3
        assert after["cancelled"] == before["cancelled"] + 1
        info = httpx.get(f"{base}/health").json()["runtime_info"]
        assert info["batching"] == {"mode": "continuous", "sequences": 4}
