"""ShardRunner: the asyncio glue around one pure GroupShard.

Theory of operation. Everything runs on the event loop thread, so a shard has exactly one
writer. An event (a request handler bound to its arguments, or a timer callback) runs
synchronously against the shard and returns a Result. The runner replays the Result's
`records` into the shard, encodes them with `applied_records` into the batch being
gathered for this loop iteration, and keeps the Result's replies with that batch. At the
end of the iteration the batch is appended to the shard's log as one record batch and the
group committer is asked for durability; when the fsync round that covers it completes,
the replies are delivered. A Result without records whose shard has nothing in flight is
answered at once (heartbeats that change nothing write nothing and wait for nothing); one
that arrives while writes are in flight waits for them ("read after pending writes").

A failed append or fsync fails the replies waiting on it with a StorageFailure and reloads
the shard from its log, as Kafka does with a failed coordinator partition.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from protocol.batches import parse_header
from protocol.records import (
    RecordError,
    UnknownRecordType,
    decode_record,
    encode_key,
    encode_value,
)
from storage import GroupCommitter, LogConfig, PartitionLog

from ..groups.config import GroupConfig
from ..groups.result import Reply, Result, TimerCallback
from ..groups.shard import GroupShard
from ..observability.logging import get_logger
from ..observability.metrics import ServerMetrics
from .timers import LoopTimer

log = get_logger("groupcoord.shard")

LOAD_CHUNK_BYTES = 5 * 1024 * 1024  # offsets.load.buffer.size
BATCH_RECORDS_MAX = 10_000


class ShardState(Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"
    CLOSED = "closed"


class NotActive(Exception):
    """The shard is loading (COORDINATOR_LOAD_IN_PROGRESS) or failed/closed
    (NOT_COORDINATOR)."""

    def __init__(self, state: ShardState) -> None:
        super().__init__(state.value)
        self.state = state


class StorageFailure(Exception):
    """Delivered to a reply in place of its response when the records it waited on could
    not be written (answered as NOT_COORDINATOR: the client looks the coordinator up again)."""


class UuidIds:
    def new_uuid(self) -> str:
        import uuid

        return str(uuid.uuid4())


class _Batch:
    __slots__ = ("records", "replies")

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self.replies: list[tuple[Reply, Any]] = []


class ShardRunner:
    def __init__(
        self,
        shard_id: int,
        directory: Path,
        group_config: GroupConfig,
        log_config: LogConfig,
        committer: GroupCommitter,
        clock_ms: Callable[[], int] | None = None,
        metrics: ServerMetrics | None = None,
    ) -> None:
        self.shard_id = shard_id
        self.metrics = metrics
        self.directory = directory
        self.group_config = group_config
        self.log_config = log_config
        self.committer = committer
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.state = ShardState.LOADING
        self.timer = LoopTimer(self.fire_timer)
        self.shard = GroupShard(shard_id, group_config, self.timer, UuidIds())
        self.log: PartitionLog | None = None
        self._batch: _Batch | None = None
        self._inflight = 0  # appended batches not yet durable
        self._tasks: set[asyncio.Task[None]] = set()
        self.load_time_s = 0.0
        self.loaded_records = 0

    # -- loading ---------------------------------------------------------------------------

    async def load(self) -> None:
        """Open the shard's log and rebuild the shard by replaying it, yielding to the event
        loop between chunks so other shards and the data plane keep being served."""
        started = time.monotonic()
        self.state = ShardState.LOADING
        self.timer.cancel_all()
        self.shard = GroupShard(self.shard_id, self.group_config, self.timer, UuidIds())
        if self.log is not None:
            self.log.close()
        self.log = PartitionLog.open(self.directory, self.log_config)
        self.committer.track(self.log)
        now_ms = self.clock_ms()
        replay = self.shard.replay
        count = 0
        offset = self.log.log_start_offset
        end = self.log.next_offset
        while offset < end:
            chunk = self.log.read(offset, LOAD_CHUNK_BYTES)
            if not chunk:
                break
            pos = 0
            while pos < len(chunk):
                header = parse_header(chunk, pos)
                size = header.size_bytes
                if pos + size > len(chunk):
                    break
                if not header.is_control:
                    for record in DefaultRecordBatch(chunk[pos : pos + size]):
                        if record.offset < offset:
                            continue
                        try:
                            key, value = decode_record(record.key, record.value)
                        except UnknownRecordType as e:
                            log.warning(
                                "skipping unknown record type",
                                shard=self.shard_id,
                                offset=record.offset,
                                error=str(e),
                            )
                            continue
                        replay(key, value, now_ms)
                        count += 1
                offset = header.last_offset + 1
                pos += size
            await asyncio.sleep(0)
        self.loaded_records = count
        self.state = ShardState.ACTIVE
        now_ms = self.clock_ms()
        self._apply(self.shard.on_loaded(now_ms), now_ms)
        self.load_time_s = time.monotonic() - started
        if self.metrics is not None:
            self.metrics.partition_load.observe(self.load_time_s)

    async def close(self) -> None:
        self.state = ShardState.CLOSED
        self.timer.cancel_all()
        self._seal()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.log is not None:
            self.log.close()

    # -- events ----------------------------------------------------------------------------

    def run(self, event: Callable[[int], Result]) -> None:
        """Run one event now. Raises NotActive while loading, failed or closed."""
        if self.state is not ShardState.ACTIVE:
            raise NotActive(self.state)
        now_ms = self.clock_ms()
        if self.metrics is None:
            self._apply(event(now_ms), now_ms)
            return
        started = time.perf_counter()
        self._apply(event(now_ms), now_ms)
        self.metrics.event_processing.observe(time.perf_counter() - started)

    def fire_timer(self, callback: TimerCallback) -> None:
        if self.state is ShardState.ACTIVE:
            now_ms = self.clock_ms()
            self._apply(callback(now_ms), now_ms)

    def _apply(self, result: Result, now_ms: int) -> None:
        shard = self.shard
        for key, value in result.records:
            shard.replay(key, value, now_ms)
        written = (
            result.records + result.applied_records if result.applied_records else result.records
        )
        if not written and self._batch is None and self._inflight == 0:
            # Nothing written now and nothing in flight: answer at once.
            for reply, response in result.replies:
                reply(response)
            return
        batch = self._batch
        if batch is None:
            batch = self._batch = _Batch()
            asyncio.get_running_loop().call_soon(self._seal)
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
            builder = DefaultRecordBatchBuilder(
                magic=2,
                compression_type=0,
                is_transactional=0,
                producer_id=-1,
                producer_epoch=-1,
                base_sequence=-1,
                batch_size=1 << 30,
            )
            timestamp = self.clock_ms()
            for delta, (key, value) in enumerate(batch.records):
                builder.append(delta, timestamp=timestamp, key=key, value=value, headers=[])
            data = bytearray(builder.build())
            try:
                base = log_.append(data, [parse_header(data)])
            except (OSError, RecordError) as e:
                self._fail(batch, e)
                return
            last_offset = base + len(batch.records) - 1
        if last_offset < log_.durable_offset:
            for reply, response in batch.replies:
                reply(response)
            return
        self._inflight += 1
        task = asyncio.ensure_future(self._deliver_when_durable(batch, last_offset))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver_when_durable(self, batch: _Batch, last_offset: int) -> None:
        assert self.log is not None
        started = time.perf_counter()
        try:
            await self.committer.wait_durable(self.log, last_offset)
        except Exception as e:  # fsync failed, log closed, committer closed
            self._inflight -= 1
            self._fail(batch, e)
            return
        self._inflight -= 1
        if self.metrics is not None:
            self.metrics.event_purgatory.observe(time.perf_counter() - started)
        for reply, response in batch.replies:
            reply(response)

    def _fail(self, batch: _Batch, error: BaseException) -> None:
        log.error("shard write failed; reloading", shard=self.shard_id, error=str(error))
        failure = StorageFailure(str(error))
        for reply, _ in batch.replies:
            reply(failure)
        if self.state is ShardState.ACTIVE:
            self.state = ShardState.FAILED
            task = asyncio.ensure_future(self._reload())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _reload(self) -> None:
        try:
            await self.load()
        except Exception as e:
            log.error("shard reload failed", shard=self.shard_id, error=str(e))
            self.state = ShardState.FAILED
