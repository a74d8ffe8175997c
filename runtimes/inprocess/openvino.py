"""OpenVINO GenAI adapter: continuous batching on CPU and GPU, ``LLMPipeline`` on the NPU.

With more than one sequence planned (``LoadOptions.sequences``, from the Decision) on a CPU or
GPU, the model runs in a ``ContinuousBatchingPipeline`` with a paged KV cache sized for that many
full-context sequences, driven by :class:`runtimes.inprocess.continuous.ContinuousEngine`; every
request
is its own sequence with its own detokenizer and cancellation, and the server may hand this
adapter that many requests at once (``concurrency``). The NPU pipeline compiles static shapes
and has no such scheduler, so NPU engines (and any engine planned for one sequence) keep
``LLMPipeline``, one request at a time.

``LLMPipeline.generate`` blocks and hands text to a streamer callback; the adapter runs it in a
thread and passes the pieces through a queue, so it offers the same iterator of deltas as every
other adapter. The streamer's return value is how cancellation reaches OpenVINO: once the
server sets the cancel event, the next callback answers STOP and generation ends. The artifact
is an OpenVINO IR directory or a GGUF file (GenAI reads GGUF with supported layouts).
"""

from __future__ import annotations

import functools
import math
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from runtimes.engine import LoadOptions, RuntimeFailure
from runtimes.inprocess.adapter import (
    Delta,
    FinishReason,
    Message,
    RuntimeAdapter,
    SamplingParams,
    StopMatcher,
    finish_usage,
)
from runtimes.inprocess.continuous import ContinuousEngine, IncrementalDecoder

DEVICES = {"cpu": "CPU", "gpu": "GPU", "npu": "NPU"}
_END = object()


