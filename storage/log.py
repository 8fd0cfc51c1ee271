"""A partition's segmented, append-only log of record batches (magic v2).

Theory of operation
-------------------
A directory holds segments (see segment.py) named by base offset; the last one is active
and takes appends. Batches are stored byte for byte as received, only their base offset
stamped in; nothing here decodes records except timestamp lookups. The log is generic over
batches, so the coordinator's own state logs use it as well as data partitions.
Compaction (cleaner.py) rewrites the closed segments of a keyed log and leaves gaps in
their offsets: a read at an offset without a record returns the next batch.

Offsets. ``log_start_offset`` <= ``durable_offset`` <= ``next_offset`` (log end offset).
The high watermark that Fetch and ListOffsets expose is ``durable_offset``; retention deletes
only below it. Reads accept [log_start_offset, next_offset].

Durability. ``append`` only writes into the page cache. ``flush`` fsyncs and advances
``durable_offset``; responses that depend on a write wait for it (group_commit.py), so one
fsync covers everything appended meanwhile. A failed write that cannot be rolled back, or a
failed fsync, makes the log fail for good (LogFailed) until it is reopened: after a failed
fsync the kernel may have dropped the dirty pages, and a later fsync that succeeds would
claim durability for lost data.

Threads. One writer thread (the event loop) calls everything except ``flush``, which may
run at the same time in a worker thread. They share the segment list (a roll appends to
it), the segments rolled since the last flush and ``next_offset``. A roll and the flush's
snapshot of those happen under ``_lock``; the fsyncs run outside it, so an append never
waits for a disk. Segments deleted by retention while a flush may be fsyncing them are
closed by that flush when it ends, so a descriptor is never closed (and its number reused)
under it. ``truncate_to`` and ``close`` wait for an in-flight flush (``_flush_lock``,
which append never takes).

Recovery (log_recovery.py, at open). A segment below the *recovery point* was fsynced
whole, together with its index files, before the recovery point passed it (the flush after
a roll persists the active segment's base offset in ``recovery-point-offset``). Such
segments are trusted when their index files are consistent: start-up reads only their index
files and the headers after the last index entry. Every other segment (always the last one)
is scanned batch by batch (header, CRC, increasing offsets). Above the recovery point a bad
batch is a crash's torn tail: the segment is cut there and every later segment dropped.
Below it (index files damaged, so the segment was scanned) a bad batch is damage on disk:
the segment is salvaged (Segment.recover) and cut within itself only, keeping the later
segments (an offset gap; reported as damage, ``recovered_salvaged_bytes``).

Torn tail or damage. Only bytes past the last completed fsync can be a torn write. Each
flush that completes writes the durable offset over ``durable-offset`` (one small write
in place, no fsync, at most once a second and at every roll: a lower bound, lagging), and
recovery treats a bad batch whose offsets lie below it as damage too: removed alone, the
valid batches after it kept, as after a clean stop (``salvage``). A cut lowers the file
durably before new appends reuse the offsets. After a crash of the process alone (the
server passes ``salvage``, see coordinator/server/recovery_report.py) the kernel still
held every page written, so nothing but a final write cut short can be torn.

Reads check bytes no read checked before (segment.py): a batch failing its checks is never
served; ``salvage_damaged`` removes it for a reader that must go on (a shard's replay).
``log-start-offset`` persists the log start offset when retention moves it, before the
segments go. Retention may delete the active segment too (Kafka's deleteSegments): a new
empty one is rolled first, at the log end, so a log always has a segment and its offsets
continue after a restart. Before any of this, an interrupted compaction swap is completed
or undone (compaction_swap.py).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from groupcoord.protocol.batches import BatchHeader, InvalidBatch, record_timestamps

from .batch_times import release_older
from .checkpoint import fsync_directory, overwrite_offset_file, write_offset_file
from .errors import CorruptBatch, LogClosed, LogFailed, OffsetOutOfRange
from .log_recovery import (
    DURABLE_OFFSET_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    recover_log_directory,
)
from .segment import RELATIVE_OFFSET_MAX, SALVAGE_ALL, Segment
from .timestamp_search import max_timestamp_of

_DAY_MS = 24 * 60 * 60 * 1000
# Positions are u32 in the index; Kafka bounds segment.bytes by a Java int as well.
_SEGMENT_BYTES_LIMIT = 2**31 - 1
# How often (at most) a flush writes the durable offset file: it may lag, being a lower
# bound, and a write per flush would add a syscall to every group-commit round.
_DURABLE_OFFSET_WRITE_INTERVAL_S = 1.0


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Per-log settings; -1 means unlimited for both retention limits."""

    segment_bytes_max: int = 1024 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * _DAY_MS
    retention_bytes: int = -1
    # Roll the active segment once it is older than this, so time retention can act.
    segment_ms: int = 7 * _DAY_MS
    # Note each newest batch's timestamp in memory, for consumer lag (batch_times.py).
    batch_times: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.segment_bytes_max <= _SEGMENT_BYTES_LIMIT:
            raise ValueError(f"segment_bytes_max must be in [1, {_SEGMENT_BYTES_LIMIT}]")
        if self.index_interval_bytes < 0:
            raise ValueError("index_interval_bytes must be >= 0")
        if self.retention_ms < -1 or self.retention_bytes < -1:
            raise ValueError("retention_ms and retention_bytes must be >= -1")
        if self.segment_ms < 1:
            raise ValueError("segment_ms must be >= 1")


