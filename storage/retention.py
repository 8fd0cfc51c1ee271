"""Periodic retention over many logs.

The server calls `apply_retention` on a timer, from the thread that appends to the logs
(segment deletion closes file descriptors that reads use). Time comes in as `now_ms`, so
tests drive it without a clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from .log import PartitionLog


def apply_retention(logs: Iterable[PartitionLog], now_ms: int) -> int:
    """Apply each log's retention; returns the number of segments deleted.

    Closed and failed logs are skipped. A log whose retention raises does not stop the
    others: the first such error is raised once every log had its turn.
    """
    deleted = 0
    first_error: OSError | None = None
    for log in logs:
        if log.closed or log.failed:
            continue
        try:
            deleted += log.apply_retention(now_ms)
        except OSError as exc:
            first_error = first_error or exc
    if first_error is not None:
        raise first_error
    return deleted
