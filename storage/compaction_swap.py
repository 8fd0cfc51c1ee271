"""The swap that installs a compaction's output, and its recovery after a crash.

The cleaner (cleaner.py) writes its output segments as ``<base>.log.cleaned`` and their
index files ``.index.cleaned`` / ``.timeindex.cleaned``, all fsynced; ``swap_files`` then
puts them in place of the segments they replace with three fsyncs:

1. write the marker file ``cleaner-swap`` (the end offset of the cleaned range and the
   output base offsets), durably: the commit point. From here on recovery completes the
   swap.
2. rename each output file ``.cleaned`` -> ``.swap``; delete the replaced segments that no
   output takes the name of; rename each ``.swap`` over its final name (index files
   before the ``.log``); fsync the directory.
3. delete the marker (made durable by the next flush, or by the next prepare).

Then install_compaction (cleaner.py) puts the new segments in place of the old ones in
memory (PartitionLog.replace_segments). An error from step 1 on fails the log (LogFailed)
until it is reopened.

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
from collections.abc import Sequence
from pathlib import Path

from groupcoord.protocol.batches import HEADER_SIZE, InvalidBatch, parse_header

from .checkpoint import fsync_directory
from .errors import CompactionError
from .segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    Segment,
    delete_segment_files,
    segment_file_name,
)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SWAP_MARKER_FILE = "cleaner-swap"
# A segment's files in swap order: index files first, so that once the .log is in place
# its index files are too (recovery keys on the .log).
SWAP_ORDER = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def swap_files(
    directory: Path, old: Sequence[Segment], bases: Sequence[int], end_offset: int
) -> None:
    """Steps 1-3 above: the ``.cleaned`` output segments at `bases` replace the `old`
    segments, the cleaned range ending at `end_offset`."""
    _write_marker(directory, end_offset, bases)
    for base in bases:
        for suffix in SWAP_ORDER:
            os.rename(cleaned_path(directory, base, suffix), _swap_path(directory, base, suffix))
    taken = set(bases)
    for segment in old:
        if segment.base_offset not in taken:
            delete_segment_files(directory, segment.base_offset)
    for base in bases:
        for suffix in SWAP_ORDER:
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
            for suffix in SWAP_ORDER:
                # .swap first: it was renamed from .cleaned, never the other way round.
                kinds = files.get(suffix, {})
                source = kinds.get(SWAP_SUFFIX) or kinds.get(CLEANED_SUFFIX)
                if source is not None:
                    os.replace(source, directory / segment_file_name(base, suffix))
        for files in pending.values():  # not part of this swap
            for kinds in files.values():
                for path in kinds.values():
                    unlink_quietly(path)
        fsync_directory(directory)
        os.unlink(marker)
        fsync_directory(directory)
        return True
    swaps: list[tuple[int, dict[str, Path]]] = []
    for base, files in pending.items():
        for kinds in files.values():
            cleaned = kinds.get(CLEANED_SUFFIX)
            if cleaned is not None:
                unlink_quietly(cleaned)
        swapped = {
            suffix: kinds[SWAP_SUFFIX] for suffix, kinds in files.items() if SWAP_SUFFIX in kinds
        }
        if LOG_SUFFIX in swapped:
            swaps.append((base, swapped))
        else:
            for path in swapped.values():  # index files without their segment
                unlink_quietly(path)
    for base, swapped in sorted(swaps):
        next_offset = _scan_next_offset(swapped[LOG_SUFFIX], base)
        for other in logs:
            if base < other < next_offset:
                delete_segment_files(directory, other)
        for suffix in SWAP_ORDER:
            target = directory / segment_file_name(base, suffix)
            if suffix in swapped:
                os.replace(swapped[suffix], target)
            else:
                # The old segment's index files would describe another file.
                unlink_quietly(target)
    fsync_directory(directory)
    return True


def _parse_pending_name(name: str) -> tuple[int, str, str] | None:
    """(base offset, segment file suffix, .cleaned or .swap) of a cleaner's file name."""
    for kind in (CLEANED_SUFFIX, SWAP_SUFFIX):
        if name.endswith(kind):
            stem, suffix = name[:20], name[20 : -len(kind)]
            if suffix in SWAP_ORDER and _is_segment_stem(stem):
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


def cleaned_path(directory: Path, base: int, suffix: str) -> Path:
    return directory / (segment_file_name(base, suffix) + CLEANED_SUFFIX)


def _swap_path(directory: Path, base: int, suffix: str) -> Path:
    return directory / (segment_file_name(base, suffix) + SWAP_SUFFIX)


def unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
