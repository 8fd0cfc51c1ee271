"""Log compaction: keep each key's latest record, drop old tombstones (Kafka's log cleaner:
one pass over the closed segments; when to run one is the caller's choice, see
``cleanable_range``).

Theory of operation
-------------------
The coordinator writes keyed records (value None = tombstone) into a PartitionLog per
shard. Compaction rewrites every segment except the active one so that:

* a record stays only if it is the latest record of its key in the whole log: the offset
  map (key -> latest offset) covers the segments cleaned (their content becomes durable
  in the output) and the *durable* part of the later ones. A record past the durable
  offset never supersedes anything: a crash could still take it away, and the older
  value it replaced would be gone already.
* a tombstone that is the latest record of its key goes once its batch's max timestamp
  (the segment's modification time when the batch has none) is older than
  ``now_ms - tombstone_retention_ms``; younger ones stay so that a replay elsewhere still
  deletes the key. Dropping it is safe because every older record of that key is dropped
  in the same pass.
* records without a key are dropped (Kafka's cleaner does the same).
* transactional and control batches are kept whole and never supersede anything
  (nothing here knows whether their transaction committed); tombstones of keys that
  appear in them are kept.
* the latest batch of each producer id stays, emptied of its records if none survives
  (Kafka's RETAIN_EMPTY: a 61-byte header keeping base offset, last offset delta,
  producer id, epoch and base sequence), so the producer state rebuilt from batch headers
  at start-up (idempotent producers) still knows its last sequence.

Two options serve data topics (Kafka's LogConfig), the coordinator's logs use neither:

* ``end_offset`` (min.compaction.lag.ms): only the closed segments that end at or below
  it are cleaned; the later ones are read for the offset map only, up to the durable
  offset, as the active segment is.
* ``delete_horizon`` (KIP-534, Kafka's rule for magic v2): a tombstone's retention
  counts from the pass that first cleans it, not from its timestamp. That pass stamps
  the batch holding it with a delete horizon, ``now_ms + tombstone_retention_ms``, in the
  base timestamp field, with attribute bit 6 set; each record's timestamp delta is
  re-encoded against it, so every record keeps its timestamp. A later pass drops the
  tombstone once ``now_ms`` reaches the horizon.

Every record keeps its offset. A batch keeps its base offset, last offset delta (as
Kafka's cleaner does, so producer sequence state and the segment's end offset survive),
timestamps (the base timestamp moves only to a delete horizon), producer fields and
compression; only the records that go are cut out, and
its length, record count and CRC are recomputed. Uncompressed records are copied byte for
byte; compressed ones are decompressed and compressed again with the same codec. A
batch that loses every record goes, so offsets may have gaps: a read at such an offset
returns the next batch (PartitionLog.read finds the first batch whose last offset is >=
the offset). Consecutive cleaned segments are merged up to segment_bytes_max; each
output segment is named after the first segment it replaces, so the first one keeps the
log's first base offset and the log start offset does not move (it may be an empty file
when nothing at all survived).

Two steps. ``prepare_compaction`` reads the closed segments (immutable until the log's
generation changes: truncation, retention, compaction) and the durable part of the active
segment through its own file descriptors, and writes the output as ``<base>.log.cleaned``
plus its ``.index.cleaned`` / ``.timeindex.cleaned``, all fsynced. It may run in a worker
thread while the writer keeps appending: records appended meanwhile are newer than
everything cleaned and only make the result more conservative. ``install_compaction``
runs on the writer thread, between appends: it checks that the log's generation and
closed segments are those the plan was made from (else the plan is discarded and it
returns None), then swaps the files in with three fsyncs:

1. write the marker file ``cleaner-swap`` (the end offset of the cleaned range and the
   output base offsets), durably: the commit point. From here on recovery completes the
   swap.
2. rename each output file ``.cleaned`` -> ``.swap``; delete the replaced segments that no
   output takes the name of; rename each ``.swap`` over its final name (index files
   before the ``.log``); fsync the directory.
3. delete the marker (made durable by the next flush, or by the next prepare).

Then the new segments replace the old ones in memory (PartitionLog.replace_segments).
An error from step 1 on fails the log (LogFailed) until it is reopened.

Recovery (``complete_interrupted_compaction``, first thing in PartitionLog.open): with the
marker, every output file still named ``.swap`` or ``.cleaned`` (all were fsynced before
the marker was written) is renamed over its final name, every other ``.log`` inside the
cleaned range is deleted, then the marker. Without it, ``.cleaned`` files are leftovers of
an unfinished prepare and are deleted, and a ``<base>.log.swap`` (a Kafka-style swap
without marker) replaces ``<base>.log`` and every segment whose base offset falls inside
its offset range. A crash during our own swap therefore leaves the old segments or the
new ones, never a mix (the fallback may leave old segments after a swap's last batch in
place: redundant records, since it cannot know the range a swap replaced).
"""

