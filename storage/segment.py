"""One segment of a partition log: a file of record batches plus two sparse indexes.

Theory of operation
-------------------
A segment stores whole magic-v2 record batches, exactly as they were appended and in offset
order, in ``<base offset as 20 digits>.log``. Two sparse indexes speed up lookups:

* ``.index``: big-endian (relative offset u32, file position u32) pairs. An entry is added
  for a batch once more than ``index_interval_bytes`` were appended since the previous
  entry (Kafka's rule). The relative offset is the batch's base offset minus the segment's.
* ``.timeindex``: big-endian (timestamp i64, relative offset u32) pairs, added at the same
  points when the largest timestamp seen so far has grown. The offset is that of the first
  batch reaching that timestamp, so every batch before it has a smaller max timestamp: a
  timestamp search may start at the last entry whose timestamp is <= the target.

Both live in memory as ``array`` columns (about 20 bytes per 4 KiB of log) for bisect
lookups. The files are written whole when a segment stops being active (roll) and at close,
and fsynced by the next flush. The active segment is always re-scanned at start-up, so
writing its index piecemeal would only add syscalls to the append path. Index files are
hints: on load they are checked against the log (sizes, monotonic entries, and the batches
after the last entry) and rebuilt by a full scan when absent or inconsistent.

A segment reaches its file through a FileHandle of the process-wide LRU of open files
(open_files.py): a descriptor that the LRU closed is reopened on the next use, and each
system call pins it. Reads use ``pread`` so they never disturb, or depend on, a file
position.

Verification on read. A closed segment whose index files are consistent is trusted at
start-up without reading its batches, so damage on disk inside it would be served. Each
segment therefore remembers which byte ranges hold batches already checked (scanned by
recovery, appended after validation, or read before): a read of bytes outside them checks
each batch it returns (length within the data, offsets increasing within the segment,
CRC-32C) and never returns a bad one, so the steady read path pays one bisect and the
first read of a closed segment one CRC pass (about 0.7 ms per MiB). A damaged batch is
remembered by position: a read that reaches it returns the batches before it, a read
that starts at it raises CorruptBatch (``first_report`` once per batch, so it is logged
once). Header walks (``find_batch``) raise it too when a length leads off a batch
boundary, so a bad length never yields a batch running past the segment.
"""

from __future__ import annotations

import errno
import os
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from itertools import islice
from operator import le
from pathlib import Path

from groupcoord.protocol.batches import (
    CRC_FROM,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    InvalidBatch,
    batch_size_at,
    calc_crc32c,
    crc_ok,
    header_struct,
    parse_header,
    set_base_offset_and_leader_epoch,
)

from .batch_times import MAX_ENTRIES, BatchTimes
from .errors import CorruptBatch
from .index_files import (
    INDEX_ENTRY_BYTES,
    TIME_INDEX_ENTRY_BYTES,
    decode_offset_index,
    decode_time_index,
    encode_offset_index,
    encode_time_index,
    strictly_increasing,
)
from .open_files import OPEN_FILES, FileHandle
from .salvage import CHUNK_BYTES, next_valid_batch, rewrite_without

# The only leader epoch of a single node that has led every partition from the start: each
# appended batch is stamped with it (as Kafka's leader stamps its epoch, 0 on a new
# single-node cluster), and Metadata and ListOffsets answer it.
LEADER_EPOCH = 0

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
# Relative offsets and file positions are stored as u32 in the index files.
RELATIVE_OFFSET_MAX = 0xFFFF_FFFF
NO_TIMESTAMP = -1
# The header fields a read's check needs (Segment._verify), the others skipped.
_VERIFY_FIELDS = header_struct(
    "base_offset", "batch_length", "magic", "crc", "last_offset_delta", "records_count"
)
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
# What find_batch's walk reads of each batch it steps over.
_STEP_FIELDS = header_struct("base_offset", "batch_length", "magic", "last_offset_delta")
# Segment.recover's `salvage_below` meaning "every invalid batch is damage, none a torn
# write" (a file closed cleanly, or fsynced whole).
SALVAGE_ALL = 2**63

