"""Micro-batching for single-shot models (embeddings): concurrent calls gathered into one run.

An embedding request is one short model run, and on a CPU most of its cost for short texts is
per-run overhead and reading the weights, which one batched run pays once for every text in
it. :class:`MicroBatcher` owns one worker thread: the first call to arrive opens a batch, calls
arriving within ``window`` seconds of it join (first come first served, while the batch holds
at most ``max_items`` items; a single call larger than that runs alone), then the batch runs as
one call of ``run`` and each caller gets exactly its own results back, in its own order.

Callers block in :meth:`submit`, or take a future from :meth:`submit_later` (the server awaits
it on its event loop, so a request costs no thread hand-over of its own). The worker is the only
thread that calls ``run``, so the runtime session is never used concurrently.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")
_IDLE_WAIT_S = 0.5
SWITCH_INTERVAL_S = 0.001  # the GIL switch interval while a batcher runs (see __init__)


@dataclass
class _Job(Generic[In, Out]):
    items: list[In]
    result: Future[list[Out]] = field(default_factory=Future)
    submitted: float = field(default_factory=time.perf_counter)


@dataclass
class BatchStats:
    """Running figures for ``metrics()``; written by the worker thread only."""

    batches: int = 0
    requests: int = 0
    items: int = 0
    last_batch: int = 0
    max_batch: int = 0
    wait_sum: float = 0.0  # seconds callers waited for their batch to start
    last_wait: float = 0.0


class MicroBatcher(Generic[In, Out]):
    """Runs ``run(items) -> results`` (same length, same order) over gathered calls."""

    def __init__(
        self,
        run: Callable[[list[In]], Sequence[Out]],
        *,
        max_items: int,
        window: float,
        name: str = "microbatch",
    ) -> None:
        self._run = run
        self.max_items = max(1, max_items)
        self.window = max(0.0, window)
        self._jobs: deque[_Job[In, Out]] = deque()
        self._wake = threading.Condition()
        self._closed = False
        self.stats = BatchStats()
        # callers, the worker and the HTTP thread hand work to each other many times a batch;
        # the default 5 ms GIL switch interval would add up to that at every hand-over
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, items: Sequence[In]) -> list[Out]:
        """Run ``items`` in the next batch; block until their results are ready."""
        return self.submit_later(items).result()

    def submit_later(self, items: Sequence[In]) -> Future[list[Out]]:
        """Queue ``items`` for the next batch without blocking: the future is resolved by the
        worker (an event loop awaits it with ``asyncio.wrap_future``, no thread per call)."""
        job: _Job[In, Out] = _Job(list(items))
        with self._wake:
            if self._closed:
                raise RuntimeError("the micro-batcher is shut down")
            self._jobs.append(job)
            self._wake.notify()
        return job.result

    def queue_depth(self) -> int:
        """Calls waiting for a batch."""
        return len(self._jobs)

    def close(self) -> None:
        """Stop the worker; calls still waiting fail."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout=10)

    # the worker ---------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            batch = self._gather()
            if batch is None:
                return
            self._execute(batch)

    def _gather(self) -> list[_Job[In, Out]] | None:
        """The next batch: wait for a first call, then up to ``window`` after its arrival for
        more, stopping early once the batch is full."""
        with self._wake:
            while not self._jobs and not self._closed:
                self._wake.wait(_IDLE_WAIT_S)
            if self._closed:
                for job in self._jobs:
                    job.result.set_exception(RuntimeError("the micro-batcher is shut down"))
                self._jobs.clear()
                return None
            first = self._jobs.popleft()
            batch, size = [first], len(first.items)
            deadline = first.submitted + self.window
            while size < self.max_items:
                if self._jobs:
                    if size + len(self._jobs[0].items) > self.max_items:
                        break
                    job = self._jobs.popleft()
                    batch.append(job)
                    size += len(job.items)
                    continue
                left = deadline - time.perf_counter()
                if left <= 0 or self._closed:
                    break
                self._wake.wait(left)
            return batch

    def _execute(self, batch: list[_Job[In, Out]]) -> None:
        batch = [job for job in batch if job.result.set_running_or_notify_cancel()]
        if not batch:  # every caller cancelled its future while it waited
            return
        started = time.perf_counter()
        items = [item for job in batch for item in job.items]
        self._count(batch, len(items), started)
        try:
            results = list(self._run(items))
            if len(results) != len(items):
                raise RuntimeError(f"batch of {len(items)} items gave {len(results)} results")
        except BaseException as exc:  # every caller of the batch gets the error
            for job in batch:
                job.result.set_exception(exc)
            return
        offset = 0
        for job in batch:
            job.result.set_result(results[offset : offset + len(job.items)])
            offset += len(job.items)

    def _count(self, batch: list[_Job[In, Out]], items: int, started: float) -> None:
        stats = self.stats
        stats.batches += 1
        stats.requests += len(batch)
        stats.items += items
        stats.last_batch = items
        stats.max_batch = max(stats.max_batch, items)
        waits = [started - job.submitted for job in batch]
        stats.wait_sum += sum(waits)
        stats.last_wait = waits[-1]

    def metrics(self) -> dict[str, float]:
        """The figures ``GET /metrics`` shows (names in docs/serving.md)."""
        stats = self.stats
        return {
            "batch_queue_depth": float(self.queue_depth()),
            "batch_size_last": float(stats.last_batch),
            "batch_size_max": float(stats.max_batch),
            "batch_size_mean": stats.items / stats.batches if stats.batches else 0.0,
            "batch_batches_total": float(stats.batches),
            "batch_requests_total": float(stats.requests),
            "batch_wait_seconds_mean": stats.wait_sum / stats.requests if stats.requests else 0.0,
        }
