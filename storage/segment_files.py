"""Which files of a log directory form the log: checks made at open, before recovery acts
on any file, so a file that disagrees with the log's own data never causes a deletion.

Why: recovery trusts names. A segment's name says where its offsets start, and recovery
cuts and deletes by that: a segment overlapping its predecessor was taken for the leftover
of a truncation and every later segment deleted (a stray `00000000000000000001.log` cost
24 valid segments); a last segment that is empty or holds no valid batch set the log end,
and so the high watermark, to its name (`...99999.log`); `log-start-offset` above the data
deleted every segment. Such files are not a crash's leftovers, which the log's own write
order rules out (below), but copies, renames and damage, and the data next to them is
acknowledged. So start-up refuses them (DataDirError naming the file and what to do)
instead of guessing which of two disagreeing files is the odd one; nothing is moved or
deleted, and once the operator has moved the odd file out the log opens as before.

What the write order allows, and so what passes:
* a segment's first batch is at or after its name's offset (after its name when the cleaner
  removed the first records), never before;
* an empty segment is the last one (a roll or retention made it) or the first one (the
  cleaner's output when nothing at all survived), never one in between;
* a last segment without a valid first batch (a roll whose first write was torn) starts
  where its predecessor ends: a gap there means the name is not the log's;
* segments do not overlap (checked while recovery opens them: `overlap_error`);
* the log start offset is at most the log end (`log_start_error`): retention moves it only
  to a durable segment's base.
"""

from __future__ import annotations

import os
from pathlib import Path

from groupcoord.protocol.batches import HEADER_SIZE, BatchHeader, InvalidBatch, crc_ok, parse_header

from .errors import DataDirError
from .segment import INDEX_SUFFIX, LOG_SUFFIX, segment_file_name

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_MOVE_IT = "if it does not belong to this log, move it out of the directory and start again"


def check_segment_files(directory: Path, bases: list[int]) -> None:
    """Refuse segment files (`bases`, sorted) that disagree with the log's data, as the
    module docstring lists. Read-only: each file's first batch, and the predecessor's batch
    headers only when the last file has no valid first batch. Raises DataDirError."""
    last = len(bases) - 1
    for i, base in enumerate(bases):
        path = directory / segment_file_name(base, LOG_SUFFIX)
        size, first = _first_batch(path)
        if first is not None and first.base_offset < base:
            raise DataDirError(
                f"segment file {path} starts with offset {first.base_offset}, below the "
                f"offset {base} its name says: it is not a segment of this log (a copy or a "
                f"renamed file?); {_MOVE_IT}"
            )
        if first is not None:
            continue
        if size == 0 and 0 < i < last:
            raise DataDirError(
                f"segment file {path} is empty but later segments follow it: it is not a "
                f"segment of this log; {_MOVE_IT}"
            )
        if i == last and i > 0:
            previous = directory / segment_file_name(bases[i - 1], LOG_SUFFIX)
            end = _whole_end_offset(previous, bases[i - 1])
            if end is not None and end < base:
                raise DataDirError(
                    f"segment file {path} holds no valid batch and its name would move the "
                    f"log end from {end} to {base}: it is not a segment of this log; "
                    f"{_MOVE_IT}"
                )


def overlap_error(
    directory: Path, previous_base: int, previous_end: int, base: int
) -> DataDirError:
    """The error for segment `base` overlapping its predecessor, which holds offsets up to
    `previous_end` - 1."""
    path = directory / segment_file_name(base, LOG_SUFFIX)
    previous = directory / segment_file_name(previous_base, LOG_SUFFIX)
    return DataDirError(
        f"segment file {path} overlaps {previous.name}, which holds offsets up to "
        f"{previous_end - 1}: one of them does not belong to this log; move it out of the "
        f"directory and start again"
    )


def log_start_error(path: Path, log_start: int, log_end: int) -> DataDirError:
    """The error for a log start offset file (`path`) beyond the data's end."""
    return DataDirError(
        f"{path} says the log starts at offset {log_start}, beyond the end of its data "
        f"({log_end}): the file is wrong or segments are missing. If the segments are "
        f"complete, move {path.name} out of the directory (the log then starts at its first "
        f"segment) and start again"
    )


def _first_batch(path: Path) -> tuple[int, BatchHeader | None]:
    """(file size, header of its first batch when whole and passing its CRC)."""
    fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        try:
            header = parse_header(os.pread(fd, HEADER_SIZE, 0))
        except InvalidBatch:
            return size, None
        if header.size_bytes > size or not crc_ok(os.pread(fd, header.size_bytes, 0), 0, header):
            return size, None
        return size, header
    finally:
        os.close(fd)


def _whole_end_offset(path: Path, base: int) -> int | None:
    """The offset after the last batch of segment file `path` when its batch headers run
    exactly to the end of the file; None when they stop short (a torn tail: recovery cuts
    it, and what follows it goes with it, as any crash's tail). Starts at the last entry
    of its offset index when that entry points at a batch of the offset it records."""
    fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        pos, end = _index_hint(path.with_name(segment_file_name(base, INDEX_SUFFIX)), base)
        if pos >= size or not _header_at(fd, pos, end):
            pos, end = 0, base
        while pos < size:
            try:
                header = parse_header(os.pread(fd, HEADER_SIZE, pos))
            except InvalidBatch:
                return None
            if header.base_offset < end or pos + header.size_bytes > size:
                return None
            end = header.last_offset + 1
            pos += header.size_bytes
        return end
    finally:
        os.close(fd)


def _index_hint(index: Path, base: int) -> tuple[int, int]:
    """(file position, offset) of the last entry of an offset index; (0, base) without one."""
    try:
        data = index.read_bytes()
    except OSError:
        return 0, base
    usable = len(data) - len(data) % 8
    if usable == 0:
        return 0, base
    relative = int.from_bytes(data[usable - 8 : usable - 4], "big")
    position = int.from_bytes(data[usable - 4 : usable], "big")
    return position, base + relative


def _header_at(fd: int, pos: int, offset: int) -> bool:
    """Whether a batch header with base offset `offset` sits at `pos`."""
    try:
        return parse_header(os.pread(fd, HEADER_SIZE, pos)).base_offset == offset
    except InvalidBatch:
        return False