from __future__ import annotations

import os
import struct
import threading
import weakref
from collections.abc import Generator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aiokafka import codec
from aiokafka.record.util import calc_crc32c, decode_varint, encode_varint

from groupcoord.protocol.batches import (
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    InvalidBatch,
    crc_ok,
    parse_header,
)

from .checkpoint import fsync_directory
from .errors import StorageError
from .segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    RELATIVE_OFFSET_MAX,
    TIME_INDEX_SUFFIX,
    Segment,
    delete_segment_files,
    segment_file_name,
)

if TYPE_CHECKING:
    from .log import PartitionLog

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SWAP_MARKER_FILE = "cleaner-swap"
TOMBSTONE_RETENTION_MS_DEFAULT = 86_400_000

# A segment's files in swap order: index files first, so that once the .log is in place
# its index files are too (recovery keys on the .log).
_SWAP_ORDER = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX)
_READ_CHUNK_BYTES = 1024 * 1024
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # protocol/batches.py's layout
# Byte positions in the batch header (see protocol/batches.py).
_BATCH_LENGTH_AT = 8
_CRC_AT = 17
_CRC_FROM = 21
_ATTRIBUTES_AT = 21
_BASE_TIMESTAMP_AT = 27
_RECORDS_COUNT_AT = 57
# Java's Long.MAX_VALUE: Kafka's "no limit" for LONG configs, and the largest timestamp.
LONG_MAX = 2**63 - 1
# What an emptied batch keeps of its attributes (Kafka's writeEmptyHeader: no compression,
# no delete horizon).
_EMPTY_BATCH_ATTRIBUTES = TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK


class CompactionError(StorageError):
    """Compaction cannot proceed: a corrupt batch in a closed segment, an unreadable swap
    marker, or another compaction of the same log already under way."""


@dataclass(frozen=True, slots=True)
class CompactionStats:
    """Figures of one compaction, over the cleaned range (the closed segments)."""

    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    records_kept: int
    records_dropped: int
    # Included in records_dropped.
    tombstones_dropped: int


_NOTHING = CompactionStats(0, 0, 0, 0, 0, 0, 0)


class CompactionPlan:
    """The output of `prepare_compaction`, waiting for `install_compaction`.

    Holds open descriptors on the ``.cleaned`` files: install it or `discard` it.
    """

    __slots__ = ("log", "generation", "old", "new", "end_offset", "stats", "stale", "_finished")

    def __init__(
        self,
        log: PartitionLog,
        generation: int,
        old: tuple[Segment, ...],
        new: list[Segment],
        end_offset: int,
        stats: CompactionStats,
        stale: bool = False,
    ) -> None:
        self.log = log
        self.generation = generation
        # The closed segments cleaned, and their replacements (empty: nothing to swap).
        self.old = old
        self.new = new
        # Base offset of the first segment not cleaned (the active one, or the first one
        # past the end offset asked for).
        self.end_offset = end_offset
        self.stats = stats
        # The log changed while preparing: installing does nothing.
        self.stale = stale
        self._finished = False

    @property
    def finished(self) -> bool:
        return self._finished

    def discard(self) -> None:
        """Drop the plan: close and delete its ``.cleaned`` files. Idempotent."""
        if self._finished:
            return
        self._finished = True
        try:
            for segment in self.new:
                segment.close()
                for suffix in _SWAP_ORDER:
                    _unlink_quietly(_cleaned_path(segment.directory, segment.base_offset, suffix))
        finally:
            _release(self.log)

    def _installed(self) -> None:
        self._finished = True
        _release(self.log)

    def __repr__(self) -> str:
        return (
            f"CompactionPlan(segments={len(self.old)}->{len(self.new)},"
            f" end_offset={self.end_offset}, stale={self.stale})"
        )


# Logs with a plan prepared and not yet installed or discarded: the plan's .cleaned file
# names would collide with a second one's.
_busy: weakref.WeakSet[PartitionLog] = weakref.WeakSet()
_busy_lock = threading.Lock()


def _claim(log: PartitionLog) -> None:
    with _busy_lock:
        if log in _busy:
            raise CompactionError(f"a compaction of {log.directory} is already under way")
        _busy.add(log)


def _release(log: PartitionLog) -> None:
    with _busy_lock:
        _busy.discard(log)


