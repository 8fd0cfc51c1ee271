"""Segmented partition logs with group commit and compaction (see log.py and cleaner.py)."""

from .cleaner import (
    CompactionError,
    CompactionPlan,
    CompactionStats,
    compact,
    install_compaction,
    prepare_compaction,
)
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
    "CompactionError",
    "CompactionPlan",
    "CompactionStats",
    "GroupCommitter",
    "LogClosed",
    "LogConfig",
    "LogFailed",
    "OffsetOutOfRange",
    "PartitionLog",
    "StorageError",
    "TooManyWaiters",
    "apply_retention",
    "compact",
    "install_compaction",
    "prepare_compaction",
]
