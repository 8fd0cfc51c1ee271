"""Removing damaged batches from a segment file while keeping the valid ones after them.

Segment.recover calls these when an invalid batch is damage rather than a torn write (see
log.py, "Torn tail or damage"): the next valid batch is looked for where the damaged
one's length field says it starts, or, when that field may be the damaged bytes, by a
search for the next header (its magic byte, plausible fields, then its CRC-32C); the
bytes between are cut out of the file by rewriting it under a temporary name.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from groupcoord.protocol.batches import HEADER_SIZE, InvalidBatch, crc_ok, parse_header

from .checkpoint import fsync_directory
from .open_files import FileHandle

# Whole-file passes read this much at a time.
CHUNK_BYTES = 1024 * 1024
# A batch's magic byte (v2), the marker the search looks for.
_MAGIC_AT = 16
_MAGIC = b"\x02"
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def next_valid_batch(
    file: FileHandle, pos: int, claimed: int, file_size: int, min_offset: int, last_offset_max: int
) -> tuple[int, int] | None:
    """(position, base offset) of the first whole, valid batch after the invalid one at
    `pos` whose offsets lie in [`min_offset`, `last_offset_max`]: at `pos + claimed` (its
    length field; 0 when unreadable) if one is there, else the first found by a search.
    None when there is none."""
    if claimed > 0:
        base = valid_batch_at(file, pos + claimed, file_size, min_offset, last_offset_max)
        if base is not None:
            return pos + claimed, base
    start = pos + 1
    while start + HEADER_SIZE <= file_size:
        buf = file.pread(min(CHUNK_BYTES, file_size - start), start)
        # Most candidates are rejected by their header fields before any CRC is computed.
        i = buf.find(_MAGIC, _MAGIC_AT)
        while i >= 0 and i - _MAGIC_AT + HEADER_SIZE <= len(buf):
            candidate = start + i - _MAGIC_AT
            base = valid_batch_at(
                file, candidate, file_size, min_offset, last_offset_max, buf, i - _MAGIC_AT
            )
            if base is not None:
                return candidate, base
            i = buf.find(_MAGIC, i + 1)
        if start + len(buf) >= file_size:
            return None
        start += len(buf) - HEADER_SIZE  # a header straddling the chunk's end comes next
    return None


def valid_batch_at(
    file: FileHandle,
    pos: int,
    file_size: int,
    min_offset: int,
    last_offset_max: int,
    buf: bytes = b"",
    rel: int = 0,
) -> int | None:
    """Base offset of the batch at `pos` if it is whole, passes its CRC and its offsets
    lie in [`min_offset`, `last_offset_max`] (its header read from `buf` at `rel` when
    given); else None."""
    if pos + HEADER_SIZE > file_size:
        return None
    try:
        header = parse_header(buf or file.pread(HEADER_SIZE, pos), rel)
    except InvalidBatch:
        return None
    size = header.size_bytes
    if (
        pos + size > file_size
        or header.base_offset < min_offset
        or header.last_offset > last_offset_max
    ):
        return None
    if not crc_ok(file.pread(size, pos), 0, header):
        return None
    return header.base_offset


def rewrite_without(file: FileHandle, path: Path, start: int, end: int, file_size: int) -> None:
    """Replace the file at `path` (open as `file`, `file_size` bytes) by one without bytes
    [start, end), written under a temporary name, fsynced and renamed into place, so a
    crash meanwhile leaves the old file (the temporary one is removed at the next open).
    `file` is reopened on the new file."""
    tmp = path.with_name(path.name + ".salvage.tmp")
    out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC, 0o644)
    try:
        for first, last in ((0, start), (end, file_size)):
            while first < last:
                chunk = file.pread(min(CHUNK_BYTES, last - first), first)
                if not chunk:
                    raise OSError(errno.EIO, f"short read salvaging {path}")
                with memoryview(chunk) as left:
                    while left:  # a write may take less than asked
                        left = left[os.write(out, left) :]
                first += len(chunk)
        os.fsync(out)
    finally:
        os.close(out)
    os.replace(tmp, path)
    fsync_directory(path.parent)
    file.reopen()