# -- the two steps -----------------------------------------------------------------------


def compact(
    log: PartitionLog,
    now_ms: int,
    tombstone_retention_ms: int = TOMBSTONE_RETENTION_MS_DEFAULT,
    *,
    end_offset: int | None = None,
    delete_horizon: bool = False,
) -> CompactionStats:
    """Compact `log` in one go: prepare and install on the calling thread, which must be
    the log's writer thread (no append may run meanwhile). See the module docstring."""
    plan = prepare_compaction(
        log, now_ms, tombstone_retention_ms, end_offset=end_offset, delete_horizon=delete_horizon
    )
    stats = install_compaction(log, plan)
    if stats is None:  # pragma: no cover - only another thread could have changed the log
        raise CompactionError(f"{log.directory} changed during compaction")
    return stats


def prepare_compaction(
    log: PartitionLog,
    now_ms: int,
    tombstone_retention_ms: int = TOMBSTONE_RETENTION_MS_DEFAULT,
    *,
    end_offset: int | None = None,
    delete_horizon: bool = False,
) -> CompactionPlan:
    """Clean the closed segments of `log` (those ending at or below `end_offset`, when
    given) into ``.cleaned`` files (fsynced); nothing in the log changes. Safe in a worker
    thread while the writer appends and flushes. `delete_horizon`: tombstones are kept
    for `tombstone_retention_ms` after the pass that first cleans them (KIP-534), not
    after their batch's timestamp; see the module docstring.

    Raises CompactionError when a compaction of this log is already prepared, or on a
    corrupt batch; LogClosed / LogFailed; OSError.
    """
    if tombstone_retention_ms < 0:
        raise ValueError("tombstone_retention_ms must be >= 0")
    _claim(log)
    try:
        return _prepare(log, now_ms, tombstone_retention_ms, end_offset, delete_horizon)
    except BaseException:
        _release(log)
        raise


def install_compaction(log: PartitionLog, plan: CompactionPlan) -> CompactionStats | None:
    """Swap the plan's segments in; on the writer thread, between appends.

    Returns None, discarding the plan, when the log changed since it was prepared
    (truncation, retention, another compaction): prepare again. A plan that changes
    nothing returns its stats without touching a file. An error during the swap fails
    the log until it is reopened, which completes the swap.
    """
    if plan.log is not log:
        raise ValueError("the plan was prepared for another log")
    if plan.finished:
        raise ValueError("the plan was already installed or discarded")
    if not plan.new:
        plan.discard()
        return None if plan.stale else plan.stats
    try:
        generation, _, closed, _, _ = log.segments_snapshot()
    except BaseException:
        plan.discard()
        raise
    count = len(plan.old)
    if (
        generation != plan.generation
        or len(closed) < count
        or any(a is not b for a, b in zip(closed, plan.old, strict=False))
    ):
        plan.discard()
        return None
    bases = [segment.base_offset for segment in plan.new]
    try:
        _swap_files(log.directory, plan.old, bases, plan.end_offset)
        log.replace_segments(plan.old, plan.new)
    except BaseException as exc:
        # The marker may be durable: only recovery at open may decide what stays.
        log.mark_failed(exc)
        for segment in plan.new:
            segment.close()
        raise
    finally:
        plan._installed()
    return plan.stats


# The name the design notes use.
install = install_compaction


