"""llama.cpp adapter through llama-cpp-python.

The end-of-generation tokens come from the GGUF itself and the chat template from
:func:`runtimes.chat_templates.choose_template` (the manifest's, the GGUF's, or the model
family's), so
each model chats the way it was trained to; with none that fits, chat is refused. Generation
drives ``Llama.generate`` token by token (rather than ``create_completion``) because the adapter
needs exact token counts for usage, the cancel check between tokens, stop strings that never leak
into the output, and an ``ignore_eos`` switch for benchmarks. Layers go to the GPU only when the
engine is a GPU engine and this llama.cpp build can offload; otherwise the adapter says, in
:meth:`describe`, that it runs on CPU.
"""

from __future__ import annotations

import codecs
import logging
import random
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from runtimes.chat_templates import choose_template
from runtimes.component_tree import import_llama_cpp
from runtimes.engine import LoadOptions, RuntimeFailure
from runtimes.inprocess.adapter import (
    Delta,
    Embeddings,
    FinishReason,
    Message,
    RuntimeAdapter,
    SamplingParams,
    StopMatcher,
    finish_usage,
)

log = logging.getLogger("snapbuild.runtimes.llamacpp")

# llama.cpp server's defaults, used when a request leaves a parameter out
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.95
DEFAULT_MIN_P = 0.05


