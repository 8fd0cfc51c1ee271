"""One topic partition led by this node in cluster mode: the in-memory side of a partition
whose batches are stored in PostgreSQL (partition_store.py writes and reads the rows).

It offers what the data plane uses of a local PartitionLog (storage/log.py): `append`
assigns base offsets at once, as the local log does, and stamps them into the batches;
`durable_offset` (the high watermark) advances when the store's group-commit round that
carried the batches commits; `read` serves batches held in memory. Batches not yet
committed and the most recent committed ones (up to `tail_cache_bytes`) are held in
memory, so a consumer at the tail is served without a database round trip; an older
offset raises NotInMemory and the caller awaits `PgPartitionStore.read` instead (which
serves memory first). ListOffsets by timestamp, retention and delete records are the
store's too (`offset_for_timestamp`, `max_timestamp`, `apply_retention`,
`delete_records`, compaction: `cleanable_range_stored`, `compact_stored`): they read or
change rows.

Fencing. The log is bound to the lease epoch it was loaded at. When a round finds the
lease moved (FENCED_WRITE_GUARD refused), the store calls `fence`: the batches not yet
committed are dropped (next_offset returns to the durable offset), their waiters fail with
PartitionFenced and every later append raises it: the caller answers
NOT_LEADER_OR_FOLLOWER and the partition is unloaded; a new owner loads it from the rows.
"""

from __future__ import annotations

import uuid
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from groupcoord.protocol.batches import (
    LOG_OVERHEAD,
    BatchHeader,
    batch_size_at,
    parse_header,
    set_base_offset_and_leader_epoch,
)
from groupcoord.storage import LEADER_EPOCH, LogClosed, LogConfig, OffsetOutOfRange
from groupcoord.storage.errors import NotInMemory, PartitionFenced

# Committed batches kept in memory per partition for tail reads.
TAIL_CACHE_BYTES_DEFAULT = 8 * 1024 * 1024

__all__ = ["NotInMemory", "PartitionFenced", "PgPartitionLog", "StoredBatch"]


