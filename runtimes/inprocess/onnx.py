"""ONNX Runtime adapter: sentence embeddings (and other single-shot models) on CPU, CUDA or the
OpenVINO execution provider.

The execution provider comes from the engine's runtime id. When the wanted provider is not in
this onnxruntime build, or fails to initialise, the adapter falls back to CPU and *says so*: the
fallback is recorded in :meth:`describe` (hence /health) and logged, never silent, because a
model that quietly runs ten times slower on the CPU is a bug report waiting to happen.

Concurrent requests: with more than one text per batch planned (``LoadOptions.sequences``, from
the Decision), embedding calls go through a :class:`runtimes.inprocess.microbatch.MicroBatcher`:
calls
arriving within ``batch_window_ms`` of each other run as one padded batch (the attention mask
marks each row's real tokens, so padding changes no vector), and each caller gets its own rows.

Tokenization: a ``tokenizer.json`` beside the model (Hugging Face ``tokenizers``, when installed)
or the model's own metadata ``snapbuild.tokenizer: bytes`` (UTF-8 bytes are the token ids, used
by the tiny test model).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from runtimes.engine import LoadOptions, RuntimeFailure
from runtimes.inprocess.adapter import Embeddings, RuntimeAdapter
from runtimes.inprocess.microbatch import MicroBatcher

log = logging.getLogger("snapbuild.runtimes.onnx")

# runtime id -> the execution providers to ask for, best first (data, one place)
PROVIDERS: dict[str, tuple[str, ...]] = {
    "onnxruntime-cpu": ("CPUExecutionProvider",),
    "onnxruntime-cuda": ("CUDAExecutionProvider", "CPUExecutionProvider"),
    "onnxruntime-openvino": ("OpenVINOExecutionProvider", "CPUExecutionProvider"),
}
OUTPUT_NAMES = ("sentence_embedding", "embeddings", "pooler_output", "last_hidden_state")


# Intra-op workers spin between a run's operators and stop the moment the run returns. Sleeping
# workers pay a wake-up at each of a run's ~150 operator barriers (on a VM, a halted vCPU's
# wake-up), which made a 32-query batch take 40 to 65 ms instead of 38; spinning on after the
# run (ORT's default) takes the cores the HTTP side needs between runs. Measured side by side
# (benchmarks/batching.py's setting, four servers at once): micro-batched 506-549 vs 407-427
# requests/s, one by one 251-290 vs 239-258 (docs/serving.md, "Where the time goes").
SPINNING = {"session.intra_op.allow_spinning": "1", "session.force_spinning_stop": "1"}

PADDING_LIMIT = 1.25  # a group's padded tokens stay under this many times its real tokens


def length_groups(lengths: Sequence[int]) -> list[list[int]]:
    """Split ascending ``lengths`` into runs of positions whose padding to the run's longest
    stays within :data:`PADDING_LIMIT` of their real tokens: the fewest session runs that do
    not spend more than a quarter of their work on padding."""
    groups: list[list[int]] = []
    current: list[int] = []
    real = 0
    for position, length in enumerate(lengths):
        if current and length * (len(current) + 1) > PADDING_LIMIT * (real + length):
            groups.append(current)
            current, real = [], 0
        current.append(position)
        real += length
    if current:
        groups.append(current)
    return groups


class OnnxAdapter(RuntimeAdapter):
    """An ONNX embedding model in an onnxruntime InferenceSession."""

    capabilities = frozenset({"embeddings"})

    def __init__(self, options: LoadOptions) -> None:
        super().__init__(options)
        self.session: Any = None
        self.provider: str | None = None
        self.max_length = options.context_size
        self._hf_tokenizer: Any = None
        self.batcher: MicroBatcher[list[int], np.ndarray] | None = None

    @property
    def concurrency(self) -> int:
        return self.options.sequences if self.options.sequences > 1 else 1

    def _model_file(self) -> Path:
        path = self.options.artifact
        if path.is_dir():
            found = sorted(path.glob("*.onnx"))
            if not found:
                raise RuntimeFailure(
                    f"no .onnx file in {path}",
                    resolution="fetch the artifact again: snapbuild fetch MODEL --engine ENGINE",
                )
            return found[0]
        return path

    def load(self) -> None:
        import onnxruntime as ort

        model = self._model_file()
        wanted = PROVIDERS.get(self.options.runtime, ("CPUExecutionProvider",))
        available = set(ort.get_available_providers())
        providers = [p for p in wanted if p in available]
        missing = [p for p in wanted if p not in available]
        if missing:
            self._note(
                f"{', '.join(missing)} not available in this onnxruntime build "
                f"(has {', '.join(sorted(available))}); running on CPU"
            )
        options = ort.SessionOptions()
        if self.options.threads:
            options.intra_op_num_threads = self.options.threads
        for key, value in SPINNING.items():
            options.add_session_config_entry(key, value)
        try:
            self.session = ort.InferenceSession(str(model), options, providers=providers)
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise RuntimeFailure(
                f"onnxruntime could not load {model}",
                details=str(exc),
                resolution="check that the file is a complete ONNX model (snapbuild fetch "
                "verifies checksums)",
            ) from exc
        self.provider = self.session.get_providers()[0]
        if self.provider != wanted[0] and not missing:
            self._note(f"{wanted[0]} failed to initialise; running on {self.provider}")
        meta = self.session.get_modelmeta().custom_metadata_map
        self.max_length = min(int(meta.get("snapbuild.max-length", 1 << 30)), self.max_length)
        self._load_tokenizer(model, meta)
        if self.options.sequences > 1:
            self.batcher = MicroBatcher(
                self._run,
                max_items=self.options.sequences,
                window=self.options.batch_window_ms / 1000,
                name="onnx-microbatch",
            )

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()

    def _note(self, message: str) -> None:
        log.warning("onnxruntime: %s", message)
        self.notes.append(message)

    def _load_tokenizer(self, model: Path, meta: dict[str, str]) -> None:
        tokenizer_file = model.parent / "tokenizer.json"
        if tokenizer_file.is_file():
            try:
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise RuntimeFailure(
                    f"{tokenizer_file} needs the 'tokenizers' package",
                    resolution="pip install tokenizers",
                ) from exc
            self._hf_tokenizer = Tokenizer.from_file(str(tokenizer_file))
        elif meta.get("snapbuild.tokenizer") != "bytes":
            raise RuntimeFailure(
                f"no tokenizer for {model}",
                details="expected tokenizer.json beside the model or metadata "
                "snapbuild.tokenizer=bytes",
                resolution="add the tokenizer.json file to the artifact",
            )

    def _ids(self, text: str) -> list[int]:
        if self._hf_tokenizer is not None:
            ids: list[int] = self._hf_tokenizer.encode(text).ids
            return ids
        return list(text.encode("utf-8"))

    def count_tokens(self, text: str) -> int:
        return len(self._ids(text))

    @property
    def gathers(self) -> bool:
        return self.batcher is not None

    def embed(self, texts: Sequence[str]) -> Embeddings:
        if self.batcher is not None:
            return self.embed_later(texts).result()
        batch = self._token_ids(texts)
        return _embeddings(batch, self._run(batch))

    def embed_later(self, texts: Sequence[str]) -> Future[Embeddings]:
        """Queue ``texts`` for the micro-batcher; the worker thread that runs their batch also
        turns their rows into the answer."""
        assert self.batcher is not None, "embed_later needs a micro-batcher (sequences > 1)"
        batch = self._token_ids(texts)
        answer: Future[Embeddings] = Future()

        def finish(rows: Future[list[np.ndarray]]) -> None:
            try:
                answer.set_result(_embeddings(batch, rows.result()))
            except BaseException as exc:  # the batch's error, handed to this caller
                answer.set_exception(exc)

        self.batcher.submit_later(batch).add_done_callback(finish)
        return answer

    def _token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's ids, cut to the model's length (an empty text is one padding id)."""
        return [self._ids(t)[: self.max_length] or [0] for t in texts]

    def _run(self, batch: list[list[int]]) -> list[np.ndarray]:
        """Vectors for ``batch`` (token ids per text), in its order. Texts are sorted by length
        and run in groups of similar length (:func:`length_groups`), so a short text is not
        padded to the longest one of a large batch; each group is one session run."""
        order = sorted(range(len(batch)), key=lambda i: len(batch[i]))
        rows: list[np.ndarray] = [np.empty(0)] * len(batch)
        for group in length_groups([len(batch[i]) for i in order]):
            picked = [order[i] for i in group]
            for index, row in zip(
                picked, self._run_padded([batch[i] for i in picked]), strict=True
            ):
                rows[index] = row
        return rows

    def _run_padded(self, batch: list[list[int]]) -> list[np.ndarray]:
        """One session run, padded to the longest text; the attention mask keeps padding out of
        every row's vector."""
        width = max(len(ids) for ids in batch)
        input_ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        inputs = {i.name for i in self.session.get_inputs()}
        if "token_type_ids" in inputs:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        outputs = {o.name: i for i, o in enumerate(self.session.get_outputs())}
        name = next((n for n in OUTPUT_NAMES if n in outputs), None)
        if name is None:
            raise RuntimeFailure(f"the ONNX model has none of the outputs {OUTPUT_NAMES}")
        result = self.session.run([name], feeds)[0]
        if result.ndim == 3:  # token states: mean-pool over the mask, then normalise
            summed = (result * mask[:, :, None]).sum(axis=1)
            result = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1)
            result = result / np.maximum(np.linalg.norm(result, axis=1, keepdims=True), 1e-12)
        return list(result)

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["execution-provider"] = self.provider
        info["requested-providers"] = list(PROVIDERS.get(self.options.runtime, ()))
        info["batching"] = (
            {
                "mode": "micro-batch",
                "sequences": self.options.sequences,
                "window-ms": self.options.batch_window_ms,
            }
            if self.options.sequences > 1
            else {"mode": "one-at-a-time", "sequences": 1}
        )
        return info

    def metrics(self) -> dict[str, float]:
        """Micro-batching figures (none when requests run one at a time)."""
        return self.batcher.metrics() if self.batcher is not None else {}


def _embeddings(batch: list[list[int]], rows: Sequence[np.ndarray]) -> Embeddings:
    """The answer for ``batch``'s texts (``tolist`` makes the floats in C, not one by one)."""
    return Embeddings(
        vectors=[row.tolist() for row in rows], prompt_tokens=sum(len(ids) for ids in batch)
    )
