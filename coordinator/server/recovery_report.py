"""Saying so when opening the logs cut data off them.

A log's recovery on open (storage/segment.py Segment.recover) drops everything from the
first invalid batch of its active segment on. After a crash that is an unflushed tail,
never acknowledged; after a clean shutdown nothing may be cut, so a cut there means data
damaged on disk, acknowledged records lost. Either way it must not pass in silence: the
server writes `clean_shutdown` into the data directory when it stops cleanly, removes it
when it starts, and logs every cut a warning (after a crash) or an error (after a clean
shutdown).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from storage import PartitionLog
from storage.checkpoint import fsync_directory

from ..observability.logging import get_logger

CLEAN_SHUTDOWN_FILE = "clean_shutdown"

log = get_logger("groupcoord.recovery")


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
    """Log each (name, log) whose recovery cut bytes off; returns how many did."""
    cut = 0
    for name, log_ in logs:
        dropped = log_.recovered_truncated_bytes
        if not dropped:
            continue
        cut += 1
        if after_clean_shutdown:
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