# -- when to clean (Kafka's LogCleanerManager) ------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """What a pass over a log would clean (Kafka's LogToClean): the closed segments below
    `end_offset`, of which those from `first_dirty_offset` on were not cleaned yet."""

    first_dirty_offset: int
    # Pass it to prepare_compaction: the active segment's base offset, or that of the
    # first dirty segment holding a record newer than min.compaction.lag.ms.
    end_offset: int
    clean_bytes: int
    dirty_bytes: int
    # A dirty closed segment's first batch is older than max.compaction.lag.ms.
    overdue: bool

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    def due(self, min_dirty_ratio: float) -> bool:
        """Kafka's grabFilthiestCompactedLog: dirty bytes to clean, and either more of
        them than `min_dirty_ratio` (min.cleanable.dirty.ratio) or an overdue segment."""
        return self.dirty_bytes > 0 and (self.overdue or self.dirty_ratio > min_dirty_ratio)


def cleanable_range(
    log: PartitionLog,
    first_dirty_offset: int,
    now_ms: int,
    min_lag_ms: int = 0,
    max_lag_ms: int = LONG_MAX,
) -> CleanableRange:
    """Kafka's cleanableOffsets and maxCompactionDelay for `log`, whose segments below
    `first_dirty_offset` (the end offset of the last pass) are clean; an offset outside
    the log means nothing is (Kafka's fallback when its checkpoint is invalid). Reads the
    first batch header of each dirty closed segment only when max_lag_ms can have
    passed. On the writer thread. Raises LogClosed / LogFailed, OSError."""
    _, _, closed, active, _ = log.segments_snapshot()
    if not log.log_start_offset <= first_dirty_offset <= log.next_offset:
        first_dirty_offset = log.log_start_offset
    end_offset: int | None = None
    clean_bytes = dirty_bytes = 0
    dirty: list[Segment] = []
    for segment in closed:
        if segment.base_offset < first_dirty_offset:
            clean_bytes += segment.size_bytes
            continue
        dirty.append(segment)
        if end_offset is not None:
            continue
        if min_lag_ms > 0 and _largest_timestamp(segment) > now_ms - min_lag_ms:
            end_offset = segment.base_offset  # this one and every later one wait
        else:
            dirty_bytes += segment.size_bytes
    overdue = False
    clean_until_ms = now_ms - max(max_lag_ms, 0)
    if clean_until_ms > 0:
        for segment in dirty:
            first = next(segment.iter_headers(0), None)
            # Kafka ignores batches without a timestamp (<= 0) here.
            if first is not None and 0 < first[1].max_timestamp < clean_until_ms:
                overdue = True
                break
    if end_offset is None:
        end_offset = active.base_offset
    return CleanableRange(first_dirty_offset, end_offset, clean_bytes, dirty_bytes, overdue)


def _largest_timestamp(segment: Segment) -> int:
    """Kafka's LogSegment.largestTimestamp: the newest batch's max timestamp, else the
    file's modification time."""
    if segment.max_timestamp_ms >= 0:
        return segment.max_timestamp_ms
    return segment.last_modified_ms


# -- prepare ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Rules:
    """What decides the fate of each record in one pass (see the module docstring)."""

    latest: dict[bytes, int]  # key -> offset of its latest record
    pinned: set[bytes]  # keys of transactional records: their tombstones stay
    last_batches: dict[int, int]  # producer id -> last offset of its latest batch
    now_ms: int
    retention_ms: int  # how long tombstones stay
    delete_horizon: bool  # KIP-534's rule for tombstones, else their batch's timestamp


def _prepare(
    log: PartitionLog,
    now_ms: int,
    retention_ms: int,
    end_offset: int | None,
    delete_horizon: bool,
) -> CompactionPlan:
    generation, durable, closed, active, active_size = log.segments_snapshot()
    # Segment i ends where the next one begins: clean the prefix ending at or below the
    # limit; the rest of the closed segments only feed the offset map.
    ends = [segment.base_offset for segment in closed[1:]] + [active.base_offset]
    limit = active.base_offset if end_offset is None else min(end_offset, active.base_offset)
    count = 0
    while count < len(closed) and ends[count] <= limit:
        count += 1
    if not count:
        first_kept = closed[0].base_offset if closed else active.base_offset
        return CompactionPlan(log, generation, (), [], first_kept, _NOTHING)
    cleaned, rest = closed[:count], closed[count:]
    directory = log.directory
    # The previous install removed its marker without fsyncing the directory: make that
    # durable before new .cleaned files appear, or recovery would take them for its own.
    fsync_directory(directory)
    if (directory / SWAP_MARKER_FILE).exists():
        raise CompactionError(f"{directory} has an unfinished compaction swap")
    try:
        latest, pinned, last_batches = _offset_map(cleaned, rest, active, active_size, durable)
        rules = _Rules(latest, pinned, last_batches, now_ms, retention_ms, delete_horizon)
        return _clean(log, generation, cleaned, ends[count - 1], rules)
    except (OSError, InvalidBatch) as exc:
        # Files read through our own descriptors may have been cut or deleted under us.
        if log.generation != generation:
            return CompactionPlan(log, generation, (), [], ends[count - 1], _NOTHING, True)
        if isinstance(exc, InvalidBatch):
            raise CompactionError(f"cannot compact {directory}: {exc}") from exc
        raise


def _offset_map(
    cleaned: Sequence[Segment],
    rest: Sequence[Segment],
    active: Segment,
    active_size: int,
    durable: int,
) -> tuple[dict[bytes, int], set[bytes], dict[int, int]]:
    """(key -> latest offset, keys of transactional records in the cleaned segments,
    producer id -> last offset of its latest batch) over the segments to clean, then the
    batches of the later segments below the durable offset. (What is cleaned becomes
    durable in the .cleaned files; anything later could still be lost in a crash.)"""
    latest: dict[bytes, int] = {}
    pinned: set[bytes] = set()
    last_batches: dict[int, int] = {}
    sources: list[tuple[Path, int, int | None]] = [
        (segment.path(), segment.size_bytes, None) for segment in cleaned
    ]
    sources.extend((segment.path(), segment.size_bytes, durable) for segment in rest)
    sources.append((active.path(), active_size, durable))
    for path, size, limit in sources:
        with closing(_iter_batches(path, size, limit)) as batches:
            for header, batch in batches:
                if header.producer_id != NO_PRODUCER_ID:
                    last_batches[header.producer_id] = header.last_offset
                if header.is_control:
                    continue
                _, records = _decode_records(header, batch)
                if header.is_transactional:
                    if limit is None:  # only older records matter, see _filter_batch
                        pinned.update(key for _, _, _, key, _ in records if key is not None)
                    continue
                base = header.base_offset
                for _, _, delta, key, _ in records:
                    if key is not None:
                        latest[key] = base + delta
    return latest, pinned, last_batches


def _clean(
    log: PartitionLog,
    generation: int,
    closed: tuple[Segment, ...],
    end_offset: int,
    rules: _Rules,
) -> CompactionPlan:
    directory = log.directory
    config = log.config
    now_ms = rules.now_ms
    groups: list[Segment] = []
    group_mtime: list[int] = []
    kept = dropped = tombstones = 0
    changed = False  # a batch dropped or rewritten
    try:
        for source in closed:
            out: list[bytes] = []
            headers: list[BatchHeader] = []
            out_size = 0
            with closing(_iter_batches(source.path(), source.size_bytes, None)) as batches:
                for header, batch in batches:
                    result, k, d, t = _filter_batch(header, batch, rules, source.last_modified_ms)
                    kept, dropped, tombstones = kept + k, dropped + d, tombstones + t
                    changed = changed or result is not batch
                    if result is None:
                        continue
                    out.append(result)
                    headers.append(header if result is batch else parse_header(result))
                    out_size += len(result)
            # Merge into the current output segment while it stays within the size limit
            # (an empty one takes anything) and the relative offsets fit.
            current = groups[-1] if groups else None
            if current is None or (
                headers
                and (
                    (
                        current.size_bytes > 0
                        and current.size_bytes + out_size > config.segment_bytes_max
                    )
                    or headers[-1].last_offset - current.base_offset > RELATIVE_OFFSET_MAX
                )
            ):
                if current is not None:
                    _seal(current, group_mtime[-1])
                current = Segment.create_at(
                    _cleaned_path(directory, source.base_offset, LOG_SUFFIX),
                    directory,
                    source.base_offset,
                    config.index_interval_bytes,
                    now_ms,
                )
                groups.append(current)
                group_mtime.append(source.last_modified_ms)
            if headers:
                current.append_with_offsets(b"".join(out), headers, now_ms)
            group_mtime[-1] = max(group_mtime[-1], source.last_modified_ms)
        stats = CompactionStats(
            segments_before=len(closed),
            segments_after=len(groups),
            bytes_before=sum(segment.size_bytes for segment in closed),
            bytes_after=sum(segment.size_bytes for segment in groups),
            records_kept=kept,
            records_dropped=dropped,
            tombstones_dropped=tombstones,
        )
        if not changed and len(groups) == len(closed):
            # Byte for byte what is there already.
            _delete_cleaned(groups)
            return CompactionPlan(log, generation, closed, [], end_offset, stats)
        _seal(groups[-1], group_mtime[-1])
        # The .cleaned names must be durable before the marker that refers to them.
        fsync_directory(directory)
    except BaseException:
        _delete_cleaned(groups)
        raise
    return CompactionPlan(log, generation, closed, groups, end_offset, stats)


def _filter_batch(
    header: BatchHeader, batch: bytes, rules: _Rules, fallback_ms: int
) -> tuple[bytes | None, int, int, int]:
    """(the batch to keep: `batch` itself, a rewrite, or None; records kept, dropped,
    tombstones dropped)."""
    if header.is_control or header.is_transactional:
        return batch, header.records_count, 0, 0
    data, records = _decode_records(header, batch)
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
        if key is None or latest.get(key, -1) > base + delta:
            continue
        if tombstone and expired and key not in pinned:
            tombstones += 1
            continue
        survivors.append(record)
    dropped = len(records) - len(survivors)
    producers_last = (
        header.producer_id != NO_PRODUCER_ID
        and rules.last_batches.get(header.producer_id) == header.last_offset
    )
    if not records:  # emptied by an earlier pass: kept while its producer writes no other
        return (batch if producers_last else None), 0, 0, 0
    stamp = not stamped and any(record[4] for record in survivors)
    if not dropped and not stamp:
        return batch, len(survivors), 0, 0
    if not survivors:
        if producers_last:
            return _empty_batch(header), 0, dropped, tombstones
        return None, 0, dropped, tombstones
    if stamp:
        # Kafka computes the horizon in Java long arithmetic, where a huge retention
        # wraps; clamped here, it means "keep for ever" as intended.
        horizon = min(rules.now_ms + rules.retention_ms, LONG_MAX)
        body = _restamp(data, survivors, header.base_timestamp - horizon)
    else:
        body = b"".join(data[start:end] for start, end, _, _, _ in survivors)
    if header.compression:
        body = _compress(header.compression, body)
    out = bytearray(HEADER_SIZE + len(body))
    out[:HEADER_SIZE] = batch[:HEADER_SIZE]
    out[HEADER_SIZE:] = body
    _I32.pack_into(out, _BATCH_LENGTH_AT, len(out) - LOG_OVERHEAD)
    _I32.pack_into(out, _RECORDS_COUNT_AT, len(survivors))
    if stamp:
        _I16.pack_into(out, _ATTRIBUTES_AT, header.attributes | DELETE_HORIZON_MASK)
        _I64.pack_into(out, _BASE_TIMESTAMP_AT, horizon)
    _U32.pack_into(out, _CRC_AT, calc_crc32c(memoryview(out)[_CRC_FROM:]))
    return bytes(out), len(survivors), dropped, tombstones


def _restamp(data: bytes | memoryview, survivors: Sequence[_Record], shift: int) -> bytes:
    """The `survivors` records with each timestamp delta moved by `shift` (the old base
    timestamp minus the new one), so that every record keeps its timestamp; the rest of
    each record is copied byte for byte."""
    out = bytearray()
    for start, end, _, _, _ in survivors:
        _, body = decode_varint(data, start)  # past the record's length
        delta, rest = decode_varint(data, body + 1)  # past its attributes byte
        record = bytearray(data[body : body + 1])
        encode_varint(delta + shift, record.append)
        record += data[rest:end]
        encode_varint(len(record), out.append)
        out += record
    return bytes(out)


def _empty_batch(header: BatchHeader) -> bytes:
    """The header alone of a producer's latest batch whose records all went (Kafka's
    DefaultRecordBatch.writeEmptyHeader): offsets, producer id, epoch and base sequence
    as they were, no records, no compression, both timestamps its max timestamp."""
    out = bytearray(HEADER_SIZE)
    _BATCH_HEADER.pack_into(
        out,
        0,
        header.base_offset,
        HEADER_SIZE - LOG_OVERHEAD,
        header.partition_leader_epoch,
        header.magic,
        0,
        header.attributes & _EMPTY_BATCH_ATTRIBUTES,
        header.last_offset_delta,
        header.max_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        0,
    )
    _U32.pack_into(out, _CRC_AT, calc_crc32c(memoryview(out)[_CRC_FROM:]))
    return bytes(out)


def _seal(segment: Segment, mtime_ms: int) -> None:
    """Make an output segment durable, with its index files; keep the newest source's
    modification time, as Kafka does, so time-based decisions do not restart."""
    path = _cleaned_path(segment.directory, segment.base_offset, LOG_SUFFIX)
    if mtime_ms >= 0:
        os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
    segment.last_modified_ms = mtime_ms
    segment.fsync()
    segment.write_index_files(CLEANED_SUFFIX)
    segment.sync_index_files(CLEANED_SUFFIX)


def _delete_cleaned(groups: Sequence[Segment]) -> None:
    for segment in groups:
        segment.close()
        for suffix in _SWAP_ORDER:
            _unlink_quietly(_cleaned_path(segment.directory, segment.base_offset, suffix))


# -- reading batches and records -------------------------------------------------------

# (start, end) of the record in the records section, offset delta, key, is a tombstone
_Record = tuple[int, int, int, bytes | None, bool]


def _iter_batches(
    path: Path, size: int, end_offset: int | None
) -> Generator[tuple[BatchHeader, bytes], None, None]:
    """Whole, CRC-checked batches of a segment file up to `size` bytes, read through a
    descriptor of our own; with `end_offset`, only batches ending below it."""
    fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
    try:
        pos = 0
        buf = b""
        buf_start = 0
        while pos < size:
            rel = pos - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(_READ_CHUNK_BYTES, size - pos), pos)
                buf_start, rel = pos, 0
            header = parse_header(buf, rel)
            if end_offset is not None and header.last_offset >= end_offset:
                return
            length = header.size_bytes
            if pos + length > size:
                raise InvalidBatch(f"batch at byte {pos} of {path} runs past its end")
            if rel + length > len(buf):
                buf = os.pread(fd, max(length, min(_READ_CHUNK_BYTES, size - pos)), pos)
                buf_start, rel = pos, 0
                if len(buf) < length:
                    raise InvalidBatch(f"batch at byte {pos} of {path} is cut short")
            if not crc_ok(buf, rel, header):
                raise InvalidBatch(f"batch at byte {pos} of {path} fails its CRC")
            yield header, buf[rel : rel + length]
            pos += length
    finally:
        os.close(fd)


