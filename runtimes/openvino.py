"""OpenVINO GenAI adapter: ``LLMPipeline`` on CPU, GPU or NPU.

``LLMPipeline.generate`` blocks and hands text to a streamer callback; the adapter runs it in a
thread and passes the pieces through a queue, so it offers the same iterator of deltas as every
other adapter. The streamer's return value is how cancellation reaches OpenVINO: once the
server sets the cancel event, the next callback answers STOP and generation ends. The artifact
is an OpenVINO IR directory or a GGUF file (GenAI reads GGUF with supported layouts).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from runtimes.base import (
    Delta,
    FinishReason,
    LoadOptions,
    Message,
    RuntimeAdapter,
    RuntimeFailure,
    SamplingParams,
    StopMatcher,
    finish_usage,
)

DEVICES = {"cpu": "CPU", "gpu": "GPU", "npu": "NPU"}
_END = object()


class OpenVinoAdapter(RuntimeAdapter):
    """An LLM in an openvino_genai.LLMPipeline."""

    capabilities = frozenset({"chat", "completion"})

    def __init__(self, options: LoadOptions) -> None:
        super().__init__(options)
        self.pipe: Any = None
        self.tokenizer: Any = None

    def load(self) -> None:
        import openvino_genai

        device = DEVICES.get(self.options.device, self.options.device.upper())
        config: dict[str, Any] = {}
        if device == "NPU":
            config["MAX_PROMPT_LEN"] = self.options.context_size
        # OpenVINO's CPU plugin (2025.2 and 2026.4 alike) dies with SIGFPE while compiling when
        # INFERENCE_NUM_THREADS is 1 on some 2-core machines, taking the server with it; one
        # thread is then left to its own default (at most the cores it sees).
        if self.options.threads and self.options.threads > 1 and device == "CPU":
            config["INFERENCE_NUM_THREADS"] = self.options.threads
        try:
            self.pipe = openvino_genai.LLMPipeline(str(self.options.artifact), device, **config)
        except Exception as exc:  # OpenVINO raises plain RuntimeError with long texts
            raise RuntimeFailure(
                f"OpenVINO could not load {self.options.artifact} on {device}",
                details=str(exc).strip().splitlines()[0] if str(exc).strip() else None,
                resolution="check the device is present (hwprobe) and the artifact is complete",
            ) from exc
        self.tokenizer = self.pipe.get_tokenizer()

    def count_tokens(self, text: str) -> int:
        return int(self.tokenizer.encode(text).input_ids.data.shape[1])

    def _template(self, messages: Sequence[Message]) -> str:
        history = [{"role": m.role, "content": m.content} for m in messages]
        prompt: str = self.tokenizer.apply_chat_template(history, add_generation_prompt=True)
        return prompt

    def count_chat_tokens(self, messages: Sequence[Message]) -> int:
        return self.count_tokens(self._template(messages))

    def chat(
        self, messages: Sequence[Message], params: SamplingParams, cancel: threading.Event
    ) -> Iterator[Delta]:
        return self.complete(self._template(messages), params, cancel)

    def _config(self, params: SamplingParams, prompt_tokens: int) -> Any:
        import openvino_genai

        config = openvino_genai.GenerationConfig()
        room = max(self.options.context_size - prompt_tokens, 1)
        config.max_new_tokens = min(params.max_tokens or room, room)
        config.apply_chat_template = False  # prompts arrive templated already
        temperature = 1.0 if params.temperature is None else params.temperature
        config.do_sample = temperature > 0
        if config.do_sample:
            config.temperature = temperature
            config.top_p = 1.0 if params.top_p is None else params.top_p
            config.top_k = params.top_k or 0
            if params.seed is not None:
                config.rng_seed = params.seed
        config.ignore_eos = params.ignore_eos
        config.presence_penalty = params.presence_penalty
        config.frequency_penalty = params.frequency_penalty
        if params.stop:
            config.stop_strings = set(params.stop)
            config.include_stop_str_in_output = False
        return config

    def complete(
        self, prompt: str, params: SamplingParams, cancel: threading.Event
    ) -> Iterator[Delta]:
        def run(config: Any, streamer: Callable[[str], Any]) -> Any:
            return self.pipe.generate([prompt], config, streamer)

        return self._stream(run, prompt, params, cancel)

    def _stream(
        self,
        run: Callable[[Any, Callable[[str], Any]], Any],
        prompt: str,
        params: SamplingParams,
        cancel: threading.Event,
    ) -> Iterator[Delta]:
        """Run ``run(config, streamer)`` (a pipeline's generate) in a thread; yield its text."""
        import openvino_genai

        prompt_tokens = self.count_tokens(prompt)
        config = self._config(params, prompt_tokens)
        pieces: queue.Queue[Any] = queue.Queue()
        halt = threading.Event()  # set by us (stop string, consumer gone) or by the server

        def streamer(text: str) -> Any:
            pieces.put(text)
            if cancel.is_set() or halt.is_set():
                return openvino_genai.StreamingStatus.STOP
            return openvino_genai.StreamingStatus.RUNNING

        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["result"] = run(config, streamer)
            except Exception as exc:  # reported to the consumer, never lost in the thread
                outcome["error"] = exc
            finally:
                pieces.put(_END)

        thread = threading.Thread(target=work, name="openvino-generate", daemon=True)
        thread.start()
        matcher = StopMatcher(params.stop)
        stopped = False
        try:
            while (item := pieces.get()) is not _END:
                if stopped:
                    continue
                text, stopped = matcher.feed(item)
                if stopped:
                    halt.set()  # OpenVINO's own stop strings end it too; this is a backstop
                if text:
                    yield Delta(text)
        finally:
            halt.set()
            thread.join()
        if "error" in outcome:
            raise RuntimeFailure("OpenVINO generation failed", details=str(outcome["error"]))
        if not stopped and (tail := matcher.flush()):
            yield Delta(tail)
        metrics = outcome["result"].perf_metrics
        generated = int(metrics.get_num_generated_tokens())
        reason: FinishReason
        if stopped or (params.stop and generated < config.max_new_tokens):
            reason = "stop"
        elif cancel.is_set():
            reason = "cancelled"
        elif generated >= config.max_new_tokens:
            reason = "length"
        else:
            reason = "stop"
        yield Delta("", finish_reason=reason, usage=finish_usage(prompt_tokens, generated))

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["openvino-device"] = DEVICES.get(self.options.device, self.options.device.upper())
        return info
