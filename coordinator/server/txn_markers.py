"""The transaction marker router (Kafka's TransactionMarkerChannelManager and its completion
handler): completes a transaction in PrepareCommit/PrepareAbort.

Theory of operation. A transaction shard hands over a MarkerJob once its Prepare record is
durable (after EndTxn's answer; after a fence or a timeout abort; after a load that found
the transaction in a Prepare state: recovery after a crash). The router writes the marker
of every partition of the job at once, concurrently: a data partition through the data
plane's `write_txn_marker` (topics/txn_markers.py), an offsets partition
("__consumer_offsets", p) through the group coordinator's `complete_transaction`. Each
returns once its marker is durable. Per partition, as Kafka's completion handler:

* NONE: done. UNSUPPORTED_FOR_MESSAGE_FORMAT / UNSUPPORTED_VERSION: done, as if written.
* A topic (or partition) that no longer exists: done, whatever the write answered
  (UNKNOWN_TOPIC_OR_PARTITION), checked before every try (Kafka drops a partition without
  a leader: the topic was deleted).
* INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED: the job stops; the transaction
  stays in its Prepare state until its shard is loaded again (as Kafka).
* Anything else (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT,
  KAFKA_STORAGE_ERROR, the group shard loading or failed, an exception): retried with
  backoff (MARKER_RETRY_BACKOFF_MS doubling to MARKER_RETRY_BACKOFF_MAX_MS).

A job handed over by a load (recovery after a crash) skips a partition whose last marker
of the producer is already this one, with no transaction opened since (a data partition:
topics/txn_markers.py marker_written; an offsets partition: the group shard's, asked with
`resumed`): the crash came after that marker was durable, and writing it again would
leave two markers for one transaction (Kafka appends the second).

Once every partition is done, the transaction shard writes CompleteCommit/CompleteAbort
(`complete_transaction` of the transaction gateway), given up when the shard is loading
or failed (its load hands the job over again). A job already
running is not started twice.

A test-only hook (never set in production): the environment variable
GROUPCOORD_TEST_MARKER_PAUSE_MS="BEFORE,AFTER", read when the router is made, makes every
job write its markers one partition at a time (offsets partitions first, then data
partitions, each in order), sleeping BEFORE ms before the first marker and AFTER ms after
it, so a test can SIGKILL the real server at a point it can observe (the transaction in
PrepareCommit with no marker; one partition's marker durable and the others not) instead
of guessing a moment.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from groupcoord.protocol.errors import ErrorCode

from ..observability.logging import get_logger
from ..observability.txn_metrics import TxnMetrics
from ..runtime.partitioning import OFFSETS_TOPIC
from ..runtime.txn_gateway import MarkerJob, TxnCoordinatorGateway
from ..topics.txn_markers import marker_written, write_txn_marker
from .context import GroupContext

log = get_logger("groupcoord.transactions")

MARKER_RETRY_BACKOFF_MS = 20
MARKER_RETRY_BACKOFF_MAX_MS = 1_000
# The test-only pauses "BEFORE_MS,AFTER_MS" (see the module docstring); unset: none.
TEST_MARKER_PAUSE_ENV = "GROUPCOORD_TEST_MARKER_PAUSE_MS"

_DONE = frozenset(
    {ErrorCode.NONE, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.UNSUPPORTED_VERSION}
)
_STOP = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})

# write_txn_marker's shape: (ctx, topic, partition, producer id, epoch, coordinator epoch,
# commit, transaction version) -> error; complete_transaction's: (offsets partition,
# producer id, epoch, commit, resumed, transaction version).
WriteMarker = Callable[[Any, str, int, int, int, int, bool, int], Awaitable[ErrorCode]]
CompleteOffsets = Callable[[int, int, int, bool, bool, int], Awaitable[ErrorCode]]
# marker_written's shape: (ctx, topic, partition, producer id, epoch, commit) -> bool.
MarkerWritten = Callable[[Any, str, int, int, int, bool], bool]


def _never_written(*_: object) -> bool:
    return False


class _Stopped(Exception):
    """A partition answered INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED."""


class TxnMarkerRouter:
    """`ctx`: the server's handler context (topics, the group gateway, the transaction
    gateway). `write_marker` / `complete_offsets`: the two doors of the other sides,
    replaceable by tests (defaults: write_txn_marker and the group gateway's
    complete_transaction); `written`: whether a data partition holds a job's marker
    already (default: the data plane's marker_written with the default write_marker, else
    never). `metrics`: where completion times and failed marker writes go, if anywhere."""

    def __init__(
        self,
        ctx: GroupContext,
        write_marker: WriteMarker | None = None,
        complete_offsets: CompleteOffsets | None = None,
        written: MarkerWritten | None = None,
        metrics: TxnMetrics | None = None,
    ) -> None:
        self.ctx = ctx
        self.metrics = metrics
        self.txns: TxnCoordinatorGateway = ctx.txns
        self.write_marker: WriteMarker = write_marker or write_txn_marker
        self.written: MarkerWritten = written or (
            marker_written if write_marker is None else _never_written
        )
        self.complete_offsets: CompleteOffsets = complete_offsets or ctx.groups.complete_transaction
        self._running: dict[MarkerJob, asyncio.Task[None]] = {}
        self.completed = 0  # transactions this router completed (for tests and logs)
        # (before the first marker, after it) in ms, or None: the test hook above.
        self.test_pauses_ms: tuple[int, int] | None = None
        if hook := os.environ.get(TEST_MARKER_PAUSE_ENV):
            before_ms, after_ms = (int(part) for part in hook.split(","))
            self.test_pauses_ms = (before_ms, after_ms)
            log.warning(
                "test hook: transaction markers paused", env=TEST_MARKER_PAUSE_ENV, pauses_ms=hook
            )

    def submit(self, job: MarkerJob) -> None:
        """Complete `job` in the background (the transaction service's marker sink)."""
        running = self._running.get(job)
        if running is not None and not running.done():
            return
        task = asyncio.ensure_future(self._complete(job))
        self._running[job] = task
        task.add_done_callback(lambda t: self._finished(job, t))

    def _finished(self, job: MarkerJob, task: asyncio.Task[None]) -> None:
        if self._running.get(job) is task:
            del self._running[job]

    @property
    def in_flight(self) -> int:
        return len(self._running)

    async def wait_idle(self) -> None:
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    async def close(self) -> None:
        """Stop every job (a restart resumes them from the log)."""
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _complete(self, job: MarkerJob) -> None:
        started = time.monotonic()
        try:
            if self.test_pauses_ms is not None:
                await self._write_paused(job, *self.test_pauses_ms)
            else:
                await asyncio.gather(*(self._write(job, topic, p) for topic, p in job.partitions))
        except _Stopped:
            log.error(
                "transaction markers stopped: a partition fenced the producer epoch or the "
                "coordinator; the transaction stays prepared until its shard reloads",
                transactional_id=job.transactional_id,
                producer_id=job.producer_id,
                producer_epoch=job.producer_epoch,
            )
            return
        backoff_ms = MARKER_RETRY_BACKOFF_MS
        while True:
            error = await self.txns.complete_transaction(job)
            if error is ErrorCode.NONE:
                self.completed += 1
                if self.metrics is not None:
                    self.metrics.completed(job.commit, time.monotonic() - started)
                return
            if error in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR):
                return  # the shard (re)loads, and its load hands the job over again
            log.warning(
                "transaction completion failed; retrying",
                transactional_id=job.transactional_id,
                error=error.name,
            )
            await asyncio.sleep(backoff_ms / 1000)
            backoff_ms = min(2 * backoff_ms, MARKER_RETRY_BACKOFF_MAX_MS)

    async def _write_paused(self, job: MarkerJob, before_ms: int, after_ms: int) -> None:
        """The test hook's order: pause, the first marker, pause, the others in turn."""
        ordered = sorted(job.partitions, key=lambda tp: (tp[0] != OFFSETS_TOPIC, tp))
        await asyncio.sleep(before_ms / 1000)
        for i, (topic, partition) in enumerate(ordered):
            await self._write(job, topic, partition)
            if i == 0:
                await asyncio.sleep(after_ms / 1000)

    async def _write(self, job: MarkerJob, topic: str, partition: int) -> None:
        backoff_ms = MARKER_RETRY_BACKOFF_MS
        if (
            job.recovered
            and topic != OFFSETS_TOPIC
            and self.written(
                self.ctx, topic, partition, job.producer_id, job.producer_epoch, job.commit
            )
        ):
            # Resumed after a crash: this partition's marker made it to the log before the
            # crash (it ends no open transaction), so it is not written twice.
            return
        while True:
            if self._deleted(topic, partition):
                return  # checked before every try: Kafka drops a partition without a leader
            try:
                if topic == OFFSETS_TOPIC:
                    error = await self.complete_offsets(
                        partition,
                        job.producer_id,
                        job.producer_epoch,
                        job.commit,
                        job.recovered,
                        job.transaction_version,
                    )
                else:
                    error = await self.write_marker(
                        self.ctx,
                        topic,
                        partition,
                        job.producer_id,
                        job.producer_epoch,
                        job.coordinator_epoch,
                        job.commit,
                        job.transaction_version,
                    )
            except asyncio.CancelledError:
                raise
            except Exception as e:  # retried: the partition's side may come back
                log.error(
                    "transaction marker write raised; retrying",
                    topic=topic,
                    partition=partition,
                    error=repr(e),
                )
                error = None
            if error in _DONE:
                return
            if self.metrics is not None:
                self.metrics.marker_failed("EXCEPTION" if error is None else error.name)
            if error in _STOP:
                raise _Stopped(error)
            await asyncio.sleep(backoff_ms / 1000)
            backoff_ms = min(2 * backoff_ms, MARKER_RETRY_BACKOFF_MAX_MS)

    def _deleted(self, topic: str, partition: int) -> bool:
        if topic == OFFSETS_TOPIC:
            return False
        found = self.ctx.topics.get(topic)
        return found is None or not 0 <= partition < len(found.partitions)


__all__ = ["TxnMarkerRouter"]
