"""The runtime of one coordinator shard over its log, whatever the shard: the group
coordinator's shards (runner.py's ShardRunner) and the transaction coordinator's
(txn_runner.py) are subclasses that say how a shard is made and how its log is replayed.

Theory of operation. Everything runs on the event loop thread, so a shard has exactly one
writer. An event (a request handler bound to its arguments, or a timer callback) runs
synchronously against the shard and returns a Result. The runner replays the Result's
`records` into the shard, encodes them with `applied_records` into the batch being
gathered, and keeps the Result's replies with that batch. At the end of the loop
iteration (or, while a flush round is in flight, just before the next round starts:
nothing appended meanwhile could be covered by the round in flight) the batch is appended
to the shard's log as one record batch and the group committer is asked for durability;
when the fsync round that covers it completes, the replies are delivered. A Result
without records whose shard has nothing in flight is answered at once (heartbeats that
change nothing write nothing and wait for nothing); one that arrives while writes are in
flight waits for them ("read after pending writes").

A failed append or fsync fails the replies waiting on it with a StorageFailure and reloads
the shard from its log, as Kafka does with a failed coordinator partition.

What a shard offers the runner: `replay(key, value, now_ms)`, `on_loaded(now_ms)` (a
Result) and `take_parked_replies()`; the subclass's `encode_key` / `encode_value` turn its
records into bytes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from groupcoord.protocol.batches import NO_PRODUCER_ID, DefaultRecordBatchBuilder, parse_header
from groupcoord.protocol.control_batches import marker_batch
from groupcoord.protocol.records import RecordError
from groupcoord.storage import (
    CorruptBatch,
    GroupCommitter,
    LogConfig,
    PartitionLog,
    StorageError,
)

from ..groups.result import Reply, Result, TimerCallback
from ..observability.logging import get_logger
from ..observability.metrics import ServerMetrics
from ..observability.storage_damage import report_damage_removed
from . import clock as clocks
from .gc_pause import pause_gc, resume_gc
from .timers import LoopTimer

log = get_logger("groupcoord.shard")

RELOAD_RETRY_S = 5.0
BATCH_RECORDS_MAX = 10_000


class ShardState(Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"
    CLOSED = "closed"
    # Another node owns the shard (serve --workers: ownership.py; serve --cluster: its
    # lease is another node's); not loaded here.
    NOT_OWNED = "not_owned"


class NotActive(Exception):
    """The shard is loading (COORDINATOR_LOAD_IN_PROGRESS) or failed/closed
    (NOT_COORDINATOR)."""

    def __init__(self, state: ShardState) -> None:
        super().__init__(state.value)
        self.state = state


class StorageFailure(Exception):
    """Delivered to a reply in place of its response when the records it waited on could
    not be written, or when its request was parked in a shard being unloaded (answered as
    NOT_COORDINATOR: the client looks the coordinator up again)."""


_A = TypeVar("_A")


def _run_event(shard: Any, event: Callable[[int], Result], now_ms: int) -> Result:
    return event(now_ms)


class _Batch:
    """Records gathered for one record batch, and the replies waiting on it. A
    transactional batch (the group shards' TxnOffsetCommit) carries its producer id and
    epoch; a marker (`marker` COMMIT True / ABORT False) is written as a control batch.
    `unawaited`: begun by `call_unawaited`; without replies it asks for no fsync round."""

    __slots__ = (
        "records",
        "replies",
        "producer_id",
        "producer_epoch",
        "marker",
        "created",
        "unawaited",
    )

    def __init__(self) -> None:
        self.created = time.perf_counter()  # the batch linger metric
        self.records: list[tuple[bytes, bytes | None]] = []
        self.replies: list[tuple[Reply, Any]] = []
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = -1
        self.marker: bool | None = None
        self.unawaited = False


class CoordinatorShardRunner:
    """The runner of one shard (see the module docstring). Subclasses set `encode_key` and
    `encode_value` (staticmethods: record key/value -> bytes) and implement `_new_shard`
    and `_replay_log`; their own fields are set before this __init__ runs."""

    encode_key: Callable[[Any], bytes]
    encode_value: Callable[[Any], bytes]

    def __init__(
        self,
        shard_id: int,
        directory: Path,
        log_config: LogConfig,
        committer: GroupCommitter,
        clock_ms: Callable[[], int] | None = None,
        metrics: ServerMetrics | None = None,
        clock: clocks.Clock | None = None,
    ) -> None:
        """`clock`: the loop clock of its timers and retries and, unless `clock_ms` is
        given, its `now_ms` (a test's ManualClock; default: the running loop and the wall
        clock)."""
        self.shard_id = shard_id
        self.metrics = metrics
        self.directory = directory
        self.log_config = log_config
        self.committer = committer
        self.clock = clock
        if clock_ms is None:
            clock_ms = clock.now_ms if clock is not None else (lambda: int(time.time() * 1000))
        self.clock_ms = clock_ms
        self.state = ShardState.LOADING
        self.timer = LoopTimer(self.fire_timer, clock)
        self.shard = self._new_shard()
        self.log: PartitionLog | None = None
        self._batch: _Batch | None = None
        self._inflight = 0  # appended batches not yet durable
        self._inflight_replies = 0  # their replies (the event queue size metric)
        self._drained = asyncio.Event()  # set while nothing is in flight
        self._drained.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.load_time_s = 0.0
        self.loaded_records = 0
        self.damaged_batches = 0  # removed by the last load: they failed their checks
        # serve --cluster: rebuilds the local log from the database before every load
        # (cluster/replicated_commit.py); raises when the shard cannot be served here.
        self.restore: Callable[[], Awaitable[None]] | None = None

    def _new_shard(self) -> Any:
        """A new, empty shard (at construction and before every load)."""
        raise NotImplementedError

    # -- loading ---------------------------------------------------------------------------

    async def load(self, salvage: bool = False) -> None:
        """Open the shard's log and rebuild the shard by replaying it, yielding to the event
        loop between chunks so other shards and the data plane keep being served.
        `salvage`: the log was closed cleanly (PartitionLog.open); never for a reload."""
        started = time.monotonic()
        self.state = ShardState.LOADING
        self.timer.cancel_all()
        self.shard = self._new_shard()
        if self.log is not None:
            self.log.close()
            self.log = None
        if self.restore is not None:
            await self.restore()
        self.log = PartitionLog.open(self.directory, self.log_config, salvage=salvage)
        self.committer.track(self.log)
        now_ms = self.clock_ms()
        # A load allocates millions of short-lived objects and keeps hundreds of thousands
        # (groups, offset dicts): the cyclic collector would walk the kept ones over and
        # over (3% of a 10 M record load at the server's thresholds, more at the defaults).
        # Loading makes no cycles; what other tasks make meanwhile waits for the next pass.
        pause_gc()
        try:
            count = await self._replay_log(now_ms)
        finally:
            resume_gc()
        self.loaded_records = count
        self.state = ShardState.ACTIVE
        now_ms = self.clock_ms()
        self._apply(self.shard.on_loaded(now_ms), now_ms)
        self.load_time_s = time.monotonic() - started
        if self.metrics is not None:
            self.metrics.partition_load.observe(self.load_time_s)

    async def _replay_log(self, now_ms: int) -> int:
        """Replay the whole log into `self.shard`; returns how many records were replayed
        (unknown record types are skipped, not counted)."""
        raise NotImplementedError

    async def _read_log(self, feed: Callable[[bytes, int], int], chunk_bytes: int) -> None:
        """Feed the whole log to `feed(chunk, offset)` (which returns the offset after the
        last whole batch it took) in `chunk_bytes` reads, yielding to the event loop
        between chunks; damage found on the way is removed (and reported) first."""
        log_ = self.log
        assert log_ is not None
        offset = log_.log_start_offset
        end = log_.next_offset
        self.damaged_batches = 0
        while offset < end:
            try:
                chunk = log_.read(offset, chunk_bytes)
            except CorruptBatch as exc:
                # Damage in a segment trusted at open (reads check every batch they
                # return): removed as recovery removes damage, the valid batches after
                # it kept, so every later record still replays. Each key it held keeps
                # its last readable value.
                removed, dropped = log_.salvage_damaged(exc.path)
                if not removed:
                    raise
                report_damage_removed(
                    self.metrics,
                    self.directory.name,
                    exc.path,
                    dropped,
                    removed,
                    shard=self.shard_id,
                    reason=exc.reason,
                )
                self.damaged_batches += len(dropped)
                end = log_.next_offset
                continue
            if not chunk:
                break
            offset = feed(chunk, offset)
            await asyncio.sleep(0)

    async def close(self) -> None:
        self.state = ShardState.CLOSED
        self.timer.cancel_all()
        self._release_parked(StorageFailure("the coordinator is shutting down"))
        self._seal()
        if self._inflight and self.log is not None:
            # An unawaited batch (call_unawaited) asks for no round: flush it now.
            try:
                await self.committer.flush_all_now([self.log])
            except Exception:  # its waiters are failed by it: nothing more to do here
                pass
        await self._drained.wait()  # the batches in flight are answered or failed
        if self._tasks:  # reloads, perhaps waiting to retry
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self.state = ShardState.CLOSED  # a reload cancelled mid-load left it LOADING
        if self.log is not None:
            self.log.close()

    async def disown(self) -> None:
        """Stop serving the shard: another node owns it now (serve --cluster: its lease
        moved or was given back). As `close`: parked requests and writes not yet durable
        are answered with StorageFailure (NOT_COORDINATOR: the client finds the new
        owner); the shard is NOT_OWNED until loaded again."""
        await self.close()
        self.state = ShardState.NOT_OWNED

    def queued_events(self) -> int:
        """Events whose answers wait on this shard's writes: gathered into the open batch,
        or appended and waiting for their fsync."""
        batch = self._batch
        return self._inflight_replies + (len(batch.replies) if batch is not None else 0)

    # -- events ----------------------------------------------------------------------------

    def run(self, event: Callable[[int], Result], queued_at: float | None = None) -> None:
        """Run one event now; `queued_at` (time.perf_counter) is when it arrived (the read
        that brought the request), for the queue-time metric. Raises NotActive while
        loading, failed or closed."""
        self.call(_run_event, event, queued_at)

    def call(
        self,
        call: Callable[[Any, _A, int], Result],
        argument: _A,
        queued_at: float | None = None,
    ) -> None:
        """`run` of the event `call(shard, argument, now_ms)`: a request's handler gets the
        shard without a closure made per request to bind it (a durable commit's path)."""
        if self.state is not ShardState.ACTIVE:
            raise NotActive(self.state)
        now_ms = self.clock_ms()
        metrics = self.metrics
        if metrics is None:
            self._apply(call(self.shard, argument, now_ms), now_ms)
            return
        started = time.perf_counter()
        if queued_at is not None:
            metrics.event_queue.observe(started - queued_at)
        self._apply(call(self.shard, argument, now_ms), now_ms)
        metrics.event_processing.observe(time.perf_counter() - started)

    def call_unawaited(self, call: Callable[[Any, _A, int], Result], argument: _A) -> None:
        """`call` of an event whose records nobody needs durable before going on (the
        transaction coordinator's CompleteCommit/CompleteAbort: a crash before it is
        durable leaves the transaction prepared, and the load completes it again): its
        replies are answered once its records are replayed and gathered, and a batch of
        nothing else asks for no fsync round of its own (the next round, whatever starts
        it, flushes it; a later write or read of the shard waits for it as for any pending
        write). Raises NotActive as `call`."""
        if self.state is not ShardState.ACTIVE:
            raise NotActive(self.state)
        now_ms = self.clock_ms()
        result = call(self.shard, argument, now_ms)
        replies, result.replies = result.replies, []
        if result.records and self._batch is None:
            batch = self._batch = _Batch()
            batch.unawaited = True
            asyncio.get_running_loop().call_soon(self._seal)
        self._apply(result, now_ms)
        for reply, response in replies:
            reply(response)

    def fire_timer(self, callback: TimerCallback, late_s: float | None = None) -> None:
        """A timer's (or an offloaded computation's) event; `late_s`: how long after its
        due time it fires (the queue-time metric)."""
        if self.state is ShardState.ACTIVE:
            self.run(callback, None if late_s is None else time.perf_counter() - late_s)

    def _apply(self, result: Result, now_ms: int) -> None:
        shard = self.shard
        for key, value in result.records:
            shard.replay(key, value, now_ms)
        written = (
            result.records + result.applied_records if result.applied_records else result.records
        )
        if not written and (not result.replies or (self._batch is None and self._inflight == 0)):
            # Nothing written now and nothing in flight: answer at once. (Nothing written
            # and nobody to answer, such as a heartbeat the steady path declined: nothing
            # to wait for either.)
            for reply, response in result.replies:
                reply(response)
            return
        batch = self._batch
        if batch is None:
            batch = self._batch = _Batch()
            if self.committer.round_in_flight:
                # Nothing appended now can be durable before the next round: gather the
                # records until it starts, so a shard appends one batch a round rather
                # than one per loop iteration (a batch of one record under a paced load).
                self.committer.before_next_round(self._seal)
            else:
                asyncio.get_running_loop().call_soon(self._seal)
        encode_key = self.encode_key
        encode_value = self.encode_value
        for key, value in written:
            batch.records.append((encode_key(key), None if value is None else encode_value(value)))
        batch.replies.extend(result.replies)
        if len(batch.records) >= BATCH_RECORDS_MAX:
            self._seal()

    def _seal(self) -> None:
        batch = self._batch
        if batch is None:
            return
        self._batch = None
        log_ = self.log
        assert log_ is not None
        last_offset = log_.next_offset - 1
        if batch.records:
            flush_started = time.perf_counter()
            timestamp = self.clock_ms()
            if batch.producer_id == NO_PRODUCER_ID:
                # Positional arguments (magic 2, no compression, not transactional, no
                # producer id, epoch or sequence, no size limit): the C builder parses
                # keywords slowly.
                data = _build(
                    DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30), batch, timestamp
                )
            elif batch.marker is None:  # a transactional batch: base sequence 0, as Kafka
                builder = DefaultRecordBatchBuilder(
                    2, 0, 1, batch.producer_id, batch.producer_epoch, 0, 1 << 30
                )
                data = _build(builder, batch, timestamp)
            else:  # the marker's coordinator epoch: 0, this node's only epoch
                data = marker_batch(
                    batch.producer_id, batch.producer_epoch, 0, batch.marker, timestamp
                )[0]
            try:
                base = log_.append(data, [parse_header(data)])
            except (OSError, RecordError, StorageError) as e:
                # StorageError: the log failed earlier (an fsync, a compaction swap) or is
                # closed. Escaping here, it would drop the batch's replies unanswered.
                self.committer.health.write_failed("append", log_.directory, e)
                self._fail(batch, e)
                return
            last_offset = base + len(batch.records) - 1
            if self.metrics is not None:
                self.metrics.batch_flush.observe(time.perf_counter() - flush_started)
                self.metrics.batch_linger.observe(flush_started - batch.created)
        if last_offset < log_.durable_offset:
            for reply, response in batch.replies:
                reply(response)
            return
        # A callback, not a task awaiting wait_durable: a task and a future per batch were
        # a tenth of a commit's CPU when batches are small (one commit per connection).
        self._inflight += 1
        self._inflight_replies += len(batch.replies)
        self._drained.clear()
        started = time.perf_counter()
        try:
            self.committer.call_when_durable(
                log_,
                last_offset,
                lambda error: self._deliver(batch, started, error),
                not batch.unawaited or bool(batch.replies),
            )
        except Exception as e:  # committer closed, too many waiters
            self._deliver(batch, started, e)

    def _deliver(self, batch: _Batch, started: float, error: BaseException | None) -> None:
        """The batch's records are durable (error None), or will never be: answer its
        replies, or fail them (fsync failed, log or committer closed)."""
        self._inflight -= 1
        self._inflight_replies -= len(batch.replies)
        if self._inflight == 0:
            self._drained.set()
        if error is not None:
            self._fail(batch, error)
            return
        if self.metrics is not None:
            self.metrics.event_purgatory.observe(time.perf_counter() - started)
        for reply, response in batch.replies:
            try:
                reply(response)
            except Exception:  # a reply is the connection's; it must not stop the others
                log.exception("reply failed", shard=self.shard_id)

    def _fail(self, batch: _Batch, error: BaseException) -> None:
        log.error("shard write failed; reloading", shard=self.shard_id, error=str(error))
        failure = StorageFailure(str(error))
        for reply, _ in batch.replies:
            reply(failure)
        if self.state is ShardState.ACTIVE:
            # The reload drops this shard object, and with it the requests parked in its
            # groups: answer them now rather than never.
            self._release_parked(failure)
            self.state = ShardState.FAILED
            task = asyncio.ensure_future(self._reload())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _release_parked(self, failure: StorageFailure) -> None:
        for reply in self.shard.take_parked_replies():
            try:
                reply(failure)
            except Exception:  # a reply is the connection's; it must not stop the others
                log.exception("reply failed", shard=self.shard_id)

    async def _reload(self) -> None:
        """Reload from the log until it works (the disk may come back: space freed, a
        transient I/O error), every RELOAD_RETRY_S; NOT_COORDINATOR meanwhile."""
        while True:
            try:
                await self.load()
                return
            except Exception as e:
                log.error(
                    "shard reload failed; retrying",
                    shard=self.shard_id,
                    error=str(e),
                    retry_in_s=RELOAD_RETRY_S,
                )
                self.state = ShardState.FAILED
            await clocks.sleep(self.clock, RELOAD_RETRY_S)


def _build(builder: Any, batch: _Batch, timestamp: int) -> bytearray:
    """The batch's records in `builder`, built: a bytearray (the log stamps the base offset
    into it)."""
    append = builder.append
    for delta, (key, value) in enumerate(batch.records):
        append(delta, timestamp, key, value, [])  # offset delta, ts, key, value, headers
    data: bytearray = builder.build()
    return data
