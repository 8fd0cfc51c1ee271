"""Compaction of topic partitions stored in PostgreSQL (serve --cluster): Kafka's log
cleaner over the rows of `partition_batches`, with the local cleaner's rules
(storage/compaction_rules.py: the offset map, the fate of each batch, when a log is due).
topics/compaction.py's TopicCompactor decides when, as for a local log.

Theory of operation
-------------------
A pass over one partition (`compact`) reads its committed rows twice, a page at a time in
offset order: first every row below the high watermark it started at, for the offset map
(each key's latest offset, producer ids' latest batches); then the rows below the pass's
end offset, each given to `filter_batch`, which keeps it, rewrites it (records cut out, a
delete horizon stamped) or drops it. A rewritten batch keeps its base offset and last
offset delta, so its row keeps its key: the pass UPDATEs that row's bytes, or DELETEs a
row that lost everything. Offsets never change. Rows appended meanwhile lie past the
offsets read and are newer than all of them: they only make the pass more conservative.

The last committed batch is never cleaned (the local cleaner never cleans the active
segment): the next offset a takeover computes is max(last_offset) + 1, so the row holding
the log end must stay.

Only the lease owner compacts, and only while its lease is at the epoch the log was loaded
at: every page of changes is written in one transaction that runs FENCED_WRITE_GUARD first
(a stale owner's pass fails with PartitionFenced and writes nothing more). The pages go in
offset order and each is correct on its own (a record goes only for a later one of its key,
which stays or goes in the same or a later page; a tombstone goes in the same page as, or a
later page than, every older record of its key), so a pass cut short by a takeover, a crash
or the database going away leaves a log that a reader may consume, and the next pass
(the new owner's) finishes the work.

The in-memory tail cache of the log (partition_log.py) gets the same rewrite once a page
commits, and the log's generation moves (the lag scrape's cache of timestamps).

When (Kafka's LogCleanerManager, per batch here instead of per segment): `cleanable_range`
sums the bytes of the rows below the end of the last pass (clean) and from there to the
end offset (dirty); the end offset is the base offset of the first dirty batch holding a
record newer than min.compaction.lag.ms, else the last committed batch's; a pass is overdue
when the first dirty batch is older than max.compaction.lag.ms.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg

from groupcoord.protocol.batches import parse_header
from groupcoord.storage import CompactionStats
from groupcoord.storage.compaction_rules import (
    LONG_MAX,
    CleanableRange,
    OffsetMap,
    filter_batch,
)
from groupcoord.storage.txn_cleaning import TxnCleaning

from .partition_log import PgPartitionLog
from .schema import FENCED_WRITE_GUARD

# Rows read per query, and rows changed per transaction.
PAGE_ROWS = 500

_LAST_BASE = """
SELECT base_offset FROM partition_batches
 WHERE topic_id = $1 AND partition = $2 AND base_offset < $3
 ORDER BY base_offset DESC LIMIT 1
"""
# Over the rows [log start $3, last batch $4): bytes below the first dirty offset $5,
# the first dirty batch newer than $6 (min.compaction.lag.ms), the first dirty batch's max
# timestamp. octet_length of an out-of-line value reads its pointer, not its bytes.
_CLEANABLE = """
WITH r AS (
  SELECT base_offset, max_timestamp, octet_length(batch) AS size FROM partition_batches
   WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3 AND base_offset < $4
)
SELECT coalesce((SELECT sum(size) FROM r WHERE base_offset < $5), 0),
       (SELECT min(base_offset) FROM r WHERE base_offset >= $5 AND max_timestamp > $6),
       (SELECT max_timestamp FROM r WHERE base_offset >= $5 ORDER BY base_offset LIMIT 1)
"""
_DIRTY_BYTES = """
SELECT coalesce(sum(octet_length(batch)), 0) FROM partition_batches
 WHERE topic_id = $1 AND partition = $2 AND base_offset >= $3 AND base_offset < $4
"""
_PAGE = """
SELECT batch FROM partition_batches
 WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3 AND base_offset >= $4
   AND base_offset < $5
 ORDER BY base_offset LIMIT $6
"""
_UPDATE = """
UPDATE partition_batches p SET batch = u.batch
  FROM unnest($3::bigint[], $4::bytea[]) AS u (base_offset, batch)
 WHERE p.topic_id = $1 AND p.partition = $2 AND p.base_offset = u.base_offset
"""
_DELETE = """
DELETE FROM partition_batches
 WHERE topic_id = $1 AND partition = $2 AND base_offset = ANY($3::bigint[])