class FlushPlan(NamedTuple):
    """What one flush covers, snapshotted by PartitionLog.begin_flush."""

    target: int  # the durable offset once flushed
    active: Segment
    rolled: list[Segment]  # rolled since the last flush: data and index files to sync
    dir_dirty: bool  # segment files created or deleted since the last flush


class PartitionLog:
    """Segmented append-only log of one partition; see the module docstring."""

    __slots__ = (
        "__weakref__",
        "recovered_truncated_bytes",
        "recovered_salvaged_bytes",
        "recovered_damaged_offsets",
        "_directory",
        "_config",
        "_clock_ms",
        "_segments",
        "_bases",
        "_log_start_offset",
        "_next_offset",
        "_durable_offset",
        "_recovery_point",
        "_size_bytes",
        "_lock",
        "_flush_lock",
        "_unsealed",
        "_dir_dirty",
        "_flushing",
        "_deferred_close",
        "_failure",
        "_closed",
        "_generation",
        "_durable_written_s",
    )

    def __init__(self, directory: Path, config: LogConfig, clock_ms: Callable[[], int]) -> None:
        """Use `PartitionLog.open`."""
        self._directory = directory
        self._config = config
        self._clock_ms = clock_ms
        # Bytes dropped at start-up: torn or corrupt tail, and segments after it.
        self.recovered_truncated_bytes = 0
        # Bytes of damaged batches removed on open (with `salvage`, or in a segment below
        # the recovery point), the data after them kept.
        self.recovered_salvaged_bytes = 0
        # The offset ranges (first, last; last -1: to the old end) those bytes held.
        self.recovered_damaged_offsets: list[tuple[int, int]] = []
        self._segments: list[Segment] = []
        # Base offsets of _segments, for bisect.
        self._bases: list[int] = []
        self._log_start_offset = 0
        self._next_offset = 0
        self._durable_offset = 0
        self._recovery_point = 0
        self._size_bytes = 0
        # Guards bookkeeping shared with a flusher thread; never held across I/O waits.
        self._lock = threading.Lock()
        # Serializes flush() calls (and truncate/close against them); append never takes it.
        self._flush_lock = threading.Lock()
        # Segments rolled since the last flush: their data and index files need an fsync.
        self._unsealed: list[Segment] = []
        self._dir_dirty = False
        self._flushing = False
        self._deferred_close: list[Segment] = []
        self._failure: BaseException | None = None
        self._closed = False
        # Bumped after anything removes or rewrites stored data (truncation, retention,
        # compaction), never by appends or rolls: a compaction plan prepared at one
        # generation may only be installed at the same one.
        self._generation = 0
        # time.monotonic() of the last write of the durable offset file (a flush soon
        # after opening writes it).
        self._durable_written_s = -_DURABLE_OFFSET_WRITE_INTERVAL_S

    # -- opening and recovery -----------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
        salvage: bool = False,
    ) -> PartitionLog:
        """Open (creating if needed) the log in `directory`, recovering its tail.

        `clock_ms` is used for segment age (segment_ms) and modification times only.
        `salvage`: the log was closed cleanly, so a batch failing its CRC is damage, not a
        torn write: it is removed alone and the batches after it kept (Segment.recover).
        """
        _make_durable_directory(directory)
        log = cls(directory, config, clock_ms)
        try:
            log._recover(salvage)
        except BaseException:
            log._close_all()
            raise
        return log

    def _recover(self, salvage: bool) -> None:
        config = self._config
        found = recover_log_directory(
            self._directory,
            config.index_interval_bytes,
            self._clock_ms(),
            salvage,
            config.batch_times,
        )
        segments = found.segments
        active = segments[-1]
        release_older(segments)  # what recovery noted of older segments' batches
        self._segments = segments
        self._bases = [segment.base_offset for segment in segments]
        self._log_start_offset = found.log_start_offset
        self._recovery_point = active.base_offset
        self._next_offset = active.next_offset
        self._durable_offset = active.next_offset
        self._size_bytes = sum(segment.size_bytes for segment in segments)
        self._dir_dirty = found.dir_dirty
        self.recovered_truncated_bytes = found.truncated_bytes
        self.recovered_salvaged_bytes = found.salvaged_bytes
        self.recovered_damaged_offsets = found.damaged_offsets

    # -- properties ---------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def config(self) -> LogConfig:
        return self._config

    def reconfigure(self, config: LogConfig) -> None:
        """Use `config` from now on (a topic's altered configs): it steers later rolls and
        retention passes, never the data already stored. The index interval stays the
        log's own (its segments' indexes were built with it). Call on the writer thread."""
        self._config = replace(config, index_interval_bytes=self._config.index_interval_bytes)

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def next_offset(self) -> int:
        """Log end offset: the offset the next appended record gets."""
        return self._next_offset

    @property
    def durable_offset(self) -> int:
        """Every offset below this is fsynced: the high watermark clients see."""
        return self._durable_offset

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def failed(self) -> bool:
        return self._failure is not None

    @property
    def closed(self) -> bool:
        return self._closed

    # -- appending ----------------------------------------------------------------------

    def append(self, batches: bytearray, headers: Sequence[BatchHeader]) -> int:
        """Append already-validated batches (their headers in order); returns the base
        offset given to the first one.

        Base offsets are stamped into `batches` in place; the buffer is written with one
        syscall, not fsynced (see `flush`). Rolls to a new segment first when the active
        one would exceed segment_bytes_max or is older than segment_ms.
        """
        self._check_writable()
        if not headers:
            raise ValueError("append needs at least one batch")
        active = self._segments[-1]
        now_ms = self._clock_ms()
        if active.size_bytes and self._should_roll(active, len(batches), headers, now_ms):
            active = self._roll(now_ms)
        try:
            base_offset = active.append(batches, headers, now_ms)
        except OSError as exc:
            if active.torn:
                self._failure = exc
            raise
        self._size_bytes += len(batches)
        # Published after the write: a flush that sees this offset fsyncs after it.
        self._next_offset = active.next_offset
        return base_offset

    def _should_roll(
        self, active: Segment, size: int, headers: Sequence[BatchHeader], now_ms: int
    ) -> bool:
        config = self._config
        if active.size_bytes + size > config.segment_bytes_max:
            return True
        if now_ms - active.created_ms > config.segment_ms:
            return True
        # Relative offsets are u32. A batch spans at most 2**31 offsets, so the exact
        # span is only worth computing when that bound could overflow.
        used = active.next_offset - active.base_offset
        if used + len(headers) * (1 << 31) <= RELATIVE_OFFSET_MAX:
            return False
        span = sum(header.last_offset_delta + 1 for header in headers)
        return used + span - 1 > RELATIVE_OFFSET_MAX

    def roll(self) -> None:
        """Start a new, empty active segment at the log end (the active one must not be
        empty), as an append past segment_bytes_max does; the next flush makes it durable."""
        self._roll(self._clock_ms())

    def _roll(self, now_ms: int) -> Segment:
        old = self._segments[-1]
        new = self._new_segment(self._next_offset, now_ms)
        try:
            old.write_index_files()
        except BaseException:
            new.close()
            new.delete_files()
            raise
        with self._lock:
            self._segments.append(new)
            self._bases.append(new.base_offset)
            self._unsealed.append(old)
            self._dir_dirty = True
        release_older(self._segments)
        return new

    def _new_segment(self, base_offset: int, now_ms: int) -> Segment:
        config = self._config
        interval = config.index_interval_bytes
        return Segment.create(self._directory, base_offset, interval, now_ms, config.batch_times)

    # -- durability ---------------------------------------------------------------------

    def flush(self) -> int:
        """fsync everything appended so far; returns the new durable offset.

        Safe to call from a worker thread while the writer thread keeps appending: the
        end offset and the files to sync are snapshotted under the lock, the fsyncs run
        outside it. Appends made during the fsync are left for the next flush.
        """
        plan = self.begin_flush()
        return self._durable_offset if plan is None else self.end_flush(plan, data_synced=False)

    def begin_flush(self) -> FlushPlan | None:
        """The first half of a flush: takes the flush lock and snapshots what the flush
        covers. Returns None (lock released) when everything is already durable; else
        the caller must pass the plan to `end_flush`, which releases the lock.

        Split so a group committer can sync many logs' data with one syncfs() between
        the halves (storage/group_commit.py). Raises LogFailed after an earlier failure."""
        self._flush_lock.acquire()
        try:
            with self._lock:
                if self._closed:
                    self._flush_lock.release()
                    return None
                if self._failure is not None:
                    raise LogFailed(f"log {self._directory} failed earlier") from self._failure
                target = self._next_offset
                rolled = self._unsealed
                dir_dirty = self._dir_dirty
                if target == self._durable_offset and not rolled and not dir_dirty:
                    self._flush_lock.release()
                    return None
                self._unsealed = []
                self._dir_dirty = False
                self._flushing = True
                return FlushPlan(target, self._segments[-1], rolled, dir_dirty)
        except BaseException:
            self._flush_lock.release()
            raise

    def end_flush(self, plan: FlushPlan, data_synced: bool) -> int:
        """The second half of a flush (see `begin_flush`): fsyncs the segments' data and
        the directory unless `data_synced` (a syncfs() of the log's filesystem, begun after
        `begin_flush`, returned without error), then the index hints and the recovery
        point that vouches for them. Returns the new durable offset."""
        try:
            # Data first, then the names (directory), then the index hints and the
            # recovery point that vouches for them.
            rolled = plan.rolled
            if not data_synced:
                for segment in rolled:
                    segment.fsync()
                plan.active.fsync()
                if plan.dir_dirty:
                    fsync_directory(self._directory)
            if rolled:
                for segment in rolled:
                    if not segment.deleted:
                        segment.sync_index_files()
                write_offset_file(self._directory / RECOVERY_POINT_FILE, plan.active.base_offset)
                self._recovery_point = plan.active.base_offset
            self._durable_offset = plan.target
            now_s = time.monotonic()
            if rolled or now_s - self._durable_written_s >= _DURABLE_OFFSET_WRITE_INTERVAL_S:
                self._durable_written_s = now_s
                self._write_durable_offset(plan.target, sync=False)
        except BaseException as exc:
            self._finish_flush(exc)
            raise
        self._finish_flush(None)
        return plan.target

    def abort_flush(self, plan: FlushPlan, exc: BaseException) -> None:
        """Give up a flush begun by `begin_flush` whose data could not be made durable (a
        replicated log whose copy elsewhere failed, cluster/replicated_commit.py): the
        durable offset stays, and the log fails as after a failed fsync until reopened."""
        self._finish_flush(exc)

    def _finish_flush(self, failure: BaseException | None) -> None:
        """End the flush in progress; `failure` makes the log fail for good (LogFailed)."""
        with self._lock:
            if failure is not None:
                self._failure = failure
            self._flushing = False
            deferred, self._deferred_close = self._deferred_close, []
        try:
            for segment in deferred:
                segment.close()
        finally:
            self._flush_lock.release()

    def _write_durable_offset(self, offset: int, sync: bool) -> None:
        """Record that everything below `offset` is durable (see "Torn tail or damage")."""
        try:
            overwrite_offset_file(self._directory / DURABLE_OFFSET_FILE, offset, sync)
        except OSError:
            if sync:
                raise
            # Only a hint: the old value stays a lower bound, recovery just more careful.

    # -- reading ------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches starting with the one containing `offset`, at most `max_bytes`
        in total except that the first batch is always returned whole (KIP-74).

        Continues across segments while under `max_bytes`, and stops before a batch
        failing its checks. Returns b"" at the log end; raises OffsetOutOfRange below the
        log start or beyond the log end, CorruptBatch when the batch holding `offset` (or
        the way to it) is damaged.
        """
        self._check_open()
        if offset == self._next_offset:
            return b""
        segments = self._segments
        i, position = self._locate(offset)
        chunks: list[bytes] = []
        remaining = max_bytes
        while i < len(segments):
            segment = segments[i]
            try:
                data = segment.read(position, remaining, at_least_one=not chunks)
            except CorruptBatch:
                if not chunks:
                    raise
                break  # served up to the damage; the next read starts at it
            if data:
                chunks.append(data)
                remaining -= len(data)
            if position + len(data) < segment.size_bytes or remaining <= 0:
                break
            i += 1
            position = 0
        if len(chunks) == 1:
            return chunks[0]
        return b"".join(chunks)

    def _locate(self, offset: int) -> tuple[int, int]:
        """(segment index, position) of the first batch whose last offset >= `offset`;
        the position may be a segment's end when the batch is in a later segment."""
        if offset < self._log_start_offset or offset > self._next_offset:
            raise OffsetOutOfRange(offset, self._log_start_offset, self._next_offset)
        i = bisect_right(self._bases, offset) - 1
        segment = self._segments[i]
        found = segment.find_batch(offset)
        return i, found[0] if found is not None else segment.size_bytes

    def batch_headers(self, from_offset: int | None = None) -> Iterator[BatchHeader]:
        """Headers of the stored batches from the one containing `from_offset` (default:
        the log start) to the current end, reading headers only."""
        self._check_open()
        offset = self._log_start_offset if from_offset is None else from_offset
        i, position = self._locate(offset)
        return self._iter_headers(i, position)

    def _iter_headers(self, i: int, position: int) -> Iterator[BatchHeader]:
        segments = self._segments
        while i < len(segments):
            try:
                for _, header in segments[i].iter_headers(position):
                    yield header
            except InvalidBatch:
                pass  # the rest of a damaged segment: reads of it raise CorruptBatch
            i += 1
            position = 0

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record, in offset order, whose timestamp is
        >= `timestamp_ms`; None if there is none (ListOffsets by timestamp)."""
        self._check_open()
        log_start = self._log_start_offset
        segments = self._segments
        first = max(bisect_right(self._bases, log_start) - 1, 0)
        for segment in segments[first:]:
            # Segments are in offset order; one whose max is below the target holds no
            # answer, and the first that qualifies usually holds it.
            if segment.max_timestamp_ms < timestamp_ms:
                continue
            start = segment.timestamp_scan_position(timestamp_ms, log_start)
            for position, header in segment.iter_headers(start):
                if header.max_timestamp < timestamp_ms or header.last_offset < log_start:
                    continue
                batch = segment.pread(position, header.size_bytes)
                # Records may be out of timestamp order: the first offset that qualifies.
                for offset, timestamp in record_timestamps(batch):
                    if timestamp >= timestamp_ms and offset >= log_start:
                        return offset, timestamp
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3);
        None when the log holds no timestamped batch (timestamp_search.py)."""
        self._check_open()
        return max_timestamp_of(self._segments, self._log_start_offset)

    def salvage_damaged(self, path: str) -> tuple[int, list[tuple[int, int]]]:
        """Remove the damaged batches of the segment file `path` (CorruptBatch.path of a
        read), keeping the valid ones after them, as recovery does (Segment.recover).
        Returns (bytes removed, offset ranges (first, last; -1: to the old end) they
        held). Writer thread. Raises LogClosed / LogFailed, OSError, ValueError."""
        with self._flush_lock:
            self._check_writable()
            paths = [str(segment.path()) for segment in self._segments]
            if path not in paths:
                raise ValueError(f"{path} is no segment of {self._directory}")
            i = paths.index(path)
            segment = self._segments[i]
            active = i == len(self._segments) - 1
            before = segment.size_bytes
            try:
                cut = segment.recover(SALVAGE_ALL)
                dropped = list(segment.salvaged_offsets)
                if cut:
                    last = -1 if active else self._bases[i + 1] - 1
                    dropped.append((segment.next_offset, last))
                segment.fsync()
                if not active:
                    segment.write_index_files()
                    segment.sync_index_files()
                if cut and active:
                    with self._lock:
                        self._next_offset = segment.next_offset
                        self._durable_offset = min(self._durable_offset, self._next_offset)
                    self._write_durable_offset(self._next_offset, sync=True)
            except BaseException as exc:
                self._failure = exc
                raise
            finally:
                self._size_bytes += segment.size_bytes - before
                self._generation += 1
        return before - segment.size_bytes, dropped

    # -- truncation and retention -------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop everything at and after `offset`: the batch containing it goes whole, so
        next_offset becomes that batch's base offset (or `offset` if it has none; in a
        gap left by compaction, the end of the last batch kept)."""
        with self._flush_lock:
            self._check_writable()
            if offset >= self._next_offset:
                return
            try:
                self._truncate_to(offset)
            finally:
                self._generation += 1

    def _truncate_to(self, offset: int) -> None:
        if offset < self._log_start_offset:
            self._reset_at(offset)
            return
        i = bisect_right(self._bases, offset) - 1
        segment = self._segments[i]
        later = self._segments[i + 1 :]
        if later:
            self._remove_segments(later)
        found = segment.find_batch(offset)
        if found is not None:
            segment.truncate_at(found[0])
        if segment.next_offset < self._log_start_offset:
            # The dropped batch straddled the log start: nothing readable is left.
            self._reset_at(self._log_start_offset)
            return
        with self._lock:
            # The segment is active again: its index files are rewritten at roll.
            self._unsealed = [s for s in self._unsealed if s is not segment]
            self._next_offset = segment.next_offset
            self._durable_offset = min(self._durable_offset, self._next_offset)
        self._size_bytes = sum(s.size_bytes for s in self._segments)
        # The cut must be durable before new appends reuse the offsets.
        segment.fsync()
        if later:
            fsync_directory(self._directory)
        self._lower_recovery_point(segment.base_offset)
        self._write_durable_offset(self._next_offset, sync=True)

    def _reset_at(self, start: int) -> None:
        """Delete every segment and restart empty at `start` (also the new log start)."""
        self._remove_segments(list(self._segments))
        try:
            new = self._new_segment(start, self._clock_ms())
            fsync_directory(self._directory)
            write_offset_file(self._directory / LOG_START_OFFSET_FILE, start)
        except BaseException as exc:
            self._failure = exc
            raise
        with self._lock:
            self._segments = [new]
            self._bases = [start]
            self._log_start_offset = start
            self._next_offset = start
            self._durable_offset = start
            self._size_bytes = 0
        self._lower_recovery_point(start)
        self._write_durable_offset(start, sync=True)

    def _lower_recovery_point(self, offset: int) -> None:
        if self._recovery_point > offset:
            write_offset_file(self._directory / RECOVERY_POINT_FILE, offset)
            self._recovery_point = offset

    def advance_log_start_offset(self, offset: int) -> int:
        """Move the log start to `offset` (never backwards), persist it and delete the
        segments wholly below it (never the active one: Kafka's log-start rule keeps the
        last segment). Returns segments deleted. Raises OffsetOutOfRange beyond the log
        end, LogClosed / LogFailed, OSError."""
        self._check_writable()
        if offset <= self._log_start_offset:
            return 0
        if offset > self._next_offset:
            raise OffsetOutOfRange(offset, self._log_start_offset, self._next_offset)
        self._set_log_start_offset(offset)
        segments = self._segments
        count = 0
        while count < len(segments) - 1 and segments[count + 1].base_offset <= offset:
            count += 1
        if count:
            self._remove_segments(segments[:count])
        return count

    def apply_retention(self, now_ms: int) -> int:
        """Delete the oldest segments whose newest record is older than retention_ms, then
        while the log stays at or above retention_bytes without them (Kafka's rule:
        retention_bytes is kept at least). Only segments wholly below the high watermark
        count, the active one included unless empty; deleting every segment rolls a new
        empty one first, at the log end, which becomes the log start. First, whatever the
        limits, the segments wholly below the log start (Kafka's
        deleteLogStartOffsetBreachedSegments: a DeleteRecords whose deletions a crash cut
        short). Returns segments deleted. Raises LogClosed / LogFailed, OSError."""
        self._check_writable()
        config = self._config
        segments = self._segments
        candidates = self._deletable_count()
        count = 0
        start = self._log_start_offset
        while count < len(segments) - 1 and segments[count + 1].base_offset <= start:
            count += 1
        if config.retention_ms >= 0:
            cutoff = now_ms - config.retention_ms
            while count < candidates and _retention_timestamp(segments[count]) < cutoff:
                count += 1
        if config.retention_bytes >= 0:
            size = self._size_bytes - sum(segment.size_bytes for segment in segments[:count])
            while (
                count < candidates and size - segments[count].size_bytes >= config.retention_bytes
            ):
                size -= segments[count].size_bytes
                count += 1
        if not count:
            return 0
        return self._delete_oldest(count)

    def _deletable_count(self) -> int:
        """How many of the oldest segments retention may consider (Kafka's
        deletableSegments before its predicate): those whose offsets all lie below the
        high watermark, the durable offset that Fetch and ListOffsets expose, so neither
        undurable data nor an offset clients cannot see yet is ever deleted; never an
        empty active segment (isLastSegmentAndEmpty): it holds nothing, and the roll that
        must precede its deletion would create a file of its own name at every pass."""
        segments = self._segments
        high_watermark = self._durable_offset
        count = 0
        for segment in segments[1:]:
            if segment.base_offset > high_watermark:
                return count
            count += 1
        active = segments[-1]
        if self._next_offset <= high_watermark and active.size_bytes:
            count += 1
        return count

    def _delete_oldest(self, count: int) -> int:
        """Delete the `count` oldest segments and move the log start to the first one
        left; when that is all of them, roll a new empty active segment first (at the log
        end) so the log always has one. Returns `count`. Raises OSError."""
        if count == len(self._segments):
            self.roll()  # its name made durable by the log start file's directory fsync
        segments = self._segments
        # Persist the new start first: a crash before the deletions is finished at open.
        self._set_log_start_offset(max(self._log_start_offset, segments[count].base_offset))
        self._remove_segments(segments[:count])
        return count

    def _set_log_start_offset(self, offset: int) -> None:
        write_offset_file(self._directory / LOG_START_OFFSET_FILE, offset)
        self._log_start_offset = offset

    def _remove_segments(self, doomed: list[Segment]) -> None:
        """Take segments out of the log, close them (or let the running flush do it) and
        delete their files."""
        doomed_ids = {id(segment) for segment in doomed}
        with self._lock:
            self._segments = [s for s in self._segments if id(s) not in doomed_ids]
            self._bases = [s.base_offset for s in self._segments]
            self._unsealed = [s for s in self._unsealed if id(s) not in doomed_ids]
            for segment in doomed:
                segment.deleted = True
            if self._flushing:
                self._deferred_close.extend(doomed)
                close_now: list[Segment] = []
            else:
                close_now = doomed
        self._size_bytes -= sum(segment.size_bytes for segment in doomed)
        for segment in close_now:
            segment.close()
        try:
            for segment in doomed:
                segment.delete_files()
        finally:
            self._generation += 1

    # -- compaction support (storage/cleaner.py) ----------------------------------------

    def segments_snapshot(self) -> tuple[int, int, tuple[Segment, ...], Segment, int]:
        """(generation, durable offset, closed segments, active segment, active size in
        bytes) as of now; callable from a worker thread. Closed segments are immutable
        until the generation changes; the active one holds whole batches up to that size.
        Raises LogClosed / LogFailed."""
        self._check_writable()
        durable = self._durable_offset
        with self._lock:
            segments = self._segments
            active = segments[-1]
            return self._generation, durable, tuple(segments[:-1]), active, active.size_bytes

    @property
    def generation(self) -> int:
        """Changes whenever stored data is removed or rewritten (see segments_snapshot)."""
        return self._generation

    def replace_segments(self, old: Sequence[Segment], new: Sequence[Segment]) -> None:
        """Put `new` in place of `old`, a prefix of the closed segments, in memory only:
        the cleaner has already swapped the files. The old segments are closed (by the
        running flush, if one may be fsyncing them). Call on the writer thread."""
        self._check_writable()
        count = len(old)
        segments = self._segments
        if count >= len(segments) or any(a is not b for a, b in zip(segments, old, strict=False)):
            raise ValueError("replace_segments needs a prefix of the closed segments")
        old_ids = {id(segment) for segment in old}
        with self._lock:
            self._segments = [*new, *segments[count:]]
            self._bases = [segment.base_offset for segment in self._segments]
            self._unsealed = [s for s in self._unsealed if id(s) not in old_ids]
            # The cleaner's last directory change (removing its marker) becomes durable
            # with the next flush.
            self._dir_dirty = True
            for segment in old:
                segment.deleted = True
            if self._flushing:
                self._deferred_close.extend(old)
                close_now: Sequence[Segment] = ()
            else:
                close_now = old
        self._size_bytes += sum(s.size_bytes for s in new) - sum(s.size_bytes for s in old)
        release_older(self._segments)  # what the cleaner noted writing `new`
        self._generation += 1
        for segment in close_now:
            segment.close()

    def mark_failed(self, exc: BaseException) -> None:
        """Fail the log for good (until reopened): its files are in a state that only
        recovery at open may resolve, such as an interrupted compaction swap."""
        with self._lock:
            if self._failure is None:
                self._failure = exc

    # -- closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the file descriptors after writing the active segment's index files.
        Does not fsync: flush first for durability."""
        with self._flush_lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._failure is None:
                    self._segments[-1].write_index_files()
            finally:
                self._close_all()

    def _close_all(self) -> None:
        for segment in self._segments:
            segment.close()
        for segment in self._deferred_close:
            segment.close()

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosed(f"log {self._directory} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._failure is not None:
            raise LogFailed(f"log {self._directory} failed earlier") from self._failure

    def __repr__(self) -> str:
        return (
            f"PartitionLog({str(self._directory)!r}, log_start_offset={self._log_start_offset},"
            f" next_offset={self._next_offset}, durable_offset={self._durable_offset},"
            f" segments={len(self._segments)})"
        )


def _retention_timestamp(segment: Segment) -> int:
    """Kafka's largestTimestamp: the newest record's timestamp, or the file's
    modification time when no batch carries one."""
    if segment.max_timestamp_ms >= 0:
        return segment.max_timestamp_ms
    return segment.last_modified_ms


def _make_durable_directory(directory: Path) -> None:
    """Create `directory` (and missing parents) with their entries fsynced in the parents:
    the log's own fsyncs cover the files in it, not its name in its parent, so a power loss
    could otherwise lose a new log with what was acknowledged in it."""
    if directory.is_dir():
        return
    highest = directory  # the highest directory about to be created
    while not highest.parent.exists():
        highest = highest.parent
    directory.mkdir(parents=True, exist_ok=True)
    created = directory
    while True:
        fsync_directory(created.parent)
        if created == highest:
            return
        created = created.parent