# Header scans read this much at a time: several small batches per syscall, while a big
# batch costs one small read instead of reading its body.
_SCAN_CHUNK_BYTES = 8 * 1024
# Recovery reads whole batches to check their CRC; big reads keep the syscall count low.
_RECOVERY_CHUNK_BYTES = CHUNK_BYTES
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

if array("I").itemsize != 4 or array("q").itemsize != 8:  # pragma: no cover - exotic ABI
    raise ImportError("storage.segment needs 4-byte array('I') and 8-byte array('q')")


def segment_file_name(base_offset: int, suffix: str) -> str:
    """`<base offset as 20 digits><suffix>`, Kafka's naming, so files sort by offset."""
    return f"{base_offset:020d}{suffix}"


def parse_segment_file_name(name: str) -> int | None:
    """Base offset of a `<20 digits>.log` file name; None for any other name."""
    stem, _, ext = name.partition(".")
    if ext != LOG_SUFFIX[1:] or len(stem) != 20 or not (stem.isascii() and stem.isdigit()):
        return None
    return int(stem)


class Segment:
    """A `.log` file of record batches with its in-memory sparse indexes.

    Not thread-safe by itself: the owning PartitionLog calls everything from its writer
    thread, except `fsync` and `sync_index_files`, which a flusher thread may call
    concurrently with `append` (fsync and pwrite on one descriptor are safe together).
    """

    __slots__ = (
        "directory",
        "base_offset",
        "next_offset",
        "size_bytes",
        "max_timestamp_ms",
        "offset_of_max_timestamp",
        "created_ms",
        "last_modified_ms",
        "deleted",
        "torn",
        "salvaged_bytes",
        "salvaged_offsets",
        "_file",
        "_index_interval_bytes",
        "_bytes_since_index",
        "_index_rel",
        "_index_pos",
        "_time_ts",
        "_time_rel",
        "_verified_starts",
        "_verified_ends",
        "_damaged",
        "batch_times",
    )

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        file: FileHandle,
        index_interval_bytes: int,
        created_ms: int,
        last_modified_ms: int,
        batch_times: bool = False,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        # Offset after the last batch's last offset (== base_offset while empty).
        self.next_offset = base_offset
        self.size_bytes = 0
        # Largest batch max timestamp, and the base offset of the first batch having it.
        self.max_timestamp_ms = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self.created_ms = created_ms
        self.last_modified_ms = last_modified_ms
        # Set once the segment left its log; a flush still fsyncing it then closes it.
        self.deleted = False
        # A failed write could not be rolled back: the file may end in a partial batch.
        self.torn = False
        # Bytes of damaged batches the last recover() removed, and the offset ranges
        # (first, last) they should have held.
        self.salvaged_bytes = 0
        self.salvaged_offsets: list[tuple[int, int]] = []
        self._file = file
        self._index_interval_bytes = index_interval_bytes
        self._bytes_since_index = 0
        self._index_rel = array("I")
        self._index_pos = array("I")
        self._time_ts = array("q")
        self._time_rel = array("I")
        # Sorted, disjoint, non-adjacent byte ranges [start, end) of checked batches (see
        # the module docstring); a new segment's appends extend the one at 0.
        self._verified_starts: list[int] = [0]
        self._verified_ends: list[int] = [0]
        # Position of a damaged batch found by a read -> [reason, already raised].
        self._damaged: dict[int, list[object]] = {}
        # Each newest batch's lag timestamp (batch_times.py), noted with the batch; None
        # in a log that keeps none (LogConfig.batch_times).
        self.batch_times = BatchTimes() if batch_times else None

    # -- construction -------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        now_ms: int,
        batch_times: bool = False,
    ) -> Segment:
        """A new, empty segment (an existing file of that name is truncated)."""
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            # Leftover index files of an earlier segment with this base would be taken
            # for this one's at the next start-up.
            _unlink_quietly(directory / segment_file_name(base_offset, suffix))
        file = OPEN_FILES.open(
            directory / segment_file_name(base_offset, LOG_SUFFIX),
            os.O_RDWR | os.O_CREAT | os.O_TRUNC,
            0o644,
        )
        return cls(directory, base_offset, file, index_interval_bytes, now_ms, now_ms, batch_times)

    @classmethod
    def create_at(
        cls, path: Path, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: int
    ) -> Segment:
        """A new, empty segment written to `path` instead of its own name: the log
        cleaner writes `<base>.log.cleaned` and renames it into place later (the open
        descriptor follows the rename). Its `path()` names stay the final ones. Its
        descriptor is held open until `renamed_into_place` or `close`: a reopen by name
        meanwhile could miss the file."""
        file = OPEN_FILES.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        file.hold()
        return cls(directory, base_offset, file, index_interval_bytes, now_ms, now_ms)

    def renamed_into_place(self) -> None:
        """A `create_at` segment's file now has its final name (`path()`)."""
        self._file.renamed(self.path())

    @classmethod
    def open_existing(
        cls, directory: Path, base_offset: int, index_interval_bytes: int, batch_times: bool = False
    ) -> Segment:
        """Open a segment file; call `load_index_files` or `recover` before using it."""
        path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        file = OPEN_FILES.open(path, os.O_RDWR)
        try:
            st = os.stat(path)
        except BaseException:
            file.close()
            raise
        mtime_ms = st.st_mtime_ns // 1_000_000
        segment = cls(
            directory, base_offset, file, index_interval_bytes, mtime_ms, mtime_ms, batch_times
        )
        segment.size_bytes = st.st_size
        segment._verified_starts, segment._verified_ends = [], []
        return segment

    def path(self, suffix: str = LOG_SUFFIX) -> Path:
        return self.directory / segment_file_name(self.base_offset, suffix)

    # -- appending ----------------------------------------------------------------------

    def append(self, buf: bytearray, headers: Sequence[BatchHeader], now_ms: int) -> int:
        """Stamp offsets and the leader epoch into the batches of `buf`, write it with one
        syscall, index it.

        Returns the first batch's base offset. The buffer is mutated in place (base
        offsets and leader epochs sit outside the CRC). On a write error the file is cut
        back to its old size and nothing changes here; if even that fails, `torn` is set.
        """
        first_offset = self.next_offset
        offset = first_offset
        pos = 0
        for header in headers:
            size = header.batch_length + LOG_OVERHEAD
            # Cheap guard against a caller passing headers of another buffer: a mismatch
            # here would corrupt the log for good.
            if batch_size_at(buf, pos) != size:
                raise ValueError(f"batch at byte {pos} does not match its header")
            set_base_offset_and_leader_epoch(buf, pos, offset, header.batch_length, LEADER_EPOCH)
            offset += header.last_offset_delta + 1
            pos += size
        if pos != len(buf):
            raise ValueError(f"headers cover {pos} bytes of a {len(buf)} byte payload")
        if offset - 1 - self.base_offset > RELATIVE_OFFSET_MAX:
            raise ValueError("append would overflow the segment's relative offsets")
        self._write_all(buf)

        position = self.size_bytes
        offset = first_offset
        for header in headers:
            size = header.batch_length + LOG_OVERHEAD
            self._note_batch(position, offset, size, header)
            offset += header.last_offset_delta + 1
            position += size
        self._extend_verified(position)
        self.size_bytes = position
        self.last_modified_ms = now_ms
        return first_offset

    def append_with_offsets(
        self, buf: bytes | bytearray, headers: Sequence[BatchHeader], now_ms: int
    ) -> None:
        """Append whole batches that already carry their final offsets, with gaps
        allowed between them (the log cleaner's output: every record keeps its original
        offset). Offsets must increase from `next_offset` and stay within the relative
        offset range; one write, indexed as `append` does."""
        offset = self.next_offset
        pos = 0
        for header in headers:
            size = header.batch_length + LOG_OVERHEAD
            if batch_size_at(buf, pos) != size:
                raise ValueError(f"batch at byte {pos} does not match its header")
            if header.base_offset < offset:
                raise ValueError(f"batch offset {header.base_offset} is below {offset}")
            if header.last_offset - self.base_offset > RELATIVE_OFFSET_MAX:
                raise ValueError("batch would overflow the segment's relative offsets")
            offset = header.last_offset + 1
            pos += size
        if pos != len(buf):
            raise ValueError(f"headers cover {pos} bytes of a {len(buf)} byte payload")
        if not headers:
            return
        self._write_all(buf)
        position = self.size_bytes
        for header in headers:
            size = header.batch_length + LOG_OVERHEAD
            self._note_batch(position, header.base_offset, size, header)
            position += size
        self._extend_verified(position)
        self.size_bytes = position
        self.last_modified_ms = now_ms

    def _write_all(self, buf: bytes | bytearray) -> None:
        position = self.size_bytes
        total = len(buf)
        written = 0
        with memoryview(buf) as view:
            try:
                # One pwrite in practice; the loop only covers a short write.
                while written < total:
                    n = self._file.pwrite(view[written:], position + written)
                    if n <= 0:
                        raise OSError(errno.EIO, "short write to segment")
                    written += n
            except OSError:
                try:
                    self._file.truncate(position)
                except OSError:
                    self.torn = True
                raise

    def _note_batch(self, position: int, base_offset: int, size: int, header: BatchHeader) -> None:
        """Account one batch (at `base_offset`, whatever `header` says): bookkeeping, its
        lag timestamp and sparse index entries (same rule everywhere, so indexes rebuilt
        by a scan equal the ones built while appending)."""
        max_ts = header.max_timestamp
        last_offset_delta = header.last_offset_delta
        rel = base_offset - self.base_offset
        times = self.batch_times
        if times is not None:
            timestamps_ms = times.timestamps_ms
            if len(timestamps_ms) >= MAX_ENTRIES:
                times = self.batch_times = times.newest_half()
                timestamps_ms = times.timestamps_ms
            # The timestamp first: a reader that finds the offset finds it (batch_times.py).
            timestamps_ms.append(
                max_ts if header.attributes & TIMESTAMP_TYPE_MASK else header.base_timestamp
            )
            times.last_rel.append(rel + last_offset_delta)
        if max_ts > self.max_timestamp_ms:
            self.max_timestamp_ms = max_ts
            self.offset_of_max_timestamp = base_offset
        if self._bytes_since_index > self._index_interval_bytes:
            self._index_rel.append(rel)
            self._index_pos.append(position)
            time_ts = self._time_ts
            if self.max_timestamp_ms > (time_ts[-1] if time_ts else NO_TIMESTAMP):
                time_ts.append(self.max_timestamp_ms)
                self._time_rel.append(self.offset_of_max_timestamp - self.base_offset)
            self._bytes_since_index = 0
        self._bytes_since_index += size
        self.next_offset = base_offset + last_offset_delta + 1

    def _reset_state(self) -> None:
        self.next_offset = self.base_offset
        if self.batch_times is not None:
            self.batch_times = BatchTimes()
        self.max_timestamp_ms = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self._bytes_since_index = 0

    # -- loading and recovery -------------------------------------------------------------

    def load_index_files(self) -> bool:
        """Adopt the index files if consistent with the log; False means: scan instead.

        Checks entry sizes and ordering, then walks the batch headers after the last
        entry to the end of the file (a few KiB), which also yields the next offset and
        the max timestamp without reading the whole segment.
        """
        try:
            index_data = self.path(INDEX_SUFFIX).read_bytes()
            time_data = self.path(TIME_INDEX_SUFFIX).read_bytes()
        except OSError:
            return False
        if len(index_data) % INDEX_ENTRY_BYTES or len(time_data) % TIME_INDEX_ENTRY_BYTES:
            return False
        rel, pos = decode_offset_index(index_data)
        ts, time_rel = decode_time_index(time_data)
        consistent = (
            strictly_increasing(rel)
            and strictly_increasing(pos)
            and (not pos or pos[-1] < self.size_bytes)
            and len(ts) <= len(rel)
            and strictly_increasing(ts)
            and all(map(le, time_rel, islice(time_rel, 1, None)))
            and (not time_rel or time_rel[-1] <= rel[-1])
        )
        if not consistent:
            return False
        self._index_rel, self._index_pos, self._time_ts, self._time_rel = rel, pos, ts, time_rel
        # A complete index gains no entry while walking the batches after its last one;
        # one that does was cut short: scan the segment instead.
        entries = len(rel)
        if self._resume_from_indexes() and len(self._index_rel) == entries:
            return True
        self._clear_indexes()
        return False

    def recover(self, salvage_below: int = 0) -> int:
        """Validate every batch from the start, rebuilding the indexes as it goes.

        An invalid batch (cut short, not v2, failing its CRC, offsets going backwards)
        that should hold offsets at or past `salvage_below` may be a torn write: the file
        is truncated there. Returns the bytes cut off.

        One that should hold offsets below it is damage on disk, not a torn write (the
        bytes were durable, or the file was complete when closed: SALVAGE_ALL): it is
        removed alone, up to the next whole, valid batch (found by its length or, when the
        length itself is damaged, by a search), and the scan goes on (`salvaged_bytes`,
        `salvaged_offsets`): damage to one batch must not take every later, acknowledged
        one with it. Only where no valid batch follows is the file cut.
        """
        self._clear_indexes()
        self._reset_state()
        self.salvaged_bytes = 0
        self.salvaged_offsets = []
        self._damaged = {}
        file_size = self._file.size()
        # The handle stays the same when a salvage below replaces the file (it reopens).
        pread = self._file.pread
        pos = 0
        buf = b""
        buf_start = 0
        while pos < file_size:
            rel = pos - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf = pread(min(_RECOVERY_CHUNK_BYTES, file_size - pos), pos)
                buf_start, rel = pos, 0
            claimed = 0  # the invalid batch's length field, when readable
            try:
                header = parse_header(buf, rel)
            except InvalidBatch:
                header = None
            if header is not None:
                size = claimed = header.size_bytes
                valid = (
                    pos + size <= file_size
                    and header.base_offset >= self.next_offset
                    and header.last_offset - self.base_offset <= RELATIVE_OFFSET_MAX
                )
                if valid and rel + size > len(buf):
                    buf = pread(max(size, min(_RECOVERY_CHUNK_BYTES, file_size - pos)), pos)
                    buf_start, rel = pos, 0
                    valid = len(buf) >= size
                if valid and crc_ok(buf, rel, header):
                    self._note_batch(pos, header.base_offset, size, header)
                    pos += size
                    continue
            if self.next_offset >= salvage_below:
                break
            following = next_valid_batch(
                self._file,
                pos,
                claimed,
                file_size,
                self.next_offset,
                self.base_offset + RELATIVE_OFFSET_MAX,
            )
            if following is None:
                break
            next_pos, next_base = following
            rewrite_without(self._file, self.path(), pos, next_pos, file_size)
            file_size -= next_pos - pos
            self.salvaged_bytes += next_pos - pos
            self.salvaged_offsets.append((self.next_offset, next_base - 1))
            buf, buf_start = b"", pos  # the batch that followed is at `pos` now
        self.size_bytes = pos
        self._verified_starts, self._verified_ends = [0], [pos]
        if pos < file_size:
            self._file.truncate(pos)
        return file_size - pos

    def _resume_from_indexes(self) -> bool:
        """Recompute the state after the in-memory indexes by walking the batch headers
        from the last index entry to the end of the file; False if they do not fit."""
        self._reset_state()
        start = 0
        expected_first = None
        if self._time_ts:
            # Index entries are taken after accounting their batch, so the last time
            # entry is the max timestamp up to the last offset index entry.
            self.max_timestamp_ms = self._time_ts[-1]
            self.offset_of_max_timestamp = self.base_offset + self._time_rel[-1]
        if self._index_pos:
            start = self._index_pos[-1]
            expected_first = self.base_offset + self._index_rel[-1]
            if self.batch_times is not None:
                # Only the batches from there are noted: the offsets below are not covered.
                self.batch_times = BatchTimes(self._index_rel[-1] - 1)
        # Zero bytes since the last entry: the first batch walked is not indexed again.
        self._bytes_since_index = 0
        try:
            for pos, header in self.iter_headers(start):
                if pos == start and expected_first is not None:
                    if header.base_offset != expected_first:
                        return False
                elif header.base_offset < self.next_offset:
                    return False
                size = header.size_bytes
                if (
                    pos + size > self.size_bytes
                    or header.last_offset - self.base_offset > RELATIVE_OFFSET_MAX
                ):
                    return False
                self._note_batch(pos, header.base_offset, size, header)
        except InvalidBatch:
            return False
        return True

    def _clear_indexes(self) -> None:
        self._index_rel = array("I")
        self._index_pos = array("I")
        self._time_ts = array("q")
        self._time_rel = array("I")

    # -- lookups ------------------------------------------------------------------------

    def lookup_position(self, offset: int) -> int:
        """File position of a batch at or before the batch containing `offset`."""
        i = bisect_right(self._index_rel, offset - self.base_offset) - 1
        return self._index_pos[i] if i >= 0 else 0

    def iter_headers(self, start: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from `start` (a batch boundary) to the end of
        the segment as it is now, reading headers only (bodies are skipped)."""
        end = self.size_bytes
        pread = self._file.pread
        pos = start
        buf = b""
        buf_start = pos
        while pos < end:
            rel = pos - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf = pread(min(_SCAN_CHUNK_BYTES, end - pos), pos)
                buf_start, rel = pos, 0
            header = parse_header(buf, rel)
            if pos + header.size_bytes > end:
                raise InvalidBatch(f"batch length {header.batch_length} runs past the segment")
            yield pos, header
            pos += header.size_bytes

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= `offset`.
        Raises CorruptBatch where the header walk meets a header that cannot be one.

        The walk from the index entry steps over batches reading four fields of each (no
        BatchHeader built): a fetch or a lag probe between two index entries passes dozens
        of small batches."""
        pos = self.lookup_position(offset)
        end = self.size_bytes
        pread = self._file.pread
        step_fields = _STEP_FIELDS.unpack_from
        buf = b""
        buf_start = pos
        try:
            while pos < end:
                rel = pos - buf_start
                if rel + HEADER_SIZE > len(buf):
                    buf = pread(min(_SCAN_CHUNK_BYTES, end - pos), pos)
                    buf_start, rel = pos, 0
                if len(buf) - rel >= HEADER_SIZE:
                    base, length, magic, last_delta = step_fields(buf, rel)
                    if (
                        base + last_delta < offset
                        and magic == MAGIC_V2
                        and length >= _MIN_BATCH_LENGTH
                        and last_delta >= 0
                    ):
                        if pos + length + LOG_OVERHEAD > end:
                            raise InvalidBatch(f"batch length {length} runs past the segment")
                        pos += length + LOG_OVERHEAD
                        continue
                # The batch holding `offset`, or one that is no batch (parse_header says why).
                header = parse_header(buf, rel)
                if pos + header.size_bytes > end:
                    raise InvalidBatch(f"batch length {header.batch_length} runs past the segment")
                return pos, header
        except InvalidBatch as exc:
            raise self._damage(pos, str(exc)) from None
        return None

    def next_index_entry(self, position: int) -> tuple[int, int]:
        """(offset, position) of the first sparse index entry past `position`; a walk
        from `position` gains from the index (lookup_position) only for an offset at or
        above it. (sys.maxsize, sys.maxsize) past the last entry."""
        k = bisect_right(self._index_pos, position)
        if k == len(self._index_pos):
            return sys.maxsize, sys.maxsize
        return self.base_offset + self._index_rel[k], self._index_pos[k]

    def timestamp_scan_position(self, timestamp_ms: int, min_offset: int) -> int:
        """Where a search for the first record with timestamp >= `timestamp_ms` (and
        offset >= `min_offset`) may start: every batch before it has a smaller max."""
        i = bisect_right(self._time_ts, timestamp_ms) - 1
        offset = self.base_offset + self._time_rel[i] if i >= 0 else self.base_offset
        return self.lookup_position(max(offset, min_offset))

    def pread(self, position: int, size: int) -> bytes:
        return self._file.pread(size, position)

    def read(self, position: int, max_bytes: int, at_least_one: bool) -> bytes:
        """Whole batches from `position` (a batch boundary), at most `max_bytes` of them,
        except that with `at_least_one` the first batch is returned whatever its size.

        The end is found before reading (index, then a short header walk), so the data
        is read with one exact pread and never copied to trim a partial batch. Bytes no
        read checked before are checked now (see the module docstring): a damaged batch
        is never returned, the batches before it are, and a read starting at it raises
        CorruptBatch.
        """
        if position in self._damaged:
            raise self._damage(position)
        available = self.size_bytes - position
        if available <= 0:
            return b""
        if max_bytes >= available:
            end = self.size_bytes  # the segment ends on a batch boundary
        else:
            end = self._last_boundary(position, position + max(max_bytes, 0))
            if end == position:
                if not at_least_one:
                    return b""
                size = batch_size_at(self._file.pread(LOG_OVERHEAD, position), 0)
                if not HEADER_SIZE <= size <= available:
                    raise self._damage(position, f"batch size {size} does not fit the segment")
                end = position + size
        data = self._file.pread(end - position, position)
        starts = self._verified_starts
        i = bisect_right(starts, position) - 1
        if i >= 0 and self._verified_ends[i] >= end:
            return data
        return self._verify(position, data)

    def _verify(self, position: int, data: bytes) -> bytes:
        """Check the batches of `data`, read at `position`, that no read checked before:
        each whole within the data, offsets increasing within the segment's, CRC-32C.
        Returns `data`, or the batches before the first bad one (remembered; a bad first
        batch raises CorruptBatch)."""
        starts, ends = self._verified_starts, self._verified_ends
        i = bisect_right(starts, position) - 1
        pos = ends[i] - position if i >= 0 and ends[i] > position else 0
        total = len(data)
        next_min = self.base_offset
        segment_end = self.next_offset
        unpack = _VERIFY_FIELDS.unpack_from
        with memoryview(data) as view:
            while pos + HEADER_SIZE <= total:
                base, length, magic, crc, delta, count = unpack(data, pos)
                end = pos + length + LOG_OVERHEAD
                if (
                    magic != MAGIC_V2
                    or length < _MIN_BATCH_LENGTH
                    or delta < 0
                    or count < 0
                    or end > total
                    or base < next_min
                    or base + delta >= segment_end
                    or calc_crc32c(view[pos + CRC_FROM : end]) != crc
                ):
                    break
                next_min = base + delta + 1
                pos = end
        if pos:
            self._mark_verified(position, position + pos)
        if pos == total:
            return data
        reason = _why_invalid(data, pos, next_min, segment_end)
        self._damaged.setdefault(position + pos, [reason, False])
        if pos == 0:
            raise self._damage(position)
        return data[:pos]

    def _damage(self, position: int, reason: str = "") -> CorruptBatch:
        """The CorruptBatch for the damaged batch at `position` (remembered from now on);
        `first_report` only the first time."""
        entry = self._damaged.setdefault(position, [reason, False])
        first = not entry[1]
        entry[1] = True
        return CorruptBatch(str(self.path()), position, str(entry[0]), first)

    def _mark_verified(self, start: int, end: int) -> None:
        """Add [start, end) to the checked ranges, merged with those it meets."""
        starts, ends = self._verified_starts, self._verified_ends
        i = bisect_left(ends, start)  # the first range ending at or after `start`
        j = bisect_right(starts, end)  # past the last range starting at or before `end`
        if i < j:
            start = min(start, starts[i])
            end = max(end, ends[j - 1])
        starts[i:j] = [start]
        ends[i:j] = [end]

    def _extend_verified(self, new_size: int) -> None:
        """Appends were validated before they were written: a checked range ending at
        the old end grows with them."""
        ends = self._verified_ends
        if ends and ends[-1] == self.size_bytes:
            ends[-1] = new_size

    def _forget_from(self, position: int) -> None:
        """Drop what is remembered of bytes at and past `position` (truncated away)."""
        starts, ends = self._verified_starts, self._verified_ends
        k = bisect_left(starts, position)
        del starts[k:]
        del ends[k:]
        if ends and ends[-1] > position:
            ends[-1] = position
        for damaged in [p for p in self._damaged if p >= position]:
            del self._damaged[damaged]

    def _last_boundary(self, position: int, limit: int) -> int:
        """The last batch boundary in [position, limit]: starts from the last index entry
        below `limit`, so only the batches of one index interval are walked."""
        i = bisect_right(self._index_pos, limit) - 1
        pos = max(self._index_pos[i], position) if i >= 0 else position
        buf = b""
        buf_start = pos
        while pos + LOG_OVERHEAD <= limit:
            rel = pos - buf_start
            if rel + LOG_OVERHEAD > len(buf):
                buf = self._file.pread(min(_SCAN_CHUNK_BYTES, limit - pos), pos)
                buf_start, rel = pos, 0
            size = batch_size_at(buf, rel)
            if size < LOG_OVERHEAD or pos + size > limit:
                break
            pos += size
        return pos

    # -- truncation ---------------------------------------------------------------------

    def truncate_at(self, position: int) -> int:
        """Cut the file at `position` (a batch boundary); returns the bytes removed."""
        if position >= self.size_bytes:
            return 0
        self._file.truncate(position)
        removed = self.size_bytes - position
        self.size_bytes = position
        self._forget_from(position)
        k = bisect_left(self._index_pos, position)
        del self._index_rel[k:]
        del self._index_pos[k:]
        # A time entry is added at the first index point at or after its batch, so the
        # entries added at the surviving points are exactly those up to the last one's
        # offset: the indexes stay what a rebuild from scratch would produce.
        last_rel = self._index_rel[-1] if self._index_rel else -1
        k = bisect_right(self._time_rel, last_rel)
        del self._time_ts[k:]
        del self._time_rel[k:]
        if not self._resume_from_indexes():
            raise InvalidBatch(f"segment {self.path()} is inconsistent after truncation")
        return removed

    # -- durability and files -----------------------------------------------------------

    def fsync(self) -> None:
        # A segment that left its log (retention, truncation, compaction) needs no
        # durability, and its file may be gone or replaced: a reopen by name (open_files.py)
        # would fail, or sync the file now called so.
        if not self.deleted:
            self._file.fsync()

    def write_index_files(self, extra_suffix: str = "") -> None:
        """Write both index files whole (not fsynced: see `sync_index_files`).

        `extra_suffix` is appended to their names (the cleaner's `.cleaned` files)."""
        _write_file(
            self.path(INDEX_SUFFIX + extra_suffix),
            encode_offset_index(self._index_rel, self._index_pos),
        )
        _write_file(
            self.path(TIME_INDEX_SUFFIX + extra_suffix),
            encode_time_index(self._time_ts, self._time_rel),
        )

    def sync_index_files(self, extra_suffix: str = "") -> None:
        """fsync the index files written at roll; opened by name, read-only, so a segment
        deleted meanwhile is skipped instead of having its files recreated."""
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            try:
                fd = os.open(self.path(suffix + extra_suffix), os.O_RDONLY | _O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def close(self) -> None:
        self._file.close()

    @property
    def file(self) -> FileHandle:
        """The segment file's handle (its descriptor comes and goes: open_files.py)."""
        return self._file

    def delete_files(self) -> None:
        delete_segment_files(self.directory, self.base_offset)

    @property
    def index_entry_count(self) -> int:
        return len(self._index_rel)

    @property
    def time_index_entry_count(self) -> int:
        return len(self._time_ts)

    def __repr__(self) -> str:
        return (
            f"Segment(base_offset={self.base_offset}, next_offset={self.next_offset}, "
            f"size_bytes={self.size_bytes})"
        )


def _why_invalid(data: bytes, pos: int, next_min: int, segment_end: int) -> str:
    """What is wrong with the batch at `pos` of `data` that Segment._verify refused."""
    try:
        header = parse_header(data, pos)
    except InvalidBatch as exc:
        return str(exc)
    if pos + header.size_bytes > len(data):
        return f"batch length {header.batch_length} runs past the batches read"
    if header.base_offset < next_min or header.last_offset >= segment_end:
        return (
            f"batch offsets {header.base_offset}-{header.last_offset} are outside"
            f" [{next_min}, {segment_end})"
        )
    return "CRC-32C mismatch"


def delete_segment_files(directory: Path, base_offset: int) -> None:
    """Remove a segment's .log, .index and .timeindex files (whichever exist)."""
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        _unlink_quietly(directory / segment_file_name(base_offset, suffix))


def _write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC, 0o644)
    try:
        with memoryview(data) as view:
            written = 0
            while written < len(data):
                written += os.write(fd, view[written:])
    finally:
        os.close(fd)


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
