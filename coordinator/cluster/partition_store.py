"""Topic partitions stored in PostgreSQL (cluster mode, issue 22 item 2b): record batches as
rows, exactly as sent (base offset and leader epoch stamped in, as the local log stores
them), so acknowledged data survives the loss of any node.

Why here and not in storage/: every write runs the cluster's FENCED_WRITE_GUARD
(coordinator/cluster/schema.py) first, and storage/ may import nothing of coordinator/
(an import-linter contract); the store is the cluster's, the local log stays storage's.

Tables. `partition_batches` holds one row per batch keyed by (topic id, partition,
base_offset), with its last offset, max timestamp and producer id as columns (reads by
offset, retention by time, the producer-state load at takeover) and the batch bytes stored
uncompressed out of line (STORAGE EXTERNAL: batches are compressed by producers already,
and a takeover reads the first 61 bytes of each producer's batch without detoasting it
whole). `partition_starts` holds the log start offset that delete records or retention
moved. Rows are keyed by the topic's id (the metadata store's), not its name: a topic
deleted and created again under the same name (the same lease resource) never meets rows
of the old one, even those its old owner wrote or failed to drop in the race window; the
`topic` name column is for people reading the tables. A database of the name-keyed schema
is migrated at start (PARTITION_MIGRATION); rows of deleted topics that their owner could
not drop are swept (`drop_orphans`). The next offset of a partition is max(last_offset) + 1,
or the log start when no row is left.

Group commit. `append` (PgPartitionLog) assigns offsets in memory; a waiter
(`wait_durable`) starts a round if none runs. A round is ONE database transaction for
every partition that has batches not yet committed: for each, FENCED_WRITE_GUARD with its
resource `partition:<topic>:<p>` and the epoch the log was loaded at (a round of several
partitions runs the guard for all of them in one statement: the same condition and lock,
one round trip instead of one per partition); the batches of the partitions whose guard
returned a row are written together by binary COPY. A partition whose guard returned none
is fenced (its appends fail with PartitionFenced and none of its rows is written); the
others commit. Appends made while a round runs go in the next one.

Database unavailable (restart, failover, network). A round that fails for any reason but
a refused guard is retried with backoff, the waiters kept waiting: appends wait, then
resume. The retry writes the same rows again by INSERT ... ON CONFLICT DO NOTHING (COPY
has no such clause): a commit whose acknowledgement was lost is not written twice, and
another writer can never have written those offsets at our epoch (a lease that moved
makes the guard refuse).

Takeover. Ownership moves by updating the lease row, which waits for the old owner's
in-flight round (its guard holds the row FOR SHARE): once the new owner holds the lease,
every row the old owner will ever commit is there, and `load` reads the tail state: log
start, next offset and the headers of the batches that carry a producer id (with control
batches whole) for the producer state. An old owner stopped or cut off inside its round's
COPY would hold that lock as long as its connection lives (PostgreSQL ends no transaction
waiting for its client's data): the acquiring node terminates that backend
(leases.py, "Stale lock holders"), so the round is never committed, and COPY stays (a
round by INSERT ... unnest would only narrow the window to a half-sent statement).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass, field

import asyncpg
import structlog

from groupcoord.protocol.batches import (
    ATTRIBUTES_AT,
    CONTROL_MASK,
    HEADER_SIZE,
    BatchHeader,
    parse_header,
    record_timestamps,
)
from groupcoord.storage import CleanableRange, CommitterClosed, LogConfig, OffsetOutOfRange
from groupcoord.storage.health import StorageHealth

from . import partition_compaction
from .partition_compaction import StoredCompaction
from .partition_log import (
    TAIL_CACHE_BYTES_DEFAULT,
    NotInMemory,
    PartitionFenced,
    PgPartitionLog,
)
from .schema import FENCED_WRITE_GUARD, SCHEMA_DDL

log = structlog.get_logger("groupcoord.cluster")

# Serialises the DDL of nodes starting together (CREATE TABLE IF NOT EXISTS races).
_DDL_LOCK_KEY = 0x67635F7061727473  # "gc_parts"

PARTITION_DDL = """
CREATE TABLE IF NOT EXISTS partition_batches (
    topic_id       uuid NOT NULL,
    partition      integer NOT NULL,
    base_offset    bigint NOT NULL,
    last_offset    bigint NOT NULL,
    max_timestamp  bigint NOT NULL,
    producer_id    bigint NOT NULL,
    batch          bytea NOT NULL,
    topic          text NOT NULL,
    PRIMARY KEY (topic_id, partition, base_offset)
);
ALTER TABLE partition_batches ALTER COLUMN batch SET STORAGE EXTERNAL;
CREATE TABLE IF NOT EXISTS partition_starts (
    topic_id          uuid NOT NULL,
    partition         integer NOT NULL,
    log_start_offset  bigint NOT NULL,
    topic             text NOT NULL,
    PRIMARY KEY (topic_id, partition)
);
"""

# Databases of the first schema (session 17: rows keyed by topic name) get the topic id of
# the topic of that name in the metadata store; rows of topics it no longer holds (deleted,
# their rows never dropped) go. Runs once, under the DDL lock, before PARTITION_DDL.
PARTITION_MIGRATION = """
DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['partition_batches', 'partition_starts'] LOOP
    IF to_regclass(t) IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM pg_attribute
         WHERE attrelid = to_regclass(t) AND attname = 'topic_id' AND NOT attisdropped) THEN
      EXECUTE format('ALTER TABLE %I ADD COLUMN topic_id uuid', t);
      IF to_regclass('topics') IS NOT NULL THEN
        EXECUTE format('UPDATE %I r SET topic_id = m.topic_id FROM topics m'
                       ' WHERE m.name = r.topic', t);
      END IF;
      EXECUTE format('DELETE FROM %I WHERE topic_id IS NULL', t);
      EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', t, t || '_pkey');
      EXECUTE format('ALTER TABLE %I ALTER COLUMN topic_id SET NOT NULL', t);
      IF t = 'partition_batches' THEN
        ALTER TABLE partition_batches ADD PRIMARY KEY (topic_id, partition, base_offset);
      ELSE
        ALTER TABLE partition_starts ADD PRIMARY KEY (topic_id, partition);
      END IF;
    END IF;
  END LOOP;