class LlamaCppAdapter(RuntimeAdapter):
    """A GGUF model in a llama_cpp.Llama context."""

    capabilities = frozenset({"chat", "completion", "embeddings"})

    def __init__(self, options: LoadOptions) -> None:
        super().__init__(options)
        self.llm: Any = None
        self._embedder: Any = None
        self._formatter: Any = None
        self._bos_text = ""
        self._add_bos = False
        self.gpu_layers = 0
        self.template_source = "gguf"
        self._stop: tuple[str, ...] = ()  # a family template's markers: never in an answer

    def _gpu_layers(self) -> int:
        llama_cpp = import_llama_cpp()

        if self.options.device != "gpu":
            return 0
        if not llama_cpp.llama_supports_gpu_offload():
            self._note("this llama.cpp build cannot offload to a GPU; running on the CPU")
            return 0
        return -1 if self.options.gpu_layers is None else self.options.gpu_layers

    def _note(self, message: str) -> None:
        log.warning("llama.cpp: %s", message)
        self.notes.append(message)

    def _new(self, **extra: Any) -> Any:
        llama_cpp = import_llama_cpp()

        try:
            return llama_cpp.Llama(
                model_path=str(self.options.artifact),
                n_ctx=self.options.context_size,
                n_threads=self.options.threads,
                n_threads_batch=self.options.threads,
                n_gpu_layers=self.gpu_layers,
                verbose=False,
                **_swa_option(),
                **extra,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise RuntimeFailure(
                f"llama.cpp could not load {self.options.artifact}",
                details=str(exc),
                resolution="check the file is a complete GGUF (snapbuild fetch verifies "
                "checksums) and that the context size fits in memory",
            ) from exc

    def load(self) -> None:
        import_llama_cpp()  # before any llama_cpp import: it binds the component's libllama
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.gpu_layers = self._gpu_layers()
        self.llm = self._new()
        meta: dict[str, str] = self.llm.metadata
        choice = choose_template(meta, self._single_token, self.options.chat_template)
        self.template_source = choice.label
        self._stop = choice.stop
        if choice.source in ("family", "none"):
            self._note(choice.reason)
        if choice.template is None:
            self.capabilities = self.capabilities - {"chat"}
        eos_text = self._token_text(self.llm.token_eos())
        self._bos_text = self._token_text(self.llm.token_bos())
        self._add_bos = meta.get("tokenizer.ggml.add_bos_token", "false") == "true"
        if choice.template is not None:
            self._formatter = Jinja2ChatFormatter(
                template=choice.template,
                eos_token=eos_text,
                bos_token=self._bos_text,
                add_generation_prompt=True,
            )

    def _single_token(self, text: str) -> bool:
        """Whether ``text`` is one token of the vocabulary (a template marker it knows)."""
        tokens = self._tokens(text, add_bos=False)
        return len(tokens) == 1 and self._token_text(tokens[0]) == text

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        raw = self.llm.detokenize([token], special=True)
        return str(raw.decode("utf-8", errors="replace"))

    # tokens --------------------------------------------------------------------------------
    def _tokens(self, text: str, *, add_bos: bool) -> list[int]:
        tokens: list[int] = self.llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)
        return tokens

    def _prompt_tokens(self, prompt: str) -> list[int]:
        add_bos = self._add_bos and not (self._bos_text and prompt.startswith(self._bos_text))
        return self._tokens(prompt, add_bos=add_bos)

    def _chat_prompt(self, messages: Sequence[Message]) -> str:
        history = [{"role": m.role, "content": m.content} for m in messages]
        return str(self._formatter(messages=history).prompt)

    def count_tokens(self, text: str) -> int:
        return len(self._prompt_tokens(text))

    def count_chat_tokens(self, messages: Sequence[Message]) -> int:
        return len(self._prompt_tokens(self._chat_prompt(messages)))

    # generation ----------------------------------------------------------------------------
    def chat(
        self, messages: Sequence[Message], params: SamplingParams, cancel: threading.Event
    ) -> Iterator[Delta]:
        if self._stop:
            params = replace(params, stop=params.stop + self._stop)
        return self._generate(self._prompt_tokens(self._chat_prompt(messages)), params, cancel)

    def complete(
        self, prompt: str, params: SamplingParams, cancel: threading.Event
    ) -> Iterator[Delta]:
        return self._generate(self._prompt_tokens(prompt), params, cancel)

    def _generate(
        self, tokens: list[int], params: SamplingParams, cancel: threading.Event
    ) -> Iterator[Delta]:
        llama_cpp = import_llama_cpp()

        llm = self.llm
        room = max(self.options.context_size - len(tokens), 0)
        limit = min(params.max_tokens or room, room)
        llm.set_seed(params.seed if params.seed is not None else random.randrange(2**31))
        temperature = DEFAULT_TEMPERATURE if params.temperature is None else params.temperature
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        matcher = StopMatcher(params.stop)
        vocab = llm._model.vocab
        produced = 0
        reason: FinishReason = "length"
        hit = False
        generator = llm.generate(
            tokens,
            top_k=DEFAULT_TOP_K if params.top_k is None else params.top_k,
            top_p=DEFAULT_TOP_P if params.top_p is None else params.top_p,
            min_p=DEFAULT_MIN_P,
            temp=temperature,
            repeat_penalty=1.0,
            frequency_penalty=params.frequency_penalty,
            presence_penalty=params.presence_penalty,
        )
        try:
            for token in generator if limit > 0 else ():
                if cancel.is_set():
                    reason = "cancelled"
                    break
                if llama_cpp.llama_vocab_is_eog(vocab, token) and not params.ignore_eos:
                    reason = "stop"
                    break
                produced += 1
                text, hit = matcher.feed(decoder.decode(llm.detokenize([token])))
                if text:
                    yield Delta(text)
                if hit:
                    reason = "stop"
                    break
                if produced >= limit:
                    break
        finally:
            generator.close()
        if not hit and (tail := matcher.flush() + decoder.decode(b"", final=True)):
            yield Delta(tail)
        yield Delta("", finish_reason=reason, usage=finish_usage(len(tokens), produced))

    def embed(self, texts: Sequence[str]) -> Embeddings:
        # A second context in embedding mode: the weights are memory-mapped, so they are shared.
        # Mean pooling: chat GGUFs declare no pooling, and per-token vectors are no embedding.
        if self._embedder is None:
            llama_cpp = import_llama_cpp()

            self._embedder = self._new(
                embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN
            )
        vectors, count = self._embedder.embed(list(texts), normalize=True, return_count=True)
        if vectors and not isinstance(vectors[0], list):  # a single text gives one flat vector
            vectors = [vectors]
        rows = [[float(x) for x in (v[0] if v and isinstance(v[0], list) else v)] for v in vectors]
        return Embeddings(vectors=rows, prompt_tokens=int(count))

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["gpu-layers"] = self.gpu_layers
        info["chat-template"] = self.template_source
        return info


def _swa_option() -> dict[str, Any]:
    """Keep sliding-window layers' KV cache at their window (``swa_full=False``).

    llama.cpp's default sizes every layer's cache for the full context; Gemma 3 (5 of 6 layers
    local, window 1024) then needs ~3x the KV memory the selector's estimate planned for, which
    would turn a fit into an OOM. Older bindings lack the option and always use full caches.
    """
    import inspect

    llama_cpp = import_llama_cpp()

    params = inspect.signature(llama_cpp.Llama.__init__).parameters
    return {"swa_full": False} if "swa_full" in params else {}
