"""Saying so when opening the logs cut data off them.

A log's recovery on open (storage/segment.py Segment.recover) drops everything from the
first invalid batch of its active segment on. After a crash that is an unflushed tail,
never acknowledged. After a clean shutdown nothing in the file is a torn write, so an
invalid batch is damage on disk: the logs are then opened with `salvage`, which removes a
damaged batch alone when a whole batch follows it (its records are lost, the later ones
kept), and cuts the file only where no whole batch follows. None of it passes in silence:
the server writes `clean_shutdown` into the data directory when it stops cleanly, removes
it when it starts, and logs a crash's cut as a warning and any damage as an error.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from groupcoord.storage import PartitionLog
from groupcoord.storage.checkpoint import fsync_directory

from ..observability.logging import get_logger

CLEAN_SHUTDOWN_FILE = "clean_shutdown"

log = get_logger("groupcoord.recovery")


def clean_shutdown_marked(data_dir: Path) -> bool:
    """Whether the last run stopped cleanly (the marker is left: take it once the logs
    are open, before anything may write them)."""
    return (data_dir / CLEAN_SHUTDOWN_FILE).exists()


def take_clean_shutdown_marker(data_dir: Path) -> bool:
    """Whether the last run stopped cleanly; the marker is removed (durably), so a crash
    of this run is not taken for a clean stop at the next start."""
    path = data_dir / CLEAN_SHUTDOWN_FILE
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_directory(data_dir)
    return True


def mark_clean_shutdown(data_dir: Path) -> None:
    """Called last when stopping, after every log is flushed and closed."""
    (data_dir / CLEAN_SHUTDOWN_FILE).write_bytes(b"")
    fsync_directory(data_dir)


def report_recovery(logs: Iterable[tuple[str, PartitionLog]], after_clean_shutdown: bool) -> int:
    """Log each (name, log) whose recovery cut bytes off or removed damaged batches;
    returns how many did."""
    cut = 0
    for name, log_ in logs:
        dropped = log_.recovered_truncated_bytes
        salvaged = log_.recovered_salvaged_bytes
        if not dropped and not salvaged:
            continue
        cut += 1
        if salvaged:
            log.error(
                "log damaged: recovery removed damaged batches and kept the ones after them",
                log=name,
                bytes_removed=salvaged,
                bytes_dropped_at_end=dropped,
                next_offset=log_.next_offset,
            )
        elif after_clean_shutdown:
            log.error(
                "log damaged: recovery dropped data written before a clean shutdown",
                log=name,
                bytes_dropped=dropped,
                next_offset=log_.next_offset,
            )
        else:
            log.warning(
                "log recovery dropped an unflushed tail after a crash",
                log=name,
                bytes_dropped=dropped,
                next_offset=log_.next_offset,
            )
    return cut