def _decode_records(header: BatchHeader, batch: bytes) -> tuple[bytes | memoryview, list[_Record]]:
    """The records section (decompressed) and where each record lies in it."""
    data: bytes | memoryview = memoryview(batch)[HEADER_SIZE:]
    if header.compression:
        try:
            data = _decompress(header.compression, memoryview(batch)[HEADER_SIZE:])
        except InvalidBatch:
            raise
        except Exception as exc:
            raise InvalidBatch(f"cannot decompress batch: {exc!r}") from exc
    records: list[_Record] = []
    pos = 0
    size = len(data)
    try:
        for _ in range(header.records_count):
            length, body = decode_varint(data, pos)
            end = body + length
            if length <= 0 or end > size:
                raise InvalidBatch("record length out of bounds")
            # attributes (int8), timestamp delta, offset delta, key, value length
            _, p = decode_varint(data, body + 1)
            delta, p = decode_varint(data, p)
            key_length, p = decode_varint(data, p)
            key = None
            if key_length >= 0:
                key = bytes(data[p : p + key_length])
                p += key_length
            value_length, p = decode_varint(data, p)
            if p > end or value_length > end - p:
                raise InvalidBatch("record fields run past the record")
            records.append((pos, end, delta, key, value_length < 0))
            pos = end
    except InvalidBatch:
        raise
    except (IndexError, ValueError) as exc:
        raise InvalidBatch(f"malformed record: {exc}") from exc
    if pos != size:
        raise InvalidBatch("bytes after the last record")
    return data, records