class OpenVinoAdapter(RuntimeAdapter):
    """An LLM in an openvino_genai.LLMPipeline."""

    capabilities = frozenset({"chat", "completion"})

    def __init__(self, options: LoadOptions) -> None:
        super().__init__(options)
        self.pipe: Any = None
        self.tokenizer: Any = None
        self.engine: ContinuousEngine | None = None
        self.device = DEVICES.get(options.device, options.device.upper())
        self.batched = options.sequences > 1 and self.device != "NPU"
        if options.sequences > 1 and not self.batched:
            self.notes.append("the NPU pipeline takes static shapes: one request at a time")
        if self.batched and not options.kv_block_tokens:
            raise ValueError(
                "continuous batching needs LoadOptions.kv_block_tokens (the runtime's paged-KV "
                "block size, from snapbuild/data/batching.yaml) to size its cache"
            )

    @property
    def concurrency(self) -> int:
        return self.options.sequences if self.batched else 1

    def load(self) -> None:
        import openvino_genai

        config: dict[str, Any] = {}
        if self.device == "NPU":
            config["MAX_PROMPT_LEN"] = self.options.context_size
        if self.options.threads and self.device == "CPU":
            config["INFERENCE_NUM_THREADS"] = self.options.threads
        if self.options.inference_precision:
            config["INFERENCE_PRECISION_HINT"] = self.options.inference_precision
        elif self.options.threads == 1 and self.device == "CPU":
            # OpenVINO's bf16 CPU kernels (the default on AMX / AVX512-BF16 CPUs) die with
            # SIGFPE on a single inference thread (2025.2 and 2026.4 alike), taking the server
            # with them; f32 and f16 run, so one thread stays one thread, in f32
            config["INFERENCE_PRECISION_HINT"] = "f32"
            self.notes.append("one CPU thread: computing in f32 (bf16 crashes OpenVINO there)")
        path = str(self.options.artifact)
        try:
            if self.batched:
                scheduler = self._scheduler(openvino_genai)
                self.pipe = openvino_genai.ContinuousBatchingPipeline(
                    path, scheduler, self.device, config
                )
            elif self.device == "NPU":
                self.pipe = openvino_genai.LLMPipeline(path, self.device, **config)
            else:
                # on CPU and GPU the LLMPipeline runs the paged-attention backend with prefix
                # caching on; GenAI 2025.2 then fails every later request of a prompt whose
                # tokens are all cached ("content_length <= prompt_ids.size() + ..."), as the
                # startup check's "Hello" is after the warm-up's
                scheduler = openvino_genai.SchedulerConfig()
                scheduler.enable_prefix_caching = False
                self.pipe = openvino_genai.LLMPipeline(
                    path, self.device, scheduler_config=scheduler, **config
                )
        except Exception as exc:  # OpenVINO raises plain RuntimeError with long texts
            raise load_failure(
                f"OpenVINO could not load {self.options.artifact} on {self.device}",
                exc,
                "check the device is present (hwprobe) and the artifact is complete",
            ) from exc
        self.tokenizer = self.pipe.get_tokenizer()
        if self.batched:
            self.engine = ContinuousEngine(self.pipe, self.tokenizer)

    def _scheduler(self, ov: Any) -> Any:
        """Paged KV cache for ``sequences`` full-context sequences (the selector's plan), so an
        admitted request never runs out of blocks; no prefix caching, so a sequence's numbers
        never depend on what ran before it (temperature 0 answers stay identical)."""
        options = self.options
        assert options.kv_block_tokens  # checked in __init__
        tokens = options.sequences * options.context_size
        scheduler = ov.SchedulerConfig()
        scheduler.max_num_seqs = options.sequences
        scheduler.num_kv_blocks = max(1, math.ceil(tokens / options.kv_block_tokens))
        scheduler.max_num_batched_tokens = max(256, options.sequences)
        scheduler.dynamic_split_fuse = True
        scheduler.enable_prefix_caching = False
        return scheduler

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()

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

    def _config(self, params: SamplingParams, prompt_tokens: int, *, stops: bool = True) -> Any:
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
            if params.top_k:  # 0 would mean "keep no token": leave the default (all tokens)
                config.top_k = params.top_k
            if params.seed is not None:
                config.rng_seed = params.seed
        config.ignore_eos = params.ignore_eos
        config.presence_penalty = params.presence_penalty
        config.frequency_penalty = params.frequency_penalty
        if params.stop and stops:  # batched: StopMatcher alone, see _complete_batched
            config.stop_strings = set(params.stop)
            config.include_stop_str_in_output = False
        return config

    def complete(
        self, prompt: str, params: SamplingParams, cancel: threading.Event
    ) -> Iterator[Delta]:
        if self.engine is not None:
            return self._complete_batched(prompt, params, cancel)
        return self._complete_one(prompt, params, cancel)

    def _complete_batched(
        self, prompt: str, params: SamplingParams, cancel: threading.Event
    ) -> Iterator[Delta]:
        """One sequence of the continuous batch. Stop strings are matched here only, not by
        OpenVINO: its matcher may drop tokens this stream already read, ours holds text back
        until it cannot be a stop string, then ends the sequence."""
        assert self.engine is not None
        prompt_tokens = self.count_tokens(prompt)
        config = self._config(params, prompt_tokens, stops=False)
        matcher = StopMatcher(params.stop)
        stopped = False
        pieces = self.engine.submit(prompt, config, lambda: stopped or cancel.is_set())
        last = None
        try:
            for piece in pieces:
                if piece.text and not stopped:  # a last piece may carry text too
                    text, stopped = matcher.feed(piece.text)
                    if text:
                        yield Delta(text)
                if piece.done:
                    last = piece
                    break
        finally:
            pieces.close()
        assert last is not None
        if last.error is not None:
            raise RuntimeFailure("OpenVINO generation failed", details=str(last.error))
        if last.finish == "ignored":
            raise RuntimeFailure(
                "OpenVINO could not schedule the request: it does not fit the KV cache",
                resolution="send a shorter prompt or max_tokens",
            )
        if not stopped and (tail := matcher.flush()):
            yield Delta(tail)
        reason: FinishReason
        if stopped:
            reason = "stop"
        elif cancel.is_set():
            reason = "cancelled"
        else:
            reason = "length" if last.finish == "length" else "stop"
        yield Delta("", finish_reason=reason, usage=finish_usage(prompt_tokens, last.generated))

    def _complete_one(
        self,
        prompt: str,
        params: SamplingParams,
        cancel: threading.Event,
        run: Callable[[Any, Any], Any] | None = None,
    ) -> Iterator[Delta]:
        """One generation in a thread; ``run(config, streamer)`` is the pipeline call (default:
        the LLMPipeline on ``prompt``; the vision adapter passes VLMPipeline's with images)."""
        if run is None:

            def run(config: Any, streamer: Any) -> Any:
                return self.pipe.generate([prompt], config, streamer)

        prompt_tokens = self.count_tokens(prompt)
        config = self._config(params, prompt_tokens)
        pieces: queue.Queue[Any] = queue.Queue()
        halt = threading.Event()  # set by us (stop string, consumer gone) or by the server

        streamer = _token_streamer(self.tokenizer, pieces, lambda: cancel.is_set() or halt.is_set())

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
        info["openvino-device"] = self.device
        info["batching"] = (
            {"mode": "continuous", "sequences": self.options.sequences}
            if self.batched
            else {"mode": "one-at-a-time", "sequences": 1}
        )
        return info

    def metrics(self) -> dict[str, float]:
        """Continuous-batching figures (none for the one-at-a-time pipeline)."""
        if self.engine is None:
            return {}
        stats = self.engine.stats
        usage = float(self.pipe.get_metrics().cache_usage) if self.pipe is not None else 0.0
        return {
            "batch_queue_depth": float(self.engine.waiting()),
            "batch_running": float(self.engine.running()),
            "batch_size_last": float(stats.last_batch),
            "batch_size_max": float(stats.max_batch),
            "batch_size_mean": stats.batched_sequences / stats.steps if stats.steps else 0.0,
            "batch_steps_total": float(stats.steps),
            "batch_requests_total": float(stats.requests),
            "time_to_first_token_seconds_last": stats.last_ttft,
            "time_to_first_token_seconds_mean": (
                stats.ttft_sum / stats.ttft_count if stats.ttft_count else 0.0
            ),
            "kv_cache_usage_percent": usage,
        }


