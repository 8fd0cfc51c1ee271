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
  appear in them are kept, even when a later record supersedes them (replaying one drops
  the key's pending transactional offsets in the group coordinator). That is the
  coordinator's rule; a data topic's pass given its aborted transactions
  (``aborted_txns``, cleaned only below the last stable offset) follows Kafka's instead
  (txn_cleaning.py): aborted data goes, committed data is compacted like any record, and
  markers go two passes after their transaction's last record.
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
returns None), then swaps the files in (compaction_swap.py: a marker file is the commit
point, and PartitionLog.open completes or undoes a swap that a crash interrupted) and the
new segments replace the old ones in memory (PartitionLog.replace_segments). An error
during the swap fails the log (LogFailed) until it is reopened.

The bytes of a rewritten batch are written by protocol/batch_rewrite.py.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Generator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from groupcoord.protocol.batches import (
    HEADER_SIZE,
    BatchHeader,
    InvalidBatch,
    crc_ok,
    parse_header,
)

from .checkpoint import fsync_directory
from .compaction_rules import (
    LONG_MAX,
    CleanableRange,
    CompactionRules,
    OffsetMap,
    filter_batch,
)
from .compaction_swap import (
    CLEANED_SUFFIX,
    SWAP_MARKER_FILE,
    SWAP_ORDER,
    cleaned_path,
    swap_files,
    unlink_quietly,
)
from .errors import CompactionError
from .segment import LOG_SUFFIX, RELATIVE_OFFSET_MAX, Segment
from .txn_cleaning import TxnCleaning

if TYPE_CHECKING:
    from .log import PartitionLog

TOMBSTONE_RETENTION_MS_DEFAULT = 86_400_000

_READ_CHUNK_BYTES = 1024 * 1024
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


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

    __slots__ = (
        "log",
        "generation",
        "old",
        "new",
        "end_offset",
        "stats",
        "stale",
        "removed_abort_markers",
        "_finished",
    )

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
        # (producer id, offset) of the ABORT markers the plan drops (txn_cleaning.py).
        self.removed_abort_markers: list[tuple[int, int]] = []
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
                for suffix in SWAP_ORDER:
                    unlink_quietly(cleaned_path(segment.directory, segment.base_offset, suffix))
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
    aborted_txns: Sequence[tuple[int, int, int]] | None = None,
) -> CompactionStats:
    """Compact `log` in one go: prepare and install on the calling thread, which must be
    the log's writer thread (no append may run meanwhile). See the module docstring."""
    plan = prepare_compaction(
        log,
        now_ms,
        tombstone_retention_ms,
        end_offset=end_offset,
        delete_horizon=delete_horizon,
        aborted_txns=aborted_txns,
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
    aborted_txns: Sequence[tuple[int, int, int]] | None = None,
) -> CompactionPlan:
    """Clean the closed segments of `log` (those ending at or below `end_offset`, when
    given) into ``.cleaned`` files (fsynced); nothing in the log changes. Safe in a worker
    thread while the writer appends and flushes. `delete_horizon`: tombstones are kept
    for `tombstone_retention_ms` after the pass that first cleans them (KIP-534), not
    after their batch's timestamp; see the module docstring. `aborted_txns`: a data
    topic's (producer id, first offset, marker offset) of its aborted transactions, for
    Kafka's transactional rules (txn_cleaning.py; `end_offset` must then be at or below
    the last stable offset); None: the coordinator's rule (transactional data kept whole).

    Raises CompactionError when a compaction of this log is already prepared, or on a
    corrupt batch; LogClosed / LogFailed; OSError.
    """
    if tombstone_retention_ms < 0:
        raise ValueError("tombstone_retention_ms must be >= 0")
    _claim(log)
    try:
        txn = (
            None
            if aborted_txns is None
            else TxnCleaning(aborted_txns, now_ms, tombstone_retention_ms)
        )
        return _prepare(log, now_ms, tombstone_retention_ms, end_offset, delete_horizon, txn)
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
        swap_files(log.directory, plan.old, bases, plan.end_offset)
        for segment in plan.new:
            segment.renamed_into_place()
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


def _prepare(
    log: PartitionLog,
    now_ms: int,
    retention_ms: int,
    end_offset: int | None,
    delete_horizon: bool,
    txn: TxnCleaning | None = None,
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
        offsets = _offset_map(cleaned, rest, active, active_size, durable, txn)
        rules = offsets.rules(now_ms, retention_ms, delete_horizon)
        plan = _clean(log, generation, cleaned, ends[count - 1], rules)
        if txn is not None and plan.new:
            plan.removed_abort_markers = txn.removed_abort_markers
        return plan
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
    txn: TxnCleaning | None = None,
) -> OffsetMap:
    """The offset map (compaction_rules.OffsetMap) over the segments to clean, then the
    batches of the later segments below the durable offset. (What is cleaned becomes
    durable in the .cleaned files; anything later could still be lost in a crash.)"""
    offsets = OffsetMap(txn)
    sources: list[tuple[Path, int, int | None]] = [
        (segment.path(), segment.size_bytes, None) for segment in cleaned
    ]
    sources.extend((segment.path(), segment.size_bytes, durable) for segment in rest)
    sources.append((active.path(), active_size, durable))
    for path, size, limit in sources:
        with closing(_iter_batches(path, size, limit)) as batches:
            for header, batch in batches:
                offsets.add(header, batch, limit is None)
    return offsets


def _clean(
    log: PartitionLog,
    generation: int,
    closed: tuple[Segment, ...],
    end_offset: int,
    rules: CompactionRules,
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
                    result, k, d, t = filter_batch(header, batch, rules, source.last_modified_ms)
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
                    cleaned_path(directory, source.base_offset, LOG_SUFFIX),
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


def _seal(segment: Segment, mtime_ms: int) -> None:
    """Make an output segment durable, with its index files; keep the newest source's
    modification time, as Kafka does, so time-based decisions do not restart."""
    path = cleaned_path(segment.directory, segment.base_offset, LOG_SUFFIX)
    if mtime_ms >= 0:
        os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
    segment.last_modified_ms = mtime_ms
    segment.fsync()
    segment.write_index_files(CLEANED_SUFFIX)
    segment.sync_index_files(CLEANED_SUFFIX)


def _delete_cleaned(groups: Sequence[Segment]) -> None:
    for segment in groups:
        segment.close()
        for suffix in SWAP_ORDER:
            unlink_quietly(cleaned_path(segment.directory, segment.base_offset, suffix))


# -- reading batches and records -------------------------------------------------------


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