def _decompress(compression: int, data: memoryview) -> bytes:
    if compression == 1:
        return bytes(codec.gzip_decode(data))
    if compression == 2:
        return bytes(codec.snappy_decode(data.tobytes()))
    if compression == 3:
        return bytes(codec.lz4_decode(data.tobytes()))
    if compression == 4:
        return bytes(codec.zstd_decode(data.tobytes()))
    raise InvalidBatch(f"unknown compression codec {compression}")


def _compress(compression: int, data: bytes) -> bytes:
    if compression == 1:
        return bytes(codec.gzip_encode(data))
    if compression == 2:
        return bytes(codec.snappy_encode(data))
    if compression == 3:
        return bytes(codec.lz4_encode(data))
    if compression == 4:
        return bytes(codec.zstd_encode(data))
    raise InvalidBatch(f"unknown compression codec {compression}")


# -- the swap and its recovery ---------------------------------------------------------


def _swap_files(
    directory: Path, old: Sequence[Segment], bases: Sequence[int], end_offset: int
) -> None:
    _write_marker(directory, end_offset, bases)
    for base in bases:
        for suffix in _SWAP_ORDER:
            os.rename(_cleaned_path(directory, base, suffix), _swap_path(directory, base, suffix))
    taken = set(bases)
    for segment in old:
        if segment.base_offset not in taken:
            delete_segment_files(directory, segment.base_offset)
    for base in bases:
        for suffix in _SWAP_ORDER:
            os.replace(
                _swap_path(directory, base, suffix), directory / segment_file_name(base, suffix)
            )
    fsync_directory(directory)
    os.unlink(directory / SWAP_MARKER_FILE)


