"""What PartitionLog.open finds in a log directory: its segments after recovery (see the
"Recovery." paragraph of log.py's docstring for the rules), the log start offset and what
recovery dropped or salvaged. Files that disagree with the log's own data (a stray or
renamed segment, overlapping segments, a log start beyond the data) refuse the open with
DataDirError before anything is cut or deleted on their word (segment_files.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from .checkpoint import (
    fsync_directory,
    overwrite_offset_file,
    read_offset_file,
    write_offset_file,
)
from .compaction_swap import complete_interrupted_compaction
from .segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SALVAGE_ALL,
    TIME_INDEX_SUFFIX,
    Segment,
    delete_segment_files,
    parse_segment_file_name,
    segment_file_name,
)
from .segment_files import check_segment_files, log_start_error, overlap_error

LOG_START_OFFSET_FILE = "log-start-offset"
RECOVERY_POINT_FILE = "recovery-point-offset"
# A lower bound of the durable offset: every offset below it was covered by a completed
# fsync (PartitionLog.end_flush writes it, lagging; see log.py's "Recovery.").
DURABLE_OFFSET_FILE = "durable-offset"


class RecoveredLog(NamedTuple):
    """A log directory after recovery: its segments, durable as they are, the last one
    active; the recovery point is the active segment's base offset (persisted)."""

    segments: list[Segment]
    log_start_offset: int
    # Bytes dropped: torn or corrupt tail, and segments after it.
    truncated_bytes: int
    # Bytes of damaged batches removed (with `salvage`, below the durable offset, or in a
    # segment below the recovery point), the data after them kept.
    salvaged_bytes: int
    # Offset ranges (first, last) the damaged bytes held; last -1: up to the old log end.
    damaged_offsets: list[tuple[int, int]]
    # A new segment file was created whose name only the next flush makes durable.
    dir_dirty: bool