@dataclass(slots=True)
class StoredBatch:
    """One batch as stored: a row of partition_batches."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    producer_id: int
    data: bytes


class PgPartitionLog:
    """See the module docstring. Event loop only (no threads)."""

    __slots__ = (
        "__weakref__",
        "topic",
        "partition",
        "topic_id",
        "resource",
        "node_id",
        "epoch",
        "_config",
        "_log_start_offset",
        "_next_offset",
        "_durable_offset",
        "unflushed",
        "_tail",
        "_tail_bytes",
        "_tail_cache_bytes",
        "_fenced",
        "_closed",
        "_generation",
        "store",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        *,
        topic_id: uuid.UUID,
        node_id: int,
        epoch: int,
        log_start_offset: int,
        next_offset: int,
        config: LogConfig | None = None,
        tail_cache_bytes: int = TAIL_CACHE_BYTES_DEFAULT,
    ) -> None:
        """Use `PgPartitionStore.load`: the offsets are what the rows say."""
        self.topic = topic
        self.partition = partition
        # What its rows are keyed by: a topic deleted and created again under the same
        # name (and lease resource) never meets the old one's rows.
        self.topic_id = topic_id
        self.resource = f"partition:{topic}:{partition}"
        self.node_id = node_id
        self.epoch = epoch
        self._config = config if config is not None else LogConfig()
        self._log_start_offset = log_start_offset
        self._next_offset = next_offset
        self._durable_offset = next_offset
        # Appended, not yet committed, in offset order: the next round's rows.
        self.unflushed: list[StoredBatch] = []
        # Committed batches held for tail reads, in offset order (a list, for bisect;
        # trimmed in steps of a quarter of the bound so a trim is amortised).
        self._tail: list[StoredBatch] = []
        self._tail_bytes = 0
        self._tail_cache_bytes = tail_cache_bytes
        self._fenced: PartitionFenced | None = None
        self._closed = False
        # Moves at each compaction page (partition_compaction.py); distinct per load.
        self._generation = epoch << 32
        # The PgPartitionStore holding its rows (set by its `load`): the `*_stored` reads.
        self.store: Any = None

    # -- what the data plane reads ----------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def next_offset(self) -> int:
        """Log end offset: the offset the next appended record gets."""
        return self._next_offset

    @property
    def durable_offset(self) -> int:
        """Every offset below this is committed in PostgreSQL: the high watermark."""
        return self._durable_offset

    @property
    def config(self) -> LogConfig:
        return self._config

    def reconfigure(self, config: LogConfig) -> None:
        self._config = config

    @property
    def failed(self) -> bool:
        return self._fenced is not None

    @property
    def fenced(self) -> bool:
        return self._fenced is not None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def directory(self) -> str:
        """What health reports and logs name the log by (a local log's directory)."""
        return self.resource

    def close(self) -> None:
        self._closed = True

    # -- appending --------------------------------------------------------------------

    def append(self, batches: bytearray, headers: Sequence[BatchHeader]) -> int:
        """Append validated batches (their headers in order); returns the first one's base
        offset. Offsets (and the leader epoch) are stamped into `batches` in place, as the
        local log does; the rows are written by the store's next round. Raises
        PartitionFenced once the lease moved, LogClosed after close."""
        if self._fenced is not None:
            raise self._fenced
        if self._closed:
            raise LogClosed(f"{self.resource} is closed")
        if not headers:
            raise ValueError("append needs at least one batch")
        first_offset = offset = self._next_offset
        pos = 0
        rows = []
        for header in headers:
            size = header.batch_length + LOG_OVERHEAD
            if batch_size_at(batches, pos) != size:
                raise ValueError(f"batch at byte {pos} does not match its header")
            set_base_offset_and_leader_epoch(
                batches, pos, offset, header.batch_length, LEADER_EPOCH
            )
            last = offset + header.last_offset_delta
            data = bytes(batches) if len(headers) == 1 else bytes(batches[pos : pos + size])
            rows.append(StoredBatch(offset, last, header.max_timestamp, header.producer_id, data))
            offset = last + 1
            pos += size
        if pos != len(batches):
            raise ValueError(f"headers cover {pos} bytes of a {len(batches)} byte payload")
        self.unflushed.extend(rows)
        self._next_offset = offset
        return first_offset

    # -- what the store calls ---------------------------------------------------------

    def committed(self, count: int, target: int) -> None:
        """The first `count` unflushed batches, up to offset `target` (exclusive), are
        committed: the high watermark moves to `target` and they join the tail cache."""
        done = self.unflushed[:count]
        del self.unflushed[:count]
        self._durable_offset = max(self._durable_offset, target)
        tail = self._tail
        for row in done:
            tail.append(row)
            self._tail_bytes += len(row.data)
        if self._tail_bytes > self._tail_cache_bytes * 5 // 4:
            drop = 0
            while drop < len(tail) - 1 and self._tail_bytes > self._tail_cache_bytes:
                self._tail_bytes -= len(tail[drop].data)
                drop += 1
            del tail[:drop]

    def fence(self, reason: str) -> PartitionFenced:
        """The lease moved: drop what is not committed and refuse every later append.
        Returns the error the waiters get."""
        if self._fenced is None:
            self._fenced = PartitionFenced(f"{self.resource} at epoch {self.epoch}: {reason}")
        self.unflushed.clear()
        self._next_offset = self._durable_offset
        return self._fenced

    def start_moved(self, log_start_offset: int) -> None:
        """Delete records or retention moved the log start (committed by the store)."""
        if log_start_offset <= self._log_start_offset:
            return
        self._log_start_offset = log_start_offset
        tail = self._tail
        drop = 0
        while drop < len(tail) and tail[drop].last_offset < log_start_offset:
            self._tail_bytes -= len(tail[drop].data)
            drop += 1
        del tail[:drop]

    def rewritten(self, changes: dict[int, bytes | None]) -> None:
        """Compaction committed new bytes (None: the row is gone) for the batches at these
        base offsets (partition_compaction.py): the tail cache follows."""
        self._generation += 1
        tail = self._tail
        kept: list[StoredBatch] = []
        for row in tail:
            if row.base_offset not in changes:
                kept.append(row)
                continue
            data = changes[row.base_offset]
            self._tail_bytes -= len(row.data)
            if data is not None:
                self._tail_bytes += len(data)
                kept.append(
                    StoredBatch(
                        row.base_offset, row.last_offset, row.max_timestamp, row.producer_id, data
                    )
                )
        self._tail = kept

    # -- reading ----------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one containing `offset`, at most `max_bytes` except that
        the first is always whole (KIP-74), from memory: committed tail and batches not yet
        committed alike (the caller bounds what it serves by the high watermark, as with a
        local log). b"" at the log end; raises OffsetOutOfRange outside [log start, log
        end], NotInMemory when `offset` lies below what memory holds."""
        if offset < self._log_start_offset or offset > self._next_offset:
            raise OffsetOutOfRange(offset, self._log_start_offset, self._next_offset)
        if offset == self._next_offset:
            return b""
        chunks: list[bytes] = []
        remaining = max_bytes
        for row in self._rows_from(offset):
            size = len(row.data)
            if chunks and size > remaining:
                break
            chunks.append(row.data)
            remaining -= size
            if remaining <= 0:
                break
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    # -- what metrics and the lag scrape read of a local log -------------------------------

    @property
    def size_bytes(self) -> int:
        """The bytes held in memory (the rows are PostgreSQL's to count)."""
        return self._tail_bytes + sum(len(row.data) for row in self.unflushed)

    @property
    def generation(self) -> int:
        """Moves when compaction rewrites batches (what was read of them may differ)."""
        return self._generation

    def segments_snapshot(self) -> Any:
        """No segment files: the lag scrape reads headers one by one (`batch_headers`)."""
        raise NotInMemory(f"{self.resource}: no segments")

    def batch_headers(self, offset: int) -> Iterator[BatchHeader]:
        """Headers of the batches from the one holding `offset`, from memory (NotInMemory
        below it)."""
        for row in self._rows_from(offset):
            yield parse_header(row.data)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """Lookups by timestamp read rows: await `offset_for_timestamp_stored`."""
        raise NotInMemory(f"{self.resource}: lookups by timestamp read the database")

    def max_timestamp(self) -> tuple[int, int] | None:
        """Read rows: await `max_timestamp_stored`."""
        raise NotInMemory(f"{self.resource}: lookups by timestamp read the database")

    # What the data plane awaits after NotInMemory (the store's reads, committed rows only).

    async def read_stored(self, offset: int, max_bytes: int) -> bytes:
        return bytes(await self.store.read(self, offset, max_bytes))

    async def offset_for_timestamp_stored(self, timestamp_ms: int) -> tuple[int, int] | None:
        found: tuple[int, int] | None = await self.store.offset_for_timestamp(self, timestamp_ms)
        return found

    async def max_timestamp_stored(self) -> tuple[int, int] | None:
        found: tuple[int, int] | None = await self.store.max_timestamp(self)
        return found

    async def batch_headers_stored(self, offsets: list[int]) -> list[BatchHeader | None]:
        """The header of the batch holding each offset, from the rows (the lag scrape)."""
        found: list[BatchHeader | None] = await self.store.batch_headers_at(self, offsets)
        return found

    async def cleanable_range_stored(
        self, first_dirty_offset: int, now_ms: int, min_lag_ms: int, max_lag_ms: int
    ) -> Any:
        """partition_compaction.cleanable_range over the rows (a CleanableRange)."""
        return await self.store.cleanable_range(
            self, first_dirty_offset, now_ms, min_lag_ms, max_lag_ms
        )

    async def compact_stored(
        self,
        now_ms: int,
        tombstone_retention_ms: int,
        end_offset: int,
        aborted_txns: list[tuple[int, int, int]],
    ) -> Any:
        """partition_compaction.compact over the rows (a StoredCompaction)."""
        return await self.store.compact(
            self, now_ms, tombstone_retention_ms, end_offset, aborted_txns
        )

    def memory_start(self) -> int:
        """The lowest offset `read` serves from memory."""
        if self._tail:
            return self._tail[0].base_offset
        if self.unflushed:
            return self.unflushed[0].base_offset
        return self._next_offset

    def _rows_from(self, offset: int) -> Iterator[StoredBatch]:
        if offset < self.memory_start():
            raise NotInMemory(f"{self.resource}: offset {offset} is not held in memory")
        unflushed = self.unflushed
        tail = self._tail
        if tail and (not unflushed or offset < unflushed[0].base_offset):
            # The first batch whose last offset >= offset.
            yield from tail[bisect_left(tail, offset, key=_last_offset) :]
            yield from unflushed
        else:
            yield from unflushed[bisect_left(unflushed, offset, key=_last_offset) :]

    def __repr__(self) -> str:
        return (
            f"PgPartitionLog({self.resource} epoch={self.epoch} start={self._log_start_offset}"
            f" durable={self._durable_offset} next={self._next_offset})"
        )


def _last_offset(row: StoredBatch) -> int:
    return row.last_offset