def complete_interrupted_compaction(directory: Path) -> bool:
    """Finish or undo a compaction swap that a crash interrupted (see the module
    docstring); called by PartitionLog.open before it lists segments. Returns whether
    any file was renamed or deleted (the changes are fsynced)."""
    marker = directory / SWAP_MARKER_FILE
    pending: dict[int, dict[str, dict[str, Path]]] = {}  # base -> suffix -> kind -> path
    logs: list[int] = []
    for entry in os.scandir(directory):
        parsed = _parse_pending_name(entry.name)
        if parsed is not None:
            base, suffix, kind = parsed
            pending.setdefault(base, {}).setdefault(suffix, {})[kind] = Path(entry.path)
        elif entry.name.endswith(LOG_SUFFIX) and _is_segment_stem(entry.name[:-4]):
            logs.append(int(entry.name[:-4]))
    has_marker = marker.exists()
    if not pending and not has_marker:
        return False
    if has_marker:
        end_offset, bases = _read_marker(marker)
        taken = set(bases)
        first = min(bases)
        for base in sorted(logs):
            if first <= base < end_offset and base not in taken:
                delete_segment_files(directory, base)
        for base in bases:
            files = pending.pop(base, {})
            for suffix in _SWAP_ORDER:
                # .swap first: it was renamed from .cleaned, never the other way round.
                kinds = files.get(suffix, {})
                source = kinds.get(SWAP_SUFFIX) or kinds.get(CLEANED_SUFFIX)
                if source is not None:
                    os.replace(source, directory / segment_file_name(base, suffix))
        for files in pending.values():  # not part of this swap
            for kinds in files.values():
                for path in kinds.values():
                    _unlink_quietly(path)
        fsync_directory(directory)
        os.unlink(marker)
        fsync_directory(directory)
        return True
    swaps: list[tuple[int, dict[str, Path]]] = []
    for base, files in pending.items():
        for kinds in files.values():
            cleaned = kinds.get(CLEANED_SUFFIX)
            if cleaned is not None:
                _unlink_quietly(cleaned)
        swapped = {
            suffix: kinds[SWAP_SUFFIX] for suffix, kinds in files.items() if SWAP_SUFFIX in kinds
        }
        if LOG_SUFFIX in swapped:
            swaps.append((base, swapped))
        else:
            for path in swapped.values():  # index files without their segment
                _unlink_quietly(path)
    for base, swapped in sorted(swaps):
        next_offset = _scan_next_offset(swapped[LOG_SUFFIX], base)
        for other in logs:
            if base < other < next_offset:
                delete_segment_files(directory, other)
        for suffix in _SWAP_ORDER:
            target = directory / segment_file_name(base, suffix)
            if suffix in swapped:
                os.replace(swapped[suffix], target)
            else:
                # The old segment's index files would describe another file.
                _unlink_quietly(target)
    fsync_directory(directory)
    return True


