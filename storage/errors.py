"""Exceptions raised by the storage layer.

The server maps them onto Kafka error codes: OffsetOutOfRange -> OFFSET_OUT_OF_RANGE,
CorruptBatch -> CORRUPT_MESSAGE, LogFailed / OSError -> KAFKA_STORAGE_ERROR (NOT_COORDINATOR
for coordinator logs).
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class of the storage layer's own errors (OSError passes through unwrapped)."""


class OffsetOutOfRange(StorageError):
    """The requested offset is below the log start offset or beyond the log end offset."""

    def __init__(self, offset: int, log_start_offset: int, next_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside the log range [{log_start_offset}, {next_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.next_offset = next_offset


class CorruptBatch(StorageError):
    """A stored batch failed its checks when read (CRC-32C, length, offsets): it is never
    served. Raised by a read that starts at it; a read that reaches it later returns the
    batches before it.

    `position`: its byte position in `path`; `first_report`: True the first time this
    batch is raised, so the owner logs and counts each damaged batch once."""

    def __init__(self, path: str, position: int, reason: str, first_report: bool) -> None:
        super().__init__(f"corrupt batch at byte {position} of {path}: {reason}")
        self.path = path
        self.position = position
        self.reason = reason
        self.first_report = first_report


class LogClosed(StorageError):
    """The partition log was closed; its file descriptors are gone."""


class LogFailed(StorageError):
    """An earlier write or fsync failed: nothing may be trusted until the log is reopened.

    After a failed fsync the kernel may already have dropped the dirty pages, so a retry that
    succeeds would claim durability for lost data ("fsyncgate"). The failure is therefore
    sticky; the owner closes the log and opens it again, which re-validates the tail.
    """


class TooManyWaiters(StorageError):
    """The group committer already parks its configured maximum of waiters."""


class CommitterClosed(StorageError):
    """The group committer is closed and accepts no new waiters."""


class CompactionError(StorageError):
    """Compaction cannot proceed: a corrupt batch in a closed segment, an unreadable swap
    marker, or another compaction of the same log already under way."""


class DataDirError(StorageError):
    """A file of the data directory disagrees with the data it sits with, is unreadable,
    or is missing: the server refuses to start rather than guess (and maybe delete). The
    message names the file, what is wrong and what the operator can do."""


class PartitionFenced(StorageError):
    """serve --cluster: this node's lease on the partition moved (or was re-acquired at a
    higher epoch), so the database refused the write: it no longer leads the partition
    (NOT_LEADER_OR_FOLLOWER)."""


class NotInMemory(StorageError):
    """serve --cluster: a partition log in PostgreSQL no longer holds the offset's batches
    in memory; the caller reads them from the database (awaiting `read_stored`)."""
