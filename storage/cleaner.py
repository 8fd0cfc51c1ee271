"""Log compaction: keep each key's latest record, drop old tombstones (Kafka's log cleaner,
one pass over every closed segment, no dirty-ratio heuristics).

Theory of operation
-------------------
The coordinator writes keyed records (value None = tombstone) into a PartitionLog per
shard. Compaction rewrites every segment except the active one so that:

* a record stays only if it is the latest record of its key in the whole log: the offset
  map (key -> latest offset) covers the closed segments and the *durable* part of the
  active segment. A record past the durable offset never supersedes anything: a crash
  could still take it away, and the older value it replaced would be gone already.
* a tombstone that is the latest record of its key goes once its batch's max timestamp
  (the segment's modification time when the batch has none) is older than
  ``now_ms - tombstone_retention_ms``; younger ones stay so that a replay elsewhere still
  deletes the key. Dropping it is safe because every older record of that key is dropped
  in the same pass.
* records without a key are dropped (Kafka's cleaner does the same).
* transactional and control batches are kept whole and never supersede anything
  (nothing here knows whether their transaction committed); tombstones of keys that
  appear in them are kept.

Every record keeps its offset. A batch keeps its base offset, last offset delta (as
Kafka's cleaner does, so producer sequence state and the segment's end offset survive),
timestamps, producer fields and compression; only the records that go are cut out, and
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
from aiokafka.record.util import calc_crc32c, decode_varint

from protocol.batches import (
    HEADER_SIZE,
    LOG_OVERHEAD,
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
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
# Byte positions in the batch header (see protocol/batches.py).
_BATCH_LENGTH_AT = 8
_CRC_AT = 17
_CRC_FROM = 21
_RECORDS_COUNT_AT = 57


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
        # Base offset of the first segment not cleaned (the active one at prepare).
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
    log: PartitionLog, now_ms: int, tombstone_retention_ms: int = TOMBSTONE_RETENTION_MS_DEFAULT
) -> CompactionStats:
    """Compact `log` in one go: prepare and install on the calling thread, which must be
    the log's writer thread (no append may run meanwhile). See the module docstring."""
    plan = prepare_compaction(log, now_ms, tombstone_retention_ms)
    stats = install_compaction(log, plan)
    if stats is None:  # pragma: no cover - only another thread could have changed the log
        raise CompactionError(f"{log.directory} changed during compaction")
    return stats


def prepare_compaction(
    log: PartitionLog, now_ms: int, tombstone_retention_ms: int = TOMBSTONE_RETENTION_MS_DEFAULT
) -> CompactionPlan:
    """Clean every closed segment of `log` into ``.cleaned`` files (fsynced); nothing in
    the log changes. Safe in a worker thread while the writer appends and flushes.

    Raises CompactionError when a compaction of this log is already prepared, or on a
    corrupt batch; LogClosed / LogFailed; OSError.
    """
    if tombstone_retention_ms < 0:
        raise ValueError("tombstone_retention_ms must be >= 0")
    _claim(log)
    try:
        return _prepare(log, now_ms, now_ms - tombstone_retention_ms)
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


# -- prepare ---------------------------------------------------------------------------


def _prepare(log: PartitionLog, now_ms: int, horizon_ms: int) -> CompactionPlan:
    generation, durable, closed, active, active_size = log.segments_snapshot()
    if not closed:
        return CompactionPlan(log, generation, (), [], active.base_offset, _NOTHING)
    directory = log.directory
    # The previous install removed its marker without fsyncing the directory: make that
    # durable before new .cleaned files appear, or recovery would take them for its own.
    fsync_directory(directory)
    if (directory / SWAP_MARKER_FILE).exists():
        raise CompactionError(f"{directory} has an unfinished compaction swap")
    try:
        latest, pinned = _offset_map(closed, active, active_size, durable)
        return _clean(
            log, generation, closed, active.base_offset, latest, pinned, horizon_ms, now_ms
        )
    except (OSError, InvalidBatch) as exc:
        # Files read through our own descriptors may have been cut or deleted under us.
        if log.generation != generation:
            return CompactionPlan(log, generation, (), [], active.base_offset, _NOTHING, True)
        if isinstance(exc, InvalidBatch):
            raise CompactionError(f"cannot compact {directory}: {exc}") from exc
        raise


def _offset_map(
    closed: Sequence[Segment], active: Segment, active_size: int, durable: int
) -> tuple[dict[bytes, int], set[bytes]]:
    """(key -> latest offset, keys of transactional records) over the closed segments and
    the active segment's batches below the durable offset."""
    latest: dict[bytes, int] = {}
    pinned: set[bytes] = set()
    sources: list[tuple[Path, int, int | None]] = [
        (segment.path(), segment.size_bytes, None) for segment in closed
    ]
    sources.append((active.path(), active_size, durable))
    for path, size, limit in sources:
        with closing(_iter_batches(path, size, limit)) as batches:
            for header, batch in batches:
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
    return latest, pinned


def _clean(
    log: PartitionLog,
    generation: int,
    closed: tuple[Segment, ...],
    end_offset: int,
    latest: dict[bytes, int],
    pinned: set[bytes],
    horizon_ms: int,
    now_ms: int,
) -> CompactionPlan:
    directory = log.directory
    config = log.config
    groups: list[Segment] = []
    group_mtime: list[int] = []
    kept = dropped = tombstones = 0
    try:
        for source in closed:
            out: list[bytes] = []
            headers: list[BatchHeader] = []
            out_size = 0
            with closing(_iter_batches(source.path(), source.size_bytes, None)) as batches:
                for header, batch in batches:
                    result, k, d, t = _filter_batch(
                        header, batch, latest, pinned, horizon_ms, source.last_modified_ms
                    )
                    kept, dropped, tombstones = kept + k, dropped + d, tombstones + t
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
        if not dropped and len(groups) == len(closed):
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
    header: BatchHeader,
    batch: bytes,
    latest: dict[bytes, int],
    pinned: set[bytes],
    horizon_ms: int,
    fallback_ms: int,
) -> tuple[bytes | None, int, int, int]:
    """(the batch to keep: `batch` itself, a rewrite, or None; records kept, dropped,
    tombstones dropped)."""
    if header.is_control or header.is_transactional:
        return batch, header.records_count, 0, 0
    data, records = _decode_records(header, batch)
    base = header.base_offset
    timestamp = header.max_timestamp if header.max_timestamp >= 0 else fallback_ms
    expired = timestamp < horizon_ms
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
    if not dropped:
        return batch, len(survivors), 0, 0
    if not survivors:
        return None, 0, dropped, tombstones
    body: bytes = b"".join(data[start:end] for start, end, _, _, _ in survivors)
    if header.compression:
        body = _compress(header.compression, body)
    out = bytearray(HEADER_SIZE + len(body))
    out[:HEADER_SIZE] = batch[:HEADER_SIZE]
    out[HEADER_SIZE:] = body
    _I32.pack_into(out, _BATCH_LENGTH_AT, len(out) - LOG_OVERHEAD)
    _I32.pack_into(out, _RECORDS_COUNT_AT, len(survivors))
    _U32.pack_into(out, _CRC_AT, calc_crc32c(memoryview(out)[_CRC_FROM:]))
    return bytes(out), len(survivors), dropped, tombstones


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