def _parse_pending_name(name: str) -> tuple[int, str, str] | None:
    """(base offset, segment file suffix, .cleaned or .swap) of a cleaner's file name."""
    for kind in (CLEANED_SUFFIX, SWAP_SUFFIX):
        if name.endswith(kind):
            stem, suffix = name[:20], name[20 : -len(kind)]
            if suffix in _SWAP_ORDER and _is_segment_stem(stem):
                return int(stem), suffix, kind
    return None


def _is_segment_stem(stem: str) -> bool:
    return len(stem) == 20 and stem.isascii() and stem.isdigit()


def _scan_next_offset(path: Path, base: int) -> int:
    """Offset after the last whole batch of a segment file (headers only)."""
    next_offset = base
    fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while pos < size:
            try:
                header = parse_header(os.pread(fd, HEADER_SIZE, pos))
            except InvalidBatch:
                break
            if pos + header.size_bytes > size:
                break
            next_offset = max(next_offset, header.last_offset + 1)
            pos += header.size_bytes
    finally:
        os.close(fd)
    return next_offset


def _write_marker(directory: Path, end_offset: int, bases: Sequence[int]) -> None:
    """Durably create the marker: temp file, fsync, rename, directory fsync."""
    path = directory / SWAP_MARKER_FILE
    tmp = path.with_name(path.name + ".tmp")
    text = f"{end_offset}\n{' '.join(str(base) for base in bases)}\n"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC, 0o644)
    try:
        os.write(fd, text.encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(directory)


def _read_marker(path: Path) -> tuple[int, list[int]]:
    """(end offset, output base offsets); the marker is written atomically, so anything
    else is corruption that recovery must not guess around."""
    try:
        lines = path.read_text(encoding="ascii").split("\n")
        end_offset = int(lines[0])
        bases = [int(word) for word in lines[1].split()]
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise CompactionError(f"unreadable compaction marker {path}") from exc
    if not bases:
        raise CompactionError(f"compaction marker {path} names no segment")
    return end_offset, bases


def _cleaned_path(directory: Path, base: int, suffix: str) -> Path:
    return directory / (segment_file_name(base, suffix) + CLEANED_SUFFIX)


def _swap_path(directory: Path, base: int, suffix: str) -> Path:
    return directory / (segment_file_name(base, suffix) + SWAP_SUFFIX)


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