def recover_log_directory(
    directory: Path,
    index_interval_bytes: int,
    now_ms: int,
    salvage: bool,
    batch_times: bool = False,
) -> RecoveredLog:
    """Recover the log in `directory` (it exists): complete or undo an interrupted
    compaction swap, drop leftovers, check the segments that need it, cut a torn tail,
    and make what was scanned durable. Raises OSError; the segments are closed then."""
    interval = index_interval_bytes
    # Finish (or undo) a compaction that a crash interrupted, before listing segments.
    complete_interrupted_compaction(directory)
    bases: list[int] = []
    index_files: list[tuple[str, str]] = []
    for entry in os.scandir(directory):
        name = entry.name
        if name.endswith(".tmp"):
            # An offset file write interrupted before its rename.
            os.unlink(entry.path)
            continue
        base = parse_segment_file_name(name)
        if base is not None:
            bases.append(base)
        elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)):
            index_files.append((name.partition(".")[0], entry.path))
    bases.sort()
    # Files that disagree with the log's data refuse the start before anything is cut or
    # deleted on their word (segment_files.py).
    check_segment_files(directory, bases)
    log_stems = {segment_file_name(base, "") for base in bases}
    for stem, path in index_files:
        if stem not in log_stems:
            os.unlink(path)

    start_in_file = read_offset_file(directory / LOG_START_OFFSET_FILE)
    recovery_point = read_offset_file(directory / RECOVERY_POINT_FILE) or 0
    durable = read_offset_file(directory / DURABLE_OFFSET_FILE) or 0
    # Directory entries removed here must stay removed, see the fsync below.
    entries_changed = False
    # Segments wholly below the persisted log start: retention was interrupted after
    # moving the start and before deleting them. Retention moves the start to a segment's
    # base, so a start beyond the last one is checked against the data's end first.
    if start_in_file is not None and bases and start_in_file <= bases[-1]:
        while len(bases) > 1 and bases[1] <= start_in_file:
            delete_segment_files(directory, bases.pop(0))
            entries_changed = True

    segments: list[Segment] = []
    scanned: list[Segment] = []
    truncated = 0
    salvaged = 0
    damaged: list[tuple[int, int]] = []
    dir_dirty = False
    try:
        for i, base in enumerate(bases):
            if segments and segments[-1].next_offset > base:
                # Overlaps its predecessor: truncation deletes later segments (durably)
                # before cutting, so this is no crash's leftover; refuse, delete nothing.
                previous = segments[-1]
                raise overlap_error(directory, previous.base_offset, previous.next_offset, base)
            segment = Segment.open_existing(directory, base, interval, batch_times)
            segments.append(segment)
            is_last = i == len(bases) - 1
            flushed_whole = not is_last and base < recovery_point
            if flushed_whole and segment.load_index_files():
                continue
            # A segment below the recovery point was fsynced whole before the point
            # moved past it, and offsets below the durable one were fsynced: an invalid
            # batch there is damage on disk, never a torn write, and what follows holds
            # acknowledged data. So it is salvaged and a cut stays within its segment
            # (an offset gap), reported as damage; only a cut at or past the durable
            # offset above the recovery point is a crash's tail, dropping the rest.
            cut = segment.recover(SALVAGE_ALL if salvage or flushed_whole else durable)
            salvaged += segment.salvaged_bytes
            damaged.extend(segment.salvaged_offsets)
            scanned.append(segment)
            if cut and (flushed_whole or segment.next_offset < durable):
                salvaged += cut
                damaged.append((segment.next_offset, -1 if is_last else bases[i + 1] - 1))
            elif cut:
                truncated += cut
                if not is_last:
                    truncated += _drop_segment_files(directory, bases[i + 1 :])
                    entries_changed = True
                break
        log_start = max(start_in_file or 0, segments[0].base_offset if segments else 0)
        if segments and log_start > segments[-1].next_offset:
            if any(segment.size_bytes for segment in segments):
                # Retention moves the start only to durable data: the start file is
                # wrong, or segments are missing. Never delete the data on its word.
                raise log_start_error(
                    directory / LOG_START_OFFSET_FILE, log_start, segments[-1].next_offset
                )
            # Nothing readable below a moved log start (an interrupted reset): start
            # empty at the log start.
            for segment in segments:
                truncated += segment.size_bytes
                segment.close()
                segment.delete_files()
            segments, scanned = [], []
            entries_changed = True
        if not segments:
            segments.append(Segment.create(directory, log_start, interval, now_ms, batch_times))
            # The new file's name becomes durable with the first flush.
            dir_dirty = True

        active = segments[-1]
        # Age for segment_ms across restarts: the first batch's timestamp, as Kafka does
        # (the creation time is not persisted), never in the future.
        first = next(active.iter_headers(0), None)
        first_ts = first[1].max_timestamp if first is not None else -1
        active.created_ms = min(now_ms, first_ts) if first_ts >= 0 else now_ms
        if start_in_file is not None and start_in_file != log_start:
            write_offset_file(directory / LOG_START_OFFSET_FILE, log_start)

        # What was scanned may never have been fsynced: make it durable (and seal the
        # rebuilt index files) before reporting durable_offset == next_offset.
        for segment in scanned:
            segment.fsync()
            if segment is not active:
                segment.write_index_files()
                segment.sync_index_files()
        if entries_changed or scanned:
            fsync_directory(directory)
        if recovery_point != active.base_offset:
            write_offset_file(directory / RECOVERY_POINT_FILE, active.base_offset)
        if durable != active.next_offset:
            # Everything is durable now. Lowered (a cut) durably, before new appends
            # reuse the offsets: a stale higher value would take their torn tail for
            # damage.
            overwrite_offset_file(
                directory / DURABLE_OFFSET_FILE, active.next_offset, active.next_offset < durable
            )
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return RecoveredLog(segments, log_start, truncated, salvaged, damaged, dir_dirty)


def _drop_segment_files(directory: Path, bases: list[int]) -> int:
    dropped = 0
    for base in bases:
        try:
            dropped += (directory / segment_file_name(base, LOG_SUFFIX)).stat().st_size
        except FileNotFoundError:
            pass
        delete_segment_files(directory, base)
    return dropped