END $$;
"""

# The columns rows are written with (a migrated table has them in another order).
_ROW_COLUMNS = (
    "topic_id",
    "partition",
    "base_offset",
    "last_offset",
    "max_timestamp",
    "producer_id",
    "batch",
    "topic",
)

_INSERT_ROWS = f"""
INSERT INTO partition_batches ({", ".join(_ROW_COLUMNS)})
SELECT * FROM unnest($1::uuid[], $2::integer[], $3::bigint[], $4::bigint[], $5::bigint[],
                     $6::bigint[], $7::bytea[], $8::text[])
ON CONFLICT DO NOTHING
"""

# FENCED_WRITE_GUARD (schema.py) for every partition of a round in one statement: the
# same condition per resource and the same FOR SHARE lock on each lease row, one round trip
# instead of one per partition (a round trip costs ms on a loaded machine). Rows are locked
# in resource order, as the lease renewal (leases.py) and the shards' rounds lock them, so a
# round and a renewal never deadlock.
_FENCED_WRITE_GUARD_MANY = """
SELECT l.resource FROM leases l
  JOIN unnest($1::text[], $2::integer[], $3::bigint[]) AS w (resource, owner_node, epoch)
    ON l.resource = w.resource AND l.owner_node = w.owner_node AND l.epoch = w.epoch
 ORDER BY l.resource
   FOR SHARE OF l
"""

_LOAD_START = "SELECT log_start_offset FROM partition_starts WHERE topic_id = $1 AND partition = $2"
_LOAD_END = """
SELECT last_offset FROM partition_batches WHERE topic_id = $1 AND partition = $2
 ORDER BY base_offset DESC LIMIT 1
