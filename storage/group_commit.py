"""Group commit: many writers wait for durability, few fsyncs pay for all of them.

Theory of operation
-------------------
A writer appends to a PartitionLog (page cache only), then awaits
``committer.wait_durable(log, last_offset)``. Waiters are parked per log in a heap keyed
by offset. A round takes every log that has waiters and hands their ``flush()`` calls
to the flusher thread in ONE call (so the event loop never blocks on a disk; the fsyncs
of several logs run in parallel threads, or a round of many logs is made durable by one
syncfs() of their filesystem, see syncfs.py); when the thread is done, the loop wakes
every waiter whose offset is now below its log's durable offset and, if anything was
parked meanwhile, starts the next round. While a round's fsyncs run, new appends and
waiters accumulate and are covered by the next round: the fsync rate adapts to the disk,
never one fsync per request. A writer may also defer its appends until just before the
next round (``before_next_round``) and append them then as one batch. Waiters are futures
(``wait_durable``) or plain callbacks (``call_when_durable``).

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
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from .errors import CommitterClosed, LogClosed, TooManyWaiters
from .health import StorageHealth
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
        waiters_max: int = WAITERS_MAX_DEFAULT,
        syncfs_min_logs: int = SYNCFS_MIN_LOGS_DEFAULT,
        on_round_synced: Callable[[float], None] | None = None,
        health: StorageHealth | None = None,
    ) -> None:
        """A round of at least `syncfs_min_logs` logs is synced with syncfs() where
        supported (0: never). `on_round_synced(seconds)` is told, on the loop, how long
        each background round's flushes took (a metric). `health` is told of every
        failed flush and of every log made durable again (writers report their failed
        appends to it too: `committer.health`)."""
        if waiters_max < 1:
            raise ValueError("waiters_max must be >= 1")
        if syncfs_min_logs < 0:
            raise ValueError("syncfs_min_logs must be >= 0")
        self.filesystem_sync = FilesystemSync(syncfs_min_logs)
        self._on_round_synced = on_round_synced
        self.health = health if health is not None else StorageHealth()
        self._round_mark = 0  # health.mark() when the round in flight began
        self._waiters_max = waiters_max
        self._waiters: dict[PartitionLog, list[_Waiter]] = {}
        self._parked = 0
        self._sequence = itertools.count()
        # Every log seen, for flush_all_now() and close(); weak so closed logs go away.
        self._logs: weakref.WeakSet[PartitionLog] = weakref.WeakSet()
        self._closed = False
        # Completed background flush rounds (a metric; tests count fsync batching).
        self.rounds = 0
        # True while a round's flushes run: what is appended now waits for the next one.
        self.round_in_flight = False
        # Something was parked (or a before-round callback added) since the last round
        # started; _round_scheduled: a round start is already queued on the loop.
        self._round_wanted = False
        self._round_scheduled = False
        self._round_ended: list[asyncio.Future[None]] = []  # close() waiting for a round
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

    def call_when_durable(
        self, log: PartitionLog, offset: int, callback: DurableCallback, want_round: bool = True
    ) -> None:
        """Park `callback` until every offset up to and including `offset` of `log` is
        fsynced: then it is called with None, or with the exception that means it never
        will be (a failed flush, a closed log or committer). Cheaper than wait_durable for a
        caller that needs no coroutine (a shard runner's batch). Raises as wait_durable
        does, before parking; an offset already durable is not parked (callback(None) at
        once). `want_round` False: no round is started for it; the next round, whoever
        wants it, flushes `log` too (a write nobody is waiting for rides along)."""
        if log.durable_offset > offset:
            callback(None)
            return
        if self._closed:
            raise CommitterClosed("group committer is closed")
        if offset >= log.next_offset:
            raise ValueError(f"offset {offset} is not appended yet (next {log.next_offset})")
        if self._parked >= self._waiters_max:
            raise TooManyWaiters(f"{self._parked} waiters already parked")
        heap = self._waiters.get(log)
        if heap is None:  # the log's first waiter since its last round (WeakSet.add is slow)
            heap = self._waiters[log] = []
            self._logs.add(log)
        heapq.heappush(heap, (offset, next(self._sequence), callback))
        self._parked += 1
        if want_round:
            self._want_round()

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
        mark = self.health.mark()
        results = await loop.run_in_executor(None, self._flush_logs, targets)
        first_error = self._settle(targets, results, mark)
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
            try:
                while self.round_in_flight:  # no new round starts once closed
                    ended = asyncio.get_running_loop().create_future()
                    self._round_ended.append(ended)
                    await ended
                self._run_before_round()  # nothing is left waiting for a round
                if self._waiters:  # parked while the flush above ran
                    await self.flush_all_now([])
            finally:
                # Waiters whose offsets can no longer become durable (a truncated log).
                self._fail_all(CommitterClosed("group committer closed"))

    def fail(self, log: PartitionLog, exc: BaseException) -> None:
        """Fail every waiter parked on `log`: for its owner, when it truncates, reloads or
        closes the log (their offsets may never become durable)."""
        self._fail_log(log, exc)

    def _want_round(self) -> None:
        """Have a round start on the loop's next turn, or, with one in flight, as soon as it
        ends (so what arrives during a round is gathered for the next)."""
        self._round_wanted = True
        if not self.round_in_flight and not self._round_scheduled and not self._closed:
            self._round_scheduled = True
            asyncio.get_running_loop().call_soon(self._start_round)

    def _start_round(self) -> None:
        self._round_scheduled = False
        if self.round_in_flight or self._closed:
            return  # close() runs what is left
        self._round_wanted = False
        self._run_before_round()
        logs = [log for log, heap in self._waiters.items() if heap]
        if logs:
            self.round_in_flight = True
            self._round_mark = self.health.mark()
            _flusher_thread().put((self, asyncio.get_running_loop(), logs))

    def _end_round(
        self,
        logs: list[PartitionLog],
        results: list[int | BaseException] | BaseException,
        elapsed_s: float,
    ) -> None:
        """On the loop, the flusher thread's answer for a round (its flushes took
        `elapsed_s`): settle it, then start the next if anything was parked meanwhile."""
        self.round_in_flight = False
        if self._on_round_synced is not None:
            self._on_round_synced(elapsed_s)
        try:
            if isinstance(results, BaseException):
                self._fail_all(results)  # parked waiters must never hang on a broken flush
            else:
                self.rounds += 1
                self._settle(logs, results, self._round_mark)
        except Exception as exc:  # a waiter's callback raised: fail the others, not hang them
            self._fail_all(exc)
        finally:
            ended, self._round_ended = self._round_ended, []
            for future in ended:
                if not future.done():
                    future.set_result(None)
            if self._round_wanted and not self._closed:
                self._start_round()

    def before_next_round(self, callback: Callable[[], None]) -> None:
        """Call `callback` once, just before the next flush round takes its logs: a writer
        whose appends could not be covered by the round in flight anyway (see
        round_in_flight) appends them then, in one batch instead of one per loop
        iteration. After close() it is called at once."""
        if self._closed:
            callback()
            return
        self._before_round.append(callback)
        self._want_round()

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
        self, logs: list[PartitionLog], results: list[int | BaseException], mark: int
    ) -> BaseException | None:
        """Fail the waiters of logs whose flush raised, wake every durable waiter; tell
        `health` of both (flushes begun at `mark`)."""
        first_error: BaseException | None = None
        health = self.health
        for log, result in zip(logs, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, LogClosed):
                    first_error = first_error or result
                    health.write_failed("flush", log.directory, result)
                self._fail_log(log, result)
            elif not health.healthy:
                health.write_succeeded(log.directory, mark)
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


# The rounds of every committer run on one flusher thread. A round is handed over through a
# SimpleQueue and answered with call_soon_threadsafe: ~16 us of CPU for the round trip,
# where loop.run_in_executor (a concurrent and an asyncio future, a lock-guarded work
# queue, a task awaiting it) took ~90 us on the same machine, per round.
_RoundRequest = tuple[GroupCommitter, asyncio.AbstractEventLoop, list[PartitionLog]]
_rounds: queue.SimpleQueue[_RoundRequest] = queue.SimpleQueue()
_flusher: threading.Thread | None = None
_flusher_lock = threading.Lock()


def _flusher_thread() -> queue.SimpleQueue[_RoundRequest]:
    """The queue of the flusher thread, started on first use."""
    global _flusher
    if _flusher is None:
        with _flusher_lock:
            if _flusher is None:
                _flusher = threading.Thread(
                    target=_run_rounds, name="group-commit-flusher", daemon=True
                )
                _flusher.start()
    return _rounds


def _run_rounds() -> None:
    while True:
        committer, loop, logs = _rounds.get()
        results: list[int | BaseException] | BaseException
        started = time.perf_counter()
        try:
            results = committer._flush_logs(logs)
        except BaseException as exc:  # the loop fails the round's waiters with it
            results = exc
        elapsed_s = time.perf_counter() - started
        try:
            loop.call_soon_threadsafe(committer._end_round, logs, results, elapsed_s)
        except RuntimeError:  # the loop is closed: nobody is left to answer
            pass


# fsync releases the GIL, and the filesystem journal merges concurrent fsyncs: flushing the
# logs of a round in parallel makes the round as long as the slowest fsync instead of the
# sum of all (50 coordinator shards written in one round would otherwise queue 50 fsyncs).
_FSYNC_THREADS = 16
_fsync_pool = ThreadPoolExecutor(max_workers=_FSYNC_THREADS, thread_name_prefix="fsync")