"""


@dataclass(slots=True)
class StoredCompaction:
    """What one pass did: its figures (a row counts as a segment) and the offset where it
    ended (the first dirty offset of the next pass), with the ABORT markers it dropped
    (producer id, offset) for the aborted-transactions index."""

    stats: CompactionStats
    end_offset: int
    removed_abort_markers: list[tuple[int, int]] = field(default_factory=list)


async def cleanable_range(
    pool: asyncpg.Pool,
    partition_log: PgPartitionLog,
    first_dirty_offset: int,
    now_ms: int,
    min_lag_ms: int = 0,
    max_lag_ms: int = LONG_MAX,
) -> CleanableRange:
    """The module docstring's rule over the committed rows of `partition_log`, whose rows
    below `first_dirty_offset` (where the last pass ended) are clean; an offset outside the
    log means none is."""
    topic_id, partition = partition_log.topic_id, partition_log.partition
    start = partition_log.log_start_offset
    if not start <= first_dirty_offset <= partition_log.next_offset:
        first_dirty_offset = start
    async with pool.acquire() as connection:
        last_base = await connection.fetchval(
            _LAST_BASE, topic_id, partition, partition_log.durable_offset
        )
        if last_base is None:
            return CleanableRange(first_dirty_offset, start, 0, 0, False)
        newer_than = now_ms - min_lag_ms if min_lag_ms > 0 else LONG_MAX
        clean_bytes, lag_end, first_ms = await connection.fetchrow(
            _CLEANABLE, topic_id, partition, start, last_base, first_dirty_offset, newer_than
        )
        end_offset = last_base if lag_end is None else lag_end
        dirty_bytes = 0
        if end_offset > first_dirty_offset:
            dirty_bytes = await connection.fetchval(
                _DIRTY_BYTES, topic_id, partition, first_dirty_offset, end_offset
            )
    clean_until_ms = now_ms - max(max_lag_ms, 0)
    # Kafka ignores batches without a timestamp (<= 0) here.
    overdue = clean_until_ms > 0 and first_ms is not None and 0 < first_ms < clean_until_ms
    return CleanableRange(first_dirty_offset, end_offset, clean_bytes, dirty_bytes, overdue)


async def compact(
    pool: asyncpg.Pool,
    partition_log: PgPartitionLog,
    now_ms: int,
    tombstone_retention_ms: int,
    end_offset: int,
    aborted_txns: list[tuple[int, int, int]],
) -> StoredCompaction:
    """One pass (module docstring) over the rows below `end_offset` (at most the last stable
    offset: every transaction there is decided), with Kafka's rules for a data topic:
    tombstones kept for `tombstone_retention_ms` after the pass that first cleans them
    (KIP-534), `aborted_txns` (producer id, first offset, marker offset) for the
    transactional rules. Raises PartitionFenced when the lease moved (what earlier pages
    wrote stays), asyncpg errors when the database fails."""
    if tombstone_retention_ms < 0:
        raise ValueError("tombstone_retention_ms must be >= 0")
    durable = partition_log.durable_offset
    end_offset = min(end_offset, durable)
    txn = TxnCleaning(aborted_txns, now_ms, tombstone_retention_ms)
    offsets = OffsetMap(txn)
    async for batch in _rows(pool, partition_log, durable):
        header = parse_header(batch)
        offsets.add(header, batch, header.base_offset < end_offset)
    rules = offsets.rules(now_ms, tombstone_retention_ms, delete_horizon=True)
    rows = rows_after = bytes_before = bytes_after = 0
    kept = dropped = tombstones = 0
    changes: dict[int, bytes | None] = {}
    async for batch in _rows(pool, partition_log, end_offset):
        header = parse_header(batch)
        result, k, d, t = filter_batch(header, batch, rules, -1)
        kept, dropped, tombstones = kept + k, dropped + d, tombstones + t
        rows += 1
        bytes_before += len(batch)
        if result is not None:
            rows_after += 1
            bytes_after += len(result)
        if result is not batch:
            changes[header.base_offset] = result
            if len(changes) >= PAGE_ROWS:
                await _write(pool, partition_log, changes)
                changes = {}
    if changes:
        await _write(pool, partition_log, changes)
    stats = CompactionStats(rows, rows_after, bytes_before, bytes_after, kept, dropped, tombstones)
    return StoredCompaction(stats, end_offset, txn.removed_abort_markers)


async def _rows(
    pool: asyncpg.Pool, partition_log: PgPartitionLog, below: int
) -> AsyncIterator[bytes]:
    """The committed batches of `partition_log` from its log start to `below` (exclusive
    of the batch starting there), a page per query, in offset order."""
    topic_id, partition = partition_log.topic_id, partition_log.partition
    after = -1
    while True:
        async with pool.acquire() as connection:
            page = await connection.fetch(
                _PAGE,
                topic_id,
                partition,
                partition_log.log_start_offset,
                after + 1,
                below,
                PAGE_ROWS,
            )
        for row in page:
            yield bytes(row[0])
        if len(page) < PAGE_ROWS:
            return
        after = parse_header(page[-1][0]).base_offset


async def _write(
    pool: asyncpg.Pool, partition_log: PgPartitionLog, changes: dict[int, bytes | None]
) -> None:
    """One page of rewrites and deletions, fenced by the log's lease epoch; then the same in
    the log's memory."""
    topic_id, partition = partition_log.topic_id, partition_log.partition
    updates = [(base, data) for base, data in changes.items() if data is not None]
    deletes = [base for base, data in changes.items() if data is None]
    async with pool.acquire() as connection, connection.transaction():
        allowed = await connection.fetchval(
            FENCED_WRITE_GUARD, partition_log.resource, partition_log.node_id, partition_log.epoch
        )
        if allowed is None:
            raise partition_log.fence("the lease moved")
        if updates:
            await connection.execute(
                _UPDATE,
                topic_id,
                partition,
                [base for base, _ in updates],
                [data for _, data in updates],
            )
        if deletes:
            await connection.execute(_DELETE, topic_id, partition, deletes)
    partition_log.rewritten(changes)