"""
# Headers of the batches that carry a producer id, control batches whole: what the producer
# state (coordinator/topics/producers.py) is rebuilt from.
_LOAD_PRODUCER_HEADERS = f"""
SELECT substring(batch FROM 1 FOR {HEADER_SIZE}),
       CASE WHEN get_byte(batch, {ATTRIBUTES_AT + 1}) & {CONTROL_MASK} <> 0 THEN batch END
  FROM partition_batches
 WHERE topic_id = $1 AND partition = $2 AND base_offset >= $3 AND producer_id <> -1
   AND last_offset >= $4
 ORDER BY base_offset
"""
# The batches from the one containing $3 on, below $4, at most $5 rows; with the bytes
# before each, so the caller stops at max bytes without reading further rows' bytes twice.
_READ = """
SELECT batch FROM partition_batches
 WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3 AND base_offset < $4
   AND base_offset >= coalesce((SELECT base_offset FROM partition_batches
                                 WHERE topic_id = $1 AND partition = $2 AND base_offset <= $3
                                 ORDER BY base_offset DESC LIMIT 1), $3)
 ORDER BY base_offset
 LIMIT $5
"""
# ListOffsets: the first batch (offset order) holding a timestamp >= $5, and the batch with
# the largest max timestamp (the earliest of equals).
_FIRST_AT_OR_AFTER = """
SELECT batch FROM partition_batches
 WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3 AND base_offset < $4
   AND max_timestamp >= $5
 ORDER BY base_offset LIMIT 1
"""
_LARGEST_TIMESTAMP = """
SELECT batch FROM partition_batches
 WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3 AND base_offset < $4
 ORDER BY max_timestamp DESC, base_offset LIMIT 1
"""
# The lag scrape: the header of the batch holding each offset of $3 (the first batch whose
# last offset is at or above it: the next one when compaction left a gap), at most one row
# per offset, each found from the primary key as _READ finds its first batch.
_HEADERS_AT = f"""
SELECT o.offset_, (
  SELECT substring(batch FROM 1 FOR {HEADER_SIZE}) FROM partition_batches
   WHERE topic_id = $1 AND partition = $2 AND last_offset >= o.offset_ AND base_offset < $4
     AND base_offset >= coalesce((SELECT base_offset FROM partition_batches
                                   WHERE topic_id = $1 AND partition = $2
                                     AND base_offset <= o.offset_
                                   ORDER BY base_offset DESC LIMIT 1), o.offset_)
   ORDER BY base_offset LIMIT 1)
  FROM unnest($3::bigint[]) AS o (offset_)
"""
_UPSERT_START = """
INSERT INTO partition_starts (topic_id, partition, log_start_offset, topic) VALUES ($1, $2, $3, $4)
ON CONFLICT (topic_id, partition) DO UPDATE SET log_start_offset = excluded.log_start_offset
 WHERE partition_starts.log_start_offset < excluded.log_start_offset
"""
_DELETE_BELOW = """
DELETE FROM partition_batches WHERE topic_id = $1 AND partition = $2 AND last_offset < $3
"""
_RETENTION_BY_TIME = """
SELECT base_offset FROM partition_batches
 WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3 AND base_offset < $4
   AND max_timestamp >= $5
 ORDER BY base_offset LIMIT 1
"""
# Kafka's rule for retention.bytes: the oldest batch goes while what stays after it is at
# least retention.bytes; so the new start is the first batch after which less stays.
_RETENTION_BY_BYTES = """
SELECT base_offset FROM (
  SELECT base_offset, octet_length(batch) AS size,
         sum(octet_length(batch)) OVER (ORDER BY base_offset DESC) AS from_here
    FROM partition_batches WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3
) s WHERE from_here - size < $4 ORDER BY base_offset LIMIT 1
"""
# Topic ids that have rows but no topic in the metadata store (`topics`): rows of a deleted
# topic that its owner could not drop (it lost its lease first). The distinct ids are found
# by skipping through the primary key, one index probe per topic id.
_ORPHAN_IDS = """
WITH RECURSIVE ids AS (
  (SELECT topic_id FROM partition_batches ORDER BY topic_id LIMIT 1)
  UNION ALL
  SELECT (SELECT b.topic_id FROM partition_batches b WHERE b.topic_id > ids.topic_id
           ORDER BY b.topic_id LIMIT 1)
    FROM ids WHERE ids.topic_id IS NOT NULL
)
SELECT topic_id FROM ids WHERE topic_id IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM topics t WHERE t.topic_id = ids.topic_id)
UNION
SELECT topic_id FROM partition_starts s
 WHERE NOT EXISTS (SELECT 1 FROM topics t WHERE t.topic_id = s.topic_id)