@functools.cache
def _token_streamer_class() -> type[Any]:
    """``openvino_genai.StreamerBase`` is only importable with the runtime installed, so the
    subclass is made on first use."""
    import openvino_genai

    class TokenStreamer(openvino_genai.StreamerBase):  # type: ignore[misc]
        """Tokens in, text out through :class:`IncrementalDecoder`, the detokenizer of the
        batched path too, so both give ``tokenizer.decode`` of the tokens. (A text callback
        gets GenAI's own streaming text, which replaces invalid UTF-8 differently.)"""

        def __init__(
            self, tokenizer: Any, pieces: queue.Queue[Any], stop: Callable[[], bool]
        ) -> None:
            super().__init__()
            self.decoder = IncrementalDecoder(tokenizer)
            self.pieces = pieces
            self.stop = stop

        def write(self, token: int | list[int]) -> Any:
            if text := self.decoder.feed([token] if isinstance(token, int) else list(token)):
                self.pieces.put(text)
            if self.stop():
                return openvino_genai.StreamingStatus.STOP
            return openvino_genai.StreamingStatus.RUNNING

        def end(self) -> None:
            if text := self.decoder.flush():
                self.pieces.put(text)

    return TokenStreamer


def _token_streamer(tokenizer: Any, pieces: queue.Queue[Any], stop: Callable[[], bool]) -> Any:
    """A token streamer for ``LLMPipeline.generate`` that puts text on ``pieces``."""
    return _token_streamer_class()(tokenizer, pieces, stop)


def load_failure(brief: str, exc: Exception, resolution: str) -> RuntimeFailure:
    """OpenVINO's load error as ours: its long RuntimeError text cut to its first line."""
    text = str(exc).strip()
    return RuntimeFailure(
        brief, details=text.splitlines()[0] if text else None, resolution=resolution
    )
