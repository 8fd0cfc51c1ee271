"""What a compaction pass decides of each record and batch, whatever stores the batches:
the offset map (each key's latest offset), the fate of each batch (`filter_batch`) and when
a log is due (`CleanableRange`). The local cleaner (cleaner.py) feeds it the batches of
segment files; serve --cluster's cleaner (coordinator/cluster/partition_compaction.py)
the rows of a partition stored in PostgreSQL. The rules themselves are cleaner.py's module
docstring's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from groupcoord.protocol.batch_rewrite import empty_batch, rebuild_batch, record_spans
from groupcoord.protocol.batches import DELETE_HORIZON_MASK, NO_PRODUCER_ID, BatchHeader

from .txn_cleaning import TxnCleaning

# Java's Long.MAX_VALUE: Kafka's "no limit" for LONG configs, and the largest timestamp.
LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """What a pass over a log would clean (Kafka's LogToClean): the batches below
    `end_offset`, of which those from `first_dirty_offset` on were not cleaned yet."""

    first_dirty_offset: int
    # Pass it to the pass: where cleaning stops (a local log's active segment's base
    # offset, or that of the first dirty segment or batch holding a record newer than
    # min.compaction.lag.ms).
    end_offset: int
    clean_bytes: int
    dirty_bytes: int
    # A dirty segment's (batch's) first batch is older than max.compaction.lag.ms.
    overdue: bool

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    def due(self, min_dirty_ratio: float) -> bool:
        """Kafka's grabFilthiestCompactedLog: dirty bytes to clean, and either more of
        them than `min_dirty_ratio` (min.cleanable.dirty.ratio) or an overdue segment."""
        return self.dirty_bytes > 0 and (self.overdue or self.dirty_ratio > min_dirty_ratio)


@dataclass(slots=True)
class OffsetMap:
    """The offset map of one pass, fed every batch in offset order (`add`): the batches
    to clean (`cleaned` True), then the later ones that only feed it (durable ones only:
    a record that a crash could still take away never supersedes anything). With `txn`,
    committed transactional records of the cleaned batches count as any record; aborted
    ones, and those of later batches (maybe undecided), never."""

    txn: TxnCleaning | None = None
    latest: dict[bytes, int] = field(default_factory=dict)  # key -> offset of its latest record
    # Keys of transactional records in the cleaned batches (the coordinator's rule): their
    # tombstones stay.
    pinned: set[bytes] = field(default_factory=set)
    last_batches: dict[int, int] = field(default_factory=dict)  # producer id -> last offset

    def add(self, header: BatchHeader, batch: bytes, cleaned: bool) -> None:
        if header.producer_id != NO_PRODUCER_ID:
            self.last_batches[header.producer_id] = header.last_offset
        if header.is_control:
            return
        txn = self.txn
        if txn is not None and header.is_transactional:
            if not cleaned or txn.aborted(header):
                return
        _, records = record_spans(header, batch)
        if header.is_transactional and txn is None:
            if cleaned:  # only older records matter, see filter_batch
                self.pinned.update(key for _, _, _, key, _ in records if key is not None)
            return
        base = header.base_offset
        latest = self.latest
        for _, _, delta, key, _ in records:
            if key is not None:
                latest[key] = base + delta

    def rules(self, now_ms: int, retention_ms: int, delete_horizon: bool) -> CompactionRules:
        return CompactionRules(
            self.latest,
            self.pinned,
            self.last_batches,
            now_ms,
            retention_ms,
            delete_horizon,
            self.txn,
        )


@dataclass(frozen=True, slots=True)
class CompactionRules:
    """What decides the fate of each record in one pass (see cleaner.py's docstring)."""

    latest: dict[bytes, int]  # key -> offset of its latest record
    pinned: set[bytes]  # keys of transactional records: their tombstones stay
    last_batches: dict[int, int]  # producer id -> last offset of its latest batch
    now_ms: int
    retention_ms: int  # how long tombstones stay
    delete_horizon: bool  # KIP-534's rule for tombstones, else their batch's timestamp
    txn: TxnCleaning | None  # a data topic's transactional rules, else the coordinator's


def filter_batch(
    header: BatchHeader, batch: bytes, rules: CompactionRules, fallback_ms: int
) -> tuple[bytes | None, int, int, int]:
    """(the batch to keep: `batch` itself, a rewrite, or None; records kept, dropped,
    tombstones dropped). `fallback_ms`: the time of a batch without a timestamp (a
    segment's modification time), for the coordinator's tombstone rule."""
    producers_last = (
        header.producer_id != NO_PRODUCER_ID
        and rules.last_batches.get(header.producer_id) == header.last_offset
    )
    txn = rules.txn
    if txn is not None and header.producer_id != NO_PRODUCER_ID and header.is_control:
        kept_marker = txn.marker(header, batch, producers_last)
        count = header.records_count
        return kept_marker, (count if kept_marker else 0), (0 if kept_marker else count), 0
    if txn is not None and header.is_transactional and not header.is_control:
        if txn.data_batch(header):
            return None, 0, header.records_count, 0
        # committed: compacted like any record, below
    elif header.is_control or header.is_transactional:
        return batch, header.records_count, 0, 0
    data, records = record_spans(header, batch)
    base = header.base_offset
    if rules.delete_horizon:
        stamped = bool(header.attributes & DELETE_HORIZON_MASK)
        expired = stamped and rules.now_ms >= header.base_timestamp
    else:
        stamped = True  # the coordinator's rule: nothing to stamp
        timestamp = header.max_timestamp if header.max_timestamp >= 0 else fallback_ms
        expired = timestamp < rules.now_ms - rules.retention_ms
    latest, pinned = rules.latest, rules.pinned
    survivors = []
    tombstones = 0
    for record in records:
        _, _, delta, key, tombstone = record
        if key is None:
            continue
        # A tombstone of a key written in a transaction stays even when a later record
        # supersedes it: replaying it drops that key's pending transactional records (the
        # group coordinator's replay), which the later record alone would not.
        if latest.get(key, -1) > base + delta and not (tombstone and key in pinned):
            continue
        if tombstone and expired and key not in pinned:
            tombstones += 1
            continue
        survivors.append(record)
    dropped = len(records) - len(survivors)
    if not records:  # emptied by an earlier pass: kept while its producer writes no other
        return (batch if producers_last else None), 0, 0, 0
    stamp = not stamped and any(record[4] for record in survivors)
    if not dropped and not stamp:
        return batch, len(survivors), 0, 0
    if not survivors:
        if producers_last:
            return empty_batch(header), 0, dropped, tombstones
        return None, 0, dropped, tombstones
    # Kafka computes the horizon in Java long arithmetic, where a huge retention wraps;
    # clamped here, it means "keep for ever" as intended.
    horizon = min(rules.now_ms + rules.retention_ms, LONG_MAX) if stamp else None
    out = rebuild_batch(header, batch, data, survivors, horizon)
    return out, len(survivors), dropped, tombstones


__all__ = [
    "LONG_MAX",
    "CleanableRange",
    "CompactionRules",
    "OffsetMap",
    "filter_batch",
]
