"""Group commit: many writers wait for durability, few fsyncs pay for all of them.

Theory of operation
-------------------
A writer appends to a PartitionLog (page cache only), then awaits
``committer.wait_durable(log, last_offset)``. Waiters are parked per log in a heap keyed
by offset. One background task loops: it takes every log that has waiters, runs their
``flush()`` calls in ONE worker-thread call (so the event loop never blocks on a disk;
the fsyncs of several logs run in parallel threads, or a round of many logs is made
durable by one syncfs() of their filesystem, see syncfs.py),
then wakes every waiter whose offset is now below its log's durable offset. While that
round's fsyncs run, new appends and waiters accumulate and are covered by the next round:
the fsync rate adapts to the disk, never one fsync per request. A writer may also defer
its appends until just before the next round (``before_next_round``) and append them
then as one batch. Waiters are futures (``wait_durable``) or plain callbacks
(``call_when_durable``).

A flush that raises fails that log's parked waiters with the exception (the log is then
failed until reopened, see PartitionLog); so does a log closed under its waiters. The
number of parked waiters is bounded. Everything runs on the event loop thread except the
flushes themselves.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, ThreadPoolExecutor

from .errors import CommitterClosed, LogClosed, TooManyWaiters
from .log import PartitionLog
from .syncfs import FilesystemSync

WAITERS_MAX_DEFAULT = 100_000
# syncfs costs about as much as 2-3 fsyncs of one small append each (syncfs.py).
SYNCFS_MIN_LOGS_DEFAULT = 4

# Called with None once durable, or with the exception that means it never will be.
DurableCallback = Callable[[BaseException | None], None]
# (offset, tie-breaker so callbacks are never compared, callback)
_Waiter = tuple[int, int, DurableCallback]


class GroupCommitter:
    """Parks waiters until their offsets are durable and batches the fsyncs for them."""

    def __init__(
        self,
        *,
        executor: Executor | None = None,
        waiters_max: int = WAITERS_MAX_DEFAULT,
        syncfs_min_logs: int = SYNCFS_MIN_LOGS_DEFAULT,
    ) -> None:
        """`executor` runs the flushes (None: the loop's default executor); a round of at
        least `syncfs_min_logs` logs is synced with syncfs() where supported (0: never)."""
        if waiters_max < 1:
            raise ValueError("waiters_max must be >= 1")
        if syncfs_min_logs < 0:
            raise ValueError("syncfs_min_logs must be >= 0")
        self._executor = executor
        self.filesystem_sync = FilesystemSync(syncfs_min_logs)
        self._waiters_max = waiters_max
        self._waiters: dict[PartitionLog, list[_Waiter]] = {}
        self._parked = 0
        self._sequence = itertools.count()
        # Every log seen, for flush_all_now() and close(); weak so closed logs go away.
        self._logs: weakref.WeakSet[PartitionLog] = weakref.WeakSet()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # Completed background flush rounds (a metric; tests count fsync batching).
        self.rounds = 0
        # True while a round's flushes run: what is appended now waits for the next one.
        self.round_in_flight = False
        self._before_round: list[Callable[[], None]] = []

    @property
    def parked(self) -> int:
        """Waiters currently parked (cancelled ones count until their round ends)."""
        return self._parked

    def track(self, log: PartitionLog) -> None:
        """Include `log` in flush_all_now() and close() even if nobody waited on it."""
        self._logs.add(log)

    async def wait_durable(self, log: PartitionLog, offset: int) -> None:
        """Return once every offset up to and including `offset` of `log` is fsynced.

        Raises TooManyWaiters beyond the configured bound, CommitterClosed after close(),
        ValueError for an offset not yet appended, and whatever the log's flush raised.
        """
        if log.durable_offset > offset:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.call_when_durable(log, offset, functools.partial(_settle_future, future))
        await future

    def call_when_durable(self, log: PartitionLog, offset: int, callback: DurableCallback) -> None:
        """Park `callback` until every offset up to and including `offset` of `log` is
        fsynced: then it is called with None, or with the exception that means it never
        will be (a failed flush, a closed log or committer). Cheaper than wait_durable for a
        caller that needs no coroutine (a shard runner's batch). Raises as wait_durable
        does, before parking; an offset already durable is not parked (callback(None) at
        once)."""
        if log.durable_offset > offset:
            callback(None)
            return
        if self._closed:
            raise CommitterClosed("group committer is closed")
        if offset >= log.next_offset:
            raise ValueError(f"offset {offset} is not appended yet (next {log.next_offset})")
        if self._parked >= self._waiters_max:
            raise TooManyWaiters(f"{self._parked} waiters already parked")
        heapq.heappush(self._waiters.setdefault(log, []), (offset, next(self._sequence), callback))
        self._parked += 1
        self._logs.add(log)
        self._wakeup.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="group-commit-flusher")

    async def flush_all_now(self, logs: Iterable[PartitionLog] | None = None) -> None:
        """Flush `logs` (default: every log seen) right away and wake their waiters.

        Raises the first flush error after failing the affected waiters.
        """
        chosen = [log for log in self._logs if not log.closed] if logs is None else list(logs)
        # Logs with parked waiters always take part, so none of them is left behind.
        targets = list(dict.fromkeys([*chosen, *self._waiters]))
        if not targets:
            return
        loop = asyncio.get_running_loop()
        results = await loop.run_in_executor(self._executor, self._flush_logs, targets)
        first_error = self._settle(targets, results)
        if first_error is not None:
            raise first_error

    async def close(self) -> None:
        """Flush everything, resolve the waiters, stop the background task."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.flush_all_now()
        finally:
            self._wakeup.set()
            try:
                if self._task is not None:
                    await self._task  # at most one more round, then it sees _closed
            finally:
                # Waiters whose offsets can no longer become durable (a truncated log).
                self._fail_all(CommitterClosed("group committer closed"))

    def fail(self, log: PartitionLog, exc: BaseException) -> None:
        """Fail every waiter parked on `log`: for its owner, when it truncates, reloads or
        closes the log (their offsets may never become durable)."""
        self._fail_log(log, exc)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            self._run_before_round()
            logs = [log for log, heap in self._waiters.items() if heap]
            if logs:
                try:
                    self.round_in_flight = True
                    try:
                        results = await loop.run_in_executor(self._executor, self._flush_logs, logs)
                    finally:
                        self.round_in_flight = False
                    self.rounds += 1
                    self._settle(logs, results)
                except Exception as exc:  # e.g. the executor was shut down
                    # Parked waiters must never hang on a broken flusher.
                    self._fail_all(exc)
            if self._closed:
                self._run_before_round()  # nothing is left waiting for a round
                return

    def before_next_round(self, callback: Callable[[], None]) -> None:
        """Call `callback` once, just before the next flush round takes its logs: a writer
        whose appends could not be covered by the round in flight anyway (see
        round_in_flight) appends them then, in one batch instead of one per loop
        iteration. After close() it is called at once."""
        if self._closed:
            callback()
            return
        self._before_round.append(callback)
        self._wakeup.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="group-commit-flusher")

    def _run_before_round(self) -> None:
        callbacks, self._before_round = self._before_round, []
        for callback in callbacks:
            try:
                callback()
            except Exception as exc:  # reported as the loop reports a failed callback
                asyncio.get_running_loop().call_exception_handler(
                    {"message": "before_next_round callback failed", "exception": exc}
                )

    def _flush_logs(self, logs: list[PartitionLog]) -> list[int | BaseException]:
        """One worker-thread call: flush each log, an error of one not stopping the others."""
        if self.filesystem_sync.applies(logs):
            return self.filesystem_sync.flush(logs)
        if len(logs) == 1:
            return [_flush_one(logs[0])]
        return list(_fsync_pool.map(_flush_one, logs))

    def _settle(
        self, logs: list[PartitionLog], results: list[int | BaseException]
    ) -> BaseException | None:
        """Fail the waiters of logs whose flush raised, wake every durable waiter."""
        first_error: BaseException | None = None
        for log, result in zip(logs, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, LogClosed):
                    first_error = first_error or result
                self._fail_log(log, result)
        for log in list(self._waiters):
            self._wake_durable(log)
        return first_error

    def _wake_durable(self, log: PartitionLog) -> None:
        heap = self._waiters[log]
        durable = log.durable_offset
        while heap and heap[0][0] < durable:
            callback = heapq.heappop(heap)[2]
            self._parked -= 1
            callback(None)
        if heap and log.closed:
            # Closed between the flush's check and its fsync: what is left can never be
            # served (nobody else would wake these waiters).
            self._fail_log(log, LogClosed(f"log {log.directory} is closed"))
            return
        if not heap:
            del self._waiters[log]

    def _fail_log(self, log: PartitionLog, exc: BaseException) -> None:
        for _, _, callback in self._waiters.pop(log, []):
            self._parked -= 1
            callback(exc)

    def _fail_all(self, exc: BaseException) -> None:
        for log in list(self._waiters):
            self._fail_log(log, exc)


def _settle_future(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():  # its waiter was cancelled
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


def _flush_one(log: PartitionLog) -> int | BaseException:
    if log.closed:
        # Its waiters can never be served; whoever closed it flushed it if needed.
        return LogClosed(f"log {log.directory} is closed")
    try:
        return log.flush()
    except Exception as exc:
        return exc


# fsync releases the GIL, and the filesystem journal merges concurrent fsyncs: flushing the
# logs of a round in parallel makes the round as long as the slowest fsync instead of the
# sum of all (50 coordinator shards written in one round would otherwise queue 50 fsyncs).
_FSYNC_THREADS = 16
_fsync_pool = ThreadPoolExecutor(max_workers=_FSYNC_THREADS, thread_name_prefix="fsync")
