"""As many generations at a time as the engine can batch (usually one), in arrival order,
cancellable between tokens.

Most runtimes hold one model context that is not safe to share between threads, and running two
generations at once on a CPU only makes both slower. So every request goes through
:class:`EngineQueue`: an ``asyncio.Semaphore`` of ``slots`` (whose waiters are woken first-come
first-served, the fairness the API promises), as many worker threads that drive the adapter's
blocking iterators, and a ``threading.Event`` per request that the worker checks between tokens.
``slots`` is the adapter's ``concurrency``: 1 for one-at-a-time engines, the batch size for
adapters that batch requests themselves (OpenVINO continuous batching, ONNX Runtime
micro-batching), whose blocking calls only wait for their share of a batch. A slot is released
by the worker's completion callback, not by the consumer, so a client that vanishes mid-stream
cannot let the next request start while its generation is still running.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
_END = object()


@dataclass
class _Failure:
    error: BaseException


class EngineQueue:
    """Admits at most ``slots`` jobs on one adapter at once and counts what happened to each."""

    def __init__(self, slots: int = 1) -> None:
        self.slots = max(1, slots)
        self._free = asyncio.Semaphore(self.slots)
        self._executor = ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="engine")
        self.queued = 0
        self.active = 0
        self.completed = 0
        self.cancelled = 0
        self.failed = 0

    def stats(self) -> dict[str, int]:
        """The counters, for /health."""
        return {
            "active": self.active,
            "queued": self.queued,
            "completed": self.completed,
            "cancelled": self.cancelled,
            "failed": self.failed,
        }

    async def _acquire(self) -> None:
        self.queued += 1
        try:
            await self._free.acquire()
        finally:
            self.queued -= 1
        self.active += 1

    def _finish(self, outcome: list[str]) -> Callable[[Any], None]:
        def done(_: Any) -> None:
            kind = outcome[0] if outcome else "failed"
            setattr(self, kind, getattr(self, kind) + 1)
            self.active -= 1
            self._free.release()

        return done

    async def call(self, work: Callable[[], T]) -> T:
        """Run one blocking call (an embedding batch, a warm-up) in turn."""
        await self._acquire()
        outcome: list[str] = []

        def run() -> T:
            try:
                result = work()
            except BaseException:
                outcome.append("failed")
                raise
            outcome.append("completed")
            return result

        future = asyncio.get_running_loop().run_in_executor(self._executor, run)
        future.add_done_callback(self._finish(outcome))
        return await asyncio.shield(future)

    async def wait(self, start: Callable[[], Future[T]]) -> T:
        """Admit, start and count a job that runs elsewhere (a batch the adapter gathers),
        awaiting its future on the event loop: no worker thread is handed the request. As in
        :meth:`call`, the slot is freed when the job ends, not when its caller stops waiting."""
        await self._acquire()
        outcome: list[str] = []
        try:
            pending = asyncio.wrap_future(start())
        except BaseException:
            self._finish(outcome)(None)  # nothing started: counted as failed
            raise

        def record(done: asyncio.Future[T]) -> None:
            failed = done.cancelled() or done.exception() is not None
            outcome.append("failed" if failed else "completed")

        pending.add_done_callback(record)
        pending.add_done_callback(self._finish(outcome))
        return await asyncio.shield(pending)

    async def stream(
        self, start: Callable[[threading.Event], Iterator[T]], cancel: threading.Event
    ) -> AsyncGenerator[T, None]:
        """Yield what ``start(cancel)`` yields, produced in the worker thread.

        Setting ``cancel`` (or closing this async iterator) stops the worker at the next item.
        Exceptions raised by ``start`` or the iterator are re-raised here.
        """
        await self._acquire()
        if cancel.is_set():  # the client left while queued: do not start at all
            self.active -= 1
            self.cancelled += 1
            self._free.release()
            return
        loop = asyncio.get_running_loop()
        items: asyncio.Queue[Any] = asyncio.Queue()
        outcome: list[str] = []

        def work() -> None:
            try:
                for item in start(cancel):
                    loop.call_soon_threadsafe(items.put_nowait, item)
                    if cancel.is_set():
                        outcome.append("cancelled")
                        break
                else:
                    outcome.append("completed")
            except BaseException as exc:  # handed to the consumer, never lost in the thread
                outcome.append("failed")
                loop.call_soon_threadsafe(items.put_nowait, _Failure(exc))
            finally:
                loop.call_soon_threadsafe(items.put_nowait, _END)

        future = loop.run_in_executor(self._executor, work)
        future.add_done_callback(self._finish(outcome))
        try:
            while (item := await items.get()) is not _END:
                if isinstance(item, _Failure):
                    raise item.error
                yield item
        finally:
            cancel.set()  # a consumer that stops early (disconnect) stops the worker too

    def shutdown(self) -> None:
        """Stop the worker thread once the current job ends."""
        self._executor.shutdown(wait=False, cancel_futures=True)
