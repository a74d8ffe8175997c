"""ONNX Runtime micro-batching on the real runtime: concurrent embedding requests run as padded
batches (a self-attention encoder, whose vectors change if padding is not masked) and every
caller gets exactly its own vectors, equal to one-at-a-time ones to 1e-5."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
from support.serving import app_in_thread
from support.tiny_encoder import write_tiny_onnx_encoder

from runtimes.engine import LoadOptions
from runtimes.gateway.server import create_app
from runtimes.inprocess.microbatch import MicroBatcher
from runtimes.inprocess.onnx import OnnxAdapter

TEXTS = [f"text {i}: {'a longer sentence, ' * (i % 5)}the end" for i in range(32)]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_onnx_encoder(tmp_path_factory.mktemp("enc") / "encoder.onnx")


def _adapter(model: Path, sequences: int, window_ms: float = 20.0) -> OnnxAdapter:
    adapter = OnnxAdapter(
        LoadOptions(
            artifact=model,
            runtime="onnxruntime-cpu",
            context_size=512,
            threads=1,
            sequences=sequences,
            batch_window_ms=window_ms,
        )
    )
    adapter.load()
    return adapter


@pytest.fixture(scope="module")
def single(model: Path) -> OnnxAdapter:
    adapter = _adapter(model, 1)
    assert adapter.batcher is None and adapter.concurrency == 1 and adapter.metrics() == {}
    return adapter


@pytest.fixture()
def batched(model: Path) -> Iterator[OnnxAdapter]:
    adapter = _adapter(model, 32)
    assert adapter.batcher is not None and adapter.concurrency == 32
    yield adapter
    adapter.close()


def _at_once(adapter: OnnxAdapter, requests: list[list[str]]) -> list[tuple[np.ndarray, int]]:
    start = threading.Barrier(len(requests))

    def one(texts: list[str]) -> tuple[np.ndarray, int]:
        start.wait()
        result = adapter.embed(texts)
        return np.array(result.vectors), result.prompt_tokens

    with concurrent.futures.ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(one, requests))


@pytest.mark.slow
def test_padding_is_masked_in_the_encoder(model: Path, single: OnnxAdapter) -> None:
    """The test model is fit for purpose: a text's vector alone equals its row in a padded
    batch, and would not if padding were attended to."""
    import onnxruntime as ort

    short, long = "hi", "a much longer text than the other one"
    alone = np.array(single.embed([short]).vectors[0])
    assert np.abs(np.array(single.embed([short, long]).vectors[0]) - alone).max() < 1e-5
    session = ort.InferenceSession(str(model))
    ids = np.zeros((1, 10), np.int64)
    ids[0, :2] = list(b"hi")
    states = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]
    unmasked = states[0].mean(axis=0)
    unmasked /= np.linalg.norm(unmasked)
    assert np.abs(unmasked - alone).max() > 1e-2


@pytest.mark.slow
def test_concurrent_single_texts_get_their_own_vectors(
    single: OnnxAdapter, batched: OnnxAdapter
) -> None:
    alone = [np.array(single.embed([t]).vectors[0]) for t in TEXTS]
    results = _at_once(batched, [[t] for t in TEXTS])
    for text, expected, (vectors, tokens) in zip(TEXTS, alone, results, strict=True):
        assert vectors.shape == (1, expected.shape[0])
        assert np.abs(vectors[0] - expected).max() <= 1e-5
        assert tokens == len(text.encode())
    figures = batched.metrics()
    assert figures["batch_requests_total"] == 32
    assert figures["batch_size_max"] > 1
    assert figures["batch_batches_total"] < 32
    assert figures["batch_size_mean"] == 32 / figures["batch_batches_total"]
    assert figures["batch_queue_depth"] == 0


@pytest.mark.slow
def test_requests_of_several_texts_keep_their_order(
    single: OnnxAdapter, batched: OnnxAdapter
) -> None:
    requests = [TEXTS[0:1], TEXTS[1:4], TEXTS[4:9], TEXTS[9:11]]
    results = _at_once(batched, requests)
    for texts, (vectors, tokens) in zip(requests, results, strict=True):
        expected = np.array(single.embed(texts).vectors)
        assert vectors.shape == expected.shape
        assert np.abs(vectors - expected).max() <= 1e-5
        assert tokens == sum(len(t.encode()) for t in texts)


def test_batcher_gathers_in_order_and_isolates_a_failed_batch() -> None:
    """The batcher on its own, around a plain function: batches never exceed ``max_items``
    except for one oversized call running alone; a failing batch fails its callers only."""
    seen: list[list[int]] = []

    def square(items: list[int]) -> list[int]:
        seen.append(list(items))
        if -1 in items:
            raise ValueError("negative input")
        return [i * i for i in items]

    batcher: MicroBatcher[int, int] = MicroBatcher(square, max_items=4, window=0.05)
    try:
        calls = [[1, 2], [3], [4, 5], [6, 7, 8, 9, 10], [11]]
        start = threading.Barrier(len(calls))

        def one(items: list[int]) -> list[int]:
            start.wait()
            return batcher.submit(items)

        with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
            answers = list(pool.map(one, calls))
        assert answers == [[i * i for i in call] for call in calls]
        assert all(len(batch) <= 4 or batch == [6, 7, 8, 9, 10] for batch in seen)
        assert sorted(i for batch in seen for i in batch) == list(range(1, 12))
        with pytest.raises(ValueError, match="negative input"):
            batcher.submit([-1])
        assert batcher.submit([12]) == [144]  # the next batch is served normally
        assert batcher.metrics()["batch_requests_total"] == 7
    finally:
        batcher.close()
    with pytest.raises(RuntimeError, match="shut down"):
        batcher.submit([1])


@pytest.mark.slow
def test_server_answers_concurrent_embedding_requests(model: Path, single: OnnxAdapter) -> None:
    adapter = _adapter(model, 32, window_ms=20)  # 32 client threads share the GIL with it
    app = create_app(
        adapter, model_id="enc", engine_name="cpu", device="cpu", context_size=512, loaded=True
    )
    alone = [single.embed([t]).vectors[0] for t in TEXTS]
    with app_in_thread(app) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="-", max_retries=0, timeout=60)

        def one(text: str) -> list[float]:
            reply = client.embeddings.create(model="enc", input=text)
            assert reply.usage.prompt_tokens == len(text.encode())
            return reply.data[0].embedding

        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            got = list(pool.map(one, TEXTS))
        for vector, expected in zip(got, alone, strict=True):
            assert np.abs(np.array(vector) - np.array(expected)).max() <= 1e-5
        health = httpx.get(f"{base}/health").json()
        assert health["generations"]["completed"] == 33  # the warm-up and the 32 requests
        assert health["runtime_info"]["batching"] == {
            "mode": "micro-batch",
            "sequences": 32,
            "window-ms": 20,
        }
        empty = httpx.post(f"{base}/v1/embeddings", json={"model": "enc", "input": []})
        assert (empty.status_code, empty.json()["error"]["param"]) == (400, "input")
    assert adapter.metrics()["batch_size_max"] > 1


def test_workers_stop_spinning_when_a_run_returns(tmp_path: Path) -> None:
    """The session's workers spin through a run's operator barriers, then sleep at once: between
    runs the cores belong to the HTTP side. ONNX Runtime's default keeps them spinning after a
    run (about 35 ms of CPU in the next 200 ms on the development machine, 2 threads)."""
    import time

    model = write_tiny_onnx_encoder(
        tmp_path / "wide.onnx", width=384, layers=6, heads=12, feed_forward=1536
    )
    adapter = OnnxAdapter(
        LoadOptions(artifact=model, runtime="onnxruntime-cpu", context_size=512, threads=2)
    )
    adapter.load()
    for _ in range(3):
        adapter.embed(TEXTS[:4])
    before = time.process_time()
    time.sleep(0.2)
    idle_cpu = time.process_time() - before
    assert idle_cpu < 0.01, f"{idle_cpu * 1000:.1f} ms of CPU while idle: workers still spin"
