"""Segmented append-only partition logs with group commit (see log.py for the design)."""

from .errors import (
    CommitterClosed,
    LogClosed,
    LogFailed,
    OffsetOutOfRange,
    StorageError,
    TooManyWaiters,
)
from .group_commit import GroupCommitter
from .log import LogConfig, PartitionLog
from .retention import apply_retention

__all__ = [
    "CommitterClosed",
    "GroupCommitter",
    "LogClosed",
    "LogConfig",
    "LogFailed",
    "OffsetOutOfRange",
    "PartitionLog",
    "StorageError",
    "TooManyWaiters",
    "apply_retention",
]