"""
_DROP_IDS_BATCHES = "DELETE FROM partition_batches WHERE topic_id = ANY($1::uuid[])"
_DROP_IDS_STARTS = "DELETE FROM partition_starts WHERE topic_id = ANY($1::uuid[])"
_DROP_BATCHES = "DELETE FROM partition_batches WHERE topic_id = $1 AND partition = $2"
_DROP_START = "DELETE FROM partition_starts WHERE topic_id = $1 AND partition = $2"

# The bytes one round writes at most (the rest go in the next): a producer far ahead of the
# database would otherwise make each round bigger than the last, until one outlasts the
# round timeout and is written again, bigger still.
ROUND_BYTES_MAX = 8 * 1024 * 1024

# Rows a read fetches at most per query (a fetch's max bytes usually ends it sooner).
_READ_ROWS_MAX = 500
_RETRY_FIRST_S = 0.05
_RETRY_MAX_S = 1.0


@dataclass(slots=True)
class LoadedPartition:
    """A partition as `load` found it: the log to append to and the producer batches'
    (header, whole control batch or None) in offset order, for ProducerStates.from_headers."""

    log: PgPartitionLog
    producer_headers: list[tuple[BatchHeader, bytes | None]]
    load_seconds: float


@dataclass(slots=True)
class _Waiter:
    offset: int
    future: asyncio.Future[None]


@dataclass(slots=True)
class _Dirty:
    waiters: list[_Waiter] = field(default_factory=list)


async def ensure_partition_schema(connection: asyncpg.Connection) -> None:
    """Create the cluster's shared tables and the partition tables (idempotent; nodes
    starting together take turns)."""
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", _DDL_LOCK_KEY)
        await connection.execute(SCHEMA_DDL)
        await connection.execute(PARTITION_MIGRATION)
        await connection.execute(PARTITION_DDL)


class PgPartitionStore:
    """The partitions this node leads, written in group-commit rounds (module docstring).

    Also the data plane's committer for them: `wait_durable(log, offset)` as
    storage.GroupCommitter offers it for local logs. Event loop only."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        node_id: int,
        *,
        tail_cache_bytes: int = TAIL_CACHE_BYTES_DEFAULT,
        health: StorageHealth | None = None,
        round_timeout_s: float = 30.0,
    ) -> None:
        """`round_timeout_s`: a round not committed by then (a connection cut off without
        a reset) is abandoned on its connection and retried on another."""
        self._pool = pool
        self._round_timeout_s = round_timeout_s
        self.node_id = node_id
        self._tail_cache_bytes = tail_cache_bytes
        self.health = health if health is not None else StorageHealth()
        self._dirty: dict[PgPartitionLog, _Dirty] = {}
        self._round: asyncio.Task[None] | None = None
        self._closed = False
        # Completed rounds and the rows they wrote (metrics; tests count batching).
        self.rounds = 0
        self.rows_written = 0
        self.retries = 0

    # -- loading ----------------------------------------------------------------------

    async def load(
        self,
        topic: str,
        partition: int,
        epoch: int,
        config: LogConfig | None = None,
        *,
        topic_id: uuid.UUID | None = None,
    ) -> LoadedPartition:
        """The partition's tail state, read after this node acquired its lease at `epoch`
        (pg-core's lease code; the lease row exists): log start, next offset and the
        producer batches' headers. Appends go to the returned log. Its rows are the topic
        id's (`topic_id`: the topic's in the metadata store; None: one made of the name,
        for tools and tests that have no metadata store)."""
        started = time.perf_counter()
        if topic_id is None:
            topic_id = name_topic_id(topic)
        async with (
            self._pool.acquire() as connection,
            connection.transaction(isolation="repeatable_read", readonly=True),
        ):
            start = await connection.fetchval(_LOAD_START, topic_id, partition) or 0
            last = await connection.fetchval(_LOAD_END, topic_id, partition)
            next_offset = max(start, -1 if last is None else last + 1)
            rows = await connection.fetch(
                _LOAD_PRODUCER_HEADERS, topic_id, partition, _lowest_base(start), start
            )
        headers = [(parse_header(row[0]), row[1]) for row in rows]
        partition_log = PgPartitionLog(
            topic,
            partition,
            topic_id=topic_id,
            node_id=self.node_id,
            epoch=epoch,
            log_start_offset=start,
            next_offset=next_offset,
            config=config,
            tail_cache_bytes=self._tail_cache_bytes,
        )
        partition_log.store = self
        return LoadedPartition(partition_log, headers, time.perf_counter() - started)

    # -- durability (the committer interface) -----------------------------------------

    def track(self, partition_log: PgPartitionLog) -> None:
        """Nothing to track: every log with unflushed batches is written by the next round."""

    async def wait_durable(self, partition_log: PgPartitionLog, offset: int) -> None:
        """Return once every offset up to and including `offset` is committed. Raises
        PartitionFenced when the lease moved before it was, CommitterClosed after close,
        ValueError for an offset not yet appended."""
        if partition_log.durable_offset > offset:
            return
        if self._closed:
            raise CommitterClosed("partition store is closed")
        if partition_log.fenced:
            raise partition_log.fence("fenced earlier")
        if offset >= partition_log.next_offset:
            raise ValueError(f"offset {offset} is not appended (next {partition_log.next_offset})")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        dirty = self._dirty.get(partition_log)
        if dirty is None:
            dirty = self._dirty[partition_log] = _Dirty()
        dirty.waiters.append(_Waiter(offset, future))
        if self._round is None:
            self._round = asyncio.get_running_loop().create_task(self._run_rounds())
        await future

    async def flush_all_now(self, logs: object = None) -> None:
        """Wait for the round in flight (and the ones it chains) to end."""
        while self._round is not None:
            await asyncio.shield(self._round)

    async def close(self) -> None:
        """Stop: the waiters not yet answered fail with CommitterClosed."""
        self._closed = True
        if self._round is not None:
            self._round.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._round
        for dirty in self._dirty.values():
            for waiter in dirty.waiters:
                if not waiter.future.done():
                    waiter.future.set_exception(CommitterClosed("partition store is closed"))
        self._dirty.clear()

    async def _run_rounds(self) -> None:
        try:
            delay_s = _RETRY_FIRST_S
            after_failure = False
            while self._dirty and not self._closed:
                logs = list(self._dirty)
                # Rounds start at a different log each time: a round full before its
                # last logs (ROUND_BYTES_MAX) never starves the same ones.
                turn = self.rounds % len(logs)
                logs = logs[turn:] + logs[:turn]
                try:
                    refused = await self._write_round(logs, after_failure)
                except Exception as exc:
                    # Not a fencing answer: the database is away, slow past the round
                    # timeout or failed the round (asyncpg raises several kinds when a
                    # connection dies mid-COPY). Keep the waiters and write the same rows
                    # again (ON CONFLICT DO NOTHING).
                    self.retries += 1
                    log.warning("partition round failed, retrying", error=repr(exc))
                    await asyncio.sleep(delay_s)
                    delay_s = min(delay_s * 2, _RETRY_MAX_S)
                    after_failure = True
                    continue
                delay_s = _RETRY_FIRST_S
                after_failure = False
                self.rounds += 1
                for partition_log in logs:
                    self._settle(partition_log, partition_log in refused)
        finally:
            self._round = None

    async def _write_round(
        self, logs: list[PgPartitionLog], after_failure: bool
    ) -> set[PgPartitionLog]:
        """One transaction: guard every partition, insert the rows of those still ours
        (binary COPY; after a failed attempt INSERT ... ON CONFLICT DO NOTHING, since that
        attempt may have committed). Returns the refused (fenced) ones. Marks the rows
        committed only after COMMIT."""
        snapshot = _round_rows(logs, ROUND_BYTES_MAX)
        refused: set[PgPartitionLog] = {pl for pl in logs if pl.fenced}
        rows: list[tuple[uuid.UUID, int, int, int, int, int, bytes, str]] = []
        connection = await self._pool.acquire()
        try:
            async with asyncio.timeout(self._round_timeout_s):
                await self._write_rows(connection, snapshot, refused, rows, after_failure)
        except BaseException:
            # The connection may be mid-COPY or cut off: never reuse it.
            connection.terminate()
            raise
        finally:
            await self._pool.release(connection)
        self.rows_written += len(rows)
        for pl, count, target in snapshot:
            if pl not in refused and not pl.fenced:  # fenced meanwhile: nothing is ours
                pl.committed(count, target)
        return refused

    async def _write_rows(
        self,
        connection: asyncpg.Connection,
        snapshot: list[tuple[PgPartitionLog, int, int]],
        refused: set[PgPartitionLog],
        rows: list[tuple[uuid.UUID, int, int, int, int, int, bytes, str]],
        after_failure: bool,
    ) -> None:
        async with connection.transaction():
            if len(snapshot) == 1:
                pl = snapshot[0][0]
                guard = await connection.fetchval(
                    FENCED_WRITE_GUARD, pl.resource, pl.node_id, pl.epoch
                )
                allowed = {pl.resource} if guard is not None else set()
            elif snapshot:
                found = await connection.fetch(
                    _FENCED_WRITE_GUARD_MANY,
                    [pl.resource for pl, _, _ in snapshot],
                    [pl.node_id for pl, _, _ in snapshot],
                    [pl.epoch for pl, _, _ in snapshot],
                )
                allowed = {r[0] for r in found}
            else:
                allowed = set()
            for pl, count, _ in snapshot:
                if pl.resource not in allowed:
                    refused.add(pl)
                    continue
                topic_id, partition, topic = pl.topic_id, pl.partition, pl.topic
                rows.extend(
                    (
                        topic_id,
                        partition,
                        b.base_offset,
                        b.last_offset,
                        b.max_timestamp,
                        b.producer_id,
                        b.data,
                        topic,
                    )
                    for b in pl.unflushed[:count]
                )
            if rows and after_failure:
                await connection.execute(
                    _INSERT_ROWS, *(list(column) for column in zip(*rows, strict=True))
                )
            elif rows:
                await connection.copy_records_to_table(
                    "partition_batches", records=rows, columns=_ROW_COLUMNS
                )

    def _settle(self, partition_log: PgPartitionLog, refused: bool) -> None:
        dirty = self._dirty.get(partition_log)
        if dirty is None:
            return
        if refused:
            error = partition_log.fence("the lease moved")
            del self._dirty[partition_log]
            for waiter in dirty.waiters:
                if not waiter.future.done():
                    waiter.future.set_exception(error)
            return
        durable = partition_log.durable_offset
        kept = []
        for waiter in dirty.waiters:
            if waiter.offset < durable:
                if not waiter.future.done():
                    waiter.future.set_result(None)
            elif not waiter.future.cancelled():
                kept.append(waiter)
        if kept:
            dirty.waiters = kept
        else:
            del self._dirty[partition_log]

    # -- reading ----------------------------------------------------------------------

    async def read(self, partition_log: PgPartitionLog, offset: int, max_bytes: int) -> bytes:
        """As PartitionLog.read: from memory when it holds `offset`, else from the rows
        (committed ones only, below the high watermark)."""
        try:
            return partition_log.read(offset, max_bytes)
        except NotInMemory:
            pass
        end = partition_log.durable_offset
        async with self._pool.acquire() as connection:
            rows = await connection.fetch(
                _READ,
                partition_log.topic_id,
                partition_log.partition,
                offset,
                end,
                _READ_ROWS_MAX,
            )
        chunks: list[bytes] = []
        remaining = max_bytes
        for row in rows:
            batch = row[0]
            if chunks and len(batch) > remaining:
                break
            chunks.append(batch)
            remaining -= len(batch)
            if remaining <= 0:
                break
        return b"".join(chunks)

    async def offset_for_timestamp(
        self, partition_log: PgPartitionLog, timestamp_ms: int
    ) -> tuple[int, int] | None:
        """As PartitionLog.offset_for_timestamp, over the committed batches: (offset,
        timestamp) of the first record in offset order whose timestamp >= `timestamp_ms`."""
        batch = await self._fetch_batch(_FIRST_AT_OR_AFTER, partition_log, timestamp_ms)
        if batch is None:
            return None
        start = partition_log.log_start_offset
        for offset, timestamp in record_timestamps(batch):
            if timestamp >= timestamp_ms and offset >= start:
                return offset, timestamp
        return None

    async def max_timestamp(self, partition_log: PgPartitionLog) -> tuple[int, int] | None:
        """As PartitionLog.max_timestamp, over the committed batches (ListOffsets -3)."""
        batch = await self._fetch_batch(_LARGEST_TIMESTAMP, partition_log)
        if batch is None:
            return None
        best = parse_header(batch).max_timestamp
        fallback: tuple[int, int] | None = None
        for offset, timestamp in record_timestamps(batch):
            if timestamp == best:
                return offset, timestamp
            if fallback is None or timestamp > fallback[1]:
                fallback = (offset, timestamp)
        return fallback  # a producer's batch whose header max matched no record

    async def batch_headers_at(
        self, partition_log: PgPartitionLog, offsets: list[int]
    ) -> list[BatchHeader | None]:
        """The header of the committed batch holding each of `offsets` (the next batch past
        a gap; None past the high watermark), in one query (the lag scrape)."""
        async with self._pool.acquire() as connection:
            rows = await connection.fetch(
                _HEADERS_AT,
                partition_log.topic_id,
                partition_log.partition,
                offsets,
                partition_log.durable_offset,
            )
        found = {row[0]: row[1] for row in rows}
        return [
            None if found.get(offset) is None else parse_header(found[offset]) for offset in offsets
        ]

    async def _fetch_batch(
        self, query: str, partition_log: PgPartitionLog, *extra: object
    ) -> bytes | None:
        async with self._pool.acquire() as connection:
            batch = await connection.fetchval(
                query,
                partition_log.topic_id,
                partition_log.partition,
                partition_log.log_start_offset,
                partition_log.durable_offset,
                *extra,
            )
        return None if batch is None else bytes(batch)

    # -- compaction (partition_compaction.py) ------------------------------------------

    async def cleanable_range(
        self,
        partition_log: PgPartitionLog,
        first_dirty_offset: int,
        now_ms: int,
        min_lag_ms: int,
        max_lag_ms: int,
    ) -> CleanableRange:
        return await partition_compaction.cleanable_range(
            self._pool, partition_log, first_dirty_offset, now_ms, min_lag_ms, max_lag_ms
        )

    async def compact(
        self,
        partition_log: PgPartitionLog,
        now_ms: int,
        tombstone_retention_ms: int,
        end_offset: int,
        aborted_txns: list[tuple[int, int, int]],
    ) -> StoredCompaction:
        return await partition_compaction.compact(
            self._pool, partition_log, now_ms, tombstone_retention_ms, end_offset, aborted_txns
        )

    # -- delete records and retention -------------------------------------------------

    async def delete_records(self, partition_log: PgPartitionLog, offset: int) -> int:
        """Move the log start to `offset` (DeleteRecords; never backwards, at most the high
        watermark) and delete the rows wholly below it. Returns the new log start. Raises
        OffsetOutOfRange beyond the high watermark, PartitionFenced when the lease moved."""
        if offset > partition_log.durable_offset:
            raise OffsetOutOfRange(
                offset, partition_log.log_start_offset, partition_log.durable_offset
            )
        if offset > partition_log.log_start_offset:
            await self._move_start(partition_log, offset)
        return partition_log.log_start_offset

    async def apply_retention(self, partition_log: PgPartitionLog, now_ms: int) -> int:
        """Delete the oldest batches by the log's retention.ms and retention.bytes (Kafka's
        rules per batch instead of per segment; only committed batches). Returns the new log
        start offset."""
        config = partition_log.config
        start = partition_log.log_start_offset
        end = partition_log.durable_offset
        new_start = start
        async with self._pool.acquire() as connection:
            if config.retention_ms >= 0:
                kept = await connection.fetchval(
                    _RETENTION_BY_TIME,
                    partition_log.topic_id,
                    partition_log.partition,
                    start,
                    end,
                    now_ms - config.retention_ms,
                )
                new_start = max(new_start, end if kept is None else kept)
            if config.retention_bytes >= 0:
                kept = await connection.fetchval(
                    _RETENTION_BY_BYTES,
                    partition_log.topic_id,
                    partition_log.partition,
                    start,
                    config.retention_bytes,
                )
                new_start = max(new_start, end if kept is None else kept)
        new_start = min(new_start, end)
        if new_start > start:
            await self._move_start(partition_log, new_start)
        return partition_log.log_start_offset

    async def _move_start(self, partition_log: PgPartitionLog, offset: int) -> None:
        topic_id, partition = partition_log.topic_id, partition_log.partition
        async with self._pool.acquire() as connection, connection.transaction():
            allowed = await connection.fetchval(
                FENCED_WRITE_GUARD,
                partition_log.resource,
                partition_log.node_id,
                partition_log.epoch,
            )
            if allowed is None:
                raise partition_log.fence("the lease moved")
            await connection.execute(
                _UPSERT_START, topic_id, partition, offset, partition_log.topic
            )
            await connection.execute(_DELETE_BELOW, topic_id, partition, offset)
        partition_log.start_moved(offset)

    async def drop_orphans(self, seen_before: set[uuid.UUID]) -> set[uuid.UUID]:
        """Delete the rows of topic ids that the metadata store did not hold now nor at the
        sweep before (`seen_before`, what that one returned; _ORPHAN_IDS): no lease guards
        them, since no topic has that id any more and none ever will (a topic created again
        gets a new id). Two sweeps, since a node creates a topic in its image a moment
        before the store has it. Returns the orphan ids found, for the next sweep."""
        async with self._pool.acquire() as connection, connection.transaction():
            orphans = {row[0] for row in await connection.fetch(_ORPHAN_IDS)}
            gone = list(orphans & seen_before)
            if gone:
                await connection.execute(_DROP_IDS_BATCHES, gone)
                await connection.execute(_DROP_IDS_STARTS, gone)
                log.info("orphan partition rows dropped", topic_ids=[str(i) for i in gone])
        return orphans - seen_before

    async def drop_partition(self, partition_log: PgPartitionLog) -> None:
        """Delete a partition's rows (its topic was deleted), under the lease at the log's
        epoch. Raises PartitionFenced when the lease moved."""
        topic_id, partition, epoch = (
            partition_log.topic_id,
            partition_log.partition,
            partition_log.epoch,
        )
        resource = partition_log.resource
        async with self._pool.acquire() as connection, connection.transaction():
            if await connection.fetchval(FENCED_WRITE_GUARD, resource, self.node_id, epoch) is None:
                raise PartitionFenced(f"{resource} at epoch {epoch}: the lease moved")
            await connection.execute(_DROP_BATCHES, topic_id, partition)
            await connection.execute(_DROP_START, topic_id, partition)


def name_topic_id(topic: str) -> uuid.UUID:
    """The topic id of a partition loaded without one (`load`): made of its name."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"groupcoord-topic:{topic}")


def _round_rows(
    logs: list[PgPartitionLog], bytes_max: int
) -> list[tuple[PgPartitionLog, int, int]]:
    """(log, batches, offset after them) of what a round writes: the oldest unflushed
    batches of each log, in order, until `bytes_max` is reached (at least one batch)."""
    snapshot: list[tuple[PgPartitionLog, int, int]] = []
    budget = bytes_max
    for pl in logs:
        if pl.fenced or not pl.unflushed:
            continue
        if budget <= 0:
            break
        count = 0
        for batch in pl.unflushed:
            if count and len(batch.data) > budget:
                break
            budget -= len(batch.data)
            count += 1
        snapshot.append((pl, count, pl.unflushed[count - 1].last_offset + 1))
    return snapshot


def _lowest_base(log_start_offset: int) -> int:
    """A lower bound of the base offset of the batch holding the log start (a batch spans
    at most 2**31 offsets), so the load scans the primary key from there."""
    return max(0, log_start_offset - 2**31)
