"""Segmented partition logs with group commit and compaction (see log.py and cleaner.py)."""

from .cleaner import (
    CompactionPlan,
    CompactionStats,
    cleanable_range,
    compact,
    install_compaction,
    prepare_compaction,
)
from .compaction_rules import CleanableRange
from .errors import (
    CommitterClosed,
    CompactionError,
    CorruptBatch,
    DataDirError,
    LogClosed,
    LogFailed,
    OffsetOutOfRange,
    StorageError,
    TooManyWaiters,
)
from .group_commit import GroupCommitter
from .log import LogConfig, PartitionLog
from .retention import apply_retention
from .segment import LEADER_EPOCH

__all__ = [
    "CleanableRange",
    "CommitterClosed",
    "CompactionError",
    "DataDirError",
    "CompactionPlan",
    "CompactionStats",
    "CorruptBatch",
    "GroupCommitter",
    "LEADER_EPOCH",
    "LogClosed",
    "LogConfig",
    "LogFailed",
    "OffsetOutOfRange",
    "PartitionLog",
    "StorageError",
    "TooManyWaiters",
    "apply_retention",
    "cleanable_range",
    "compact",
    "install_compaction",
    "prepare_compaction",
]
