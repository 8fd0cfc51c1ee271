"""Whether the logs can be written: the failing logs, each with its last error.

A disk that is full (ENOSPC, or EFBIG past a file-size limit) or failing (EIO) makes every
append or fsync of a log fail while the server itself keeps running: /health must say so,
with the reason, and return to ok once writes succeed again. Each log is tracked on its
own: one log written successfully says nothing about another that failed (a file-size
limit hits only the big files; a nearly full disk may still take a small append into an
already allocated block). A log's failure ends when a later write to it is made durable:
a flush round that began after the failure (`mark`) succeeded for it.

Called on the event loop only (writers and the group committer's settling), so no lock.
"""

from __future__ import annotations

import errno
import os
import time
from collections import Counter
from dataclasses import dataclass

import structlog

log_ = structlog.get_logger("groupcoord.storage")


@dataclass(frozen=True, slots=True)
class StorageFailure:
    kind: str  # "append" or "flush"
    log: str  # the log's directory
    error: str  # e.g. "ENOSPC: No space left on device"
    since_ms: int  # wall-clock time of the first failure of this episode
    mark: int  # the failure's sequence number (see StorageHealth.mark)


class StorageHealth:
    """Failing logs and counts of failed writes; see the module docstring."""

    def __init__(self) -> None:
        self._failing: dict[str, StorageFailure] = {}
        self._sequence = 0
        # Failed writes since start, by kind (a metric).
        self.failed_writes: Counter[str] = Counter()

    @property
    def healthy(self) -> bool:
        return not self._failing

    def failures(self) -> list[StorageFailure]:
        """The failing logs, longest failing first."""
        return sorted(self._failing.values(), key=lambda f: (f.since_ms, f.log))

    def mark(self) -> int:
        """A point in the sequence of failures: a flush begun now covers only the
        failures recorded before it (pass this to `write_succeeded`)."""
        return self._sequence

    def write_failed(self, kind: str, directory: object, error: BaseException) -> None:
        """A write of `kind` to the log in `directory` failed with `error`."""
        self.failed_writes[kind] += 1
        self._sequence += 1
        key = str(directory)
        earlier = self._failing.get(key)
        described = describe_error(error)
        if earlier is None:
            since_ms = time.time_ns() // 1_000_000
            log_.error("log cannot be written", log=key, kind=kind, error=described)
        else:
            since_ms = earlier.since_ms
        self._failing[key] = StorageFailure(kind, key, described, since_ms, self._sequence)

    def write_succeeded(self, directory: object, mark: int) -> bool:
        """A flush of the log in `directory`, begun at `mark`, made its writes durable:
        the log's failure ends if it was recorded before then. True if one ended."""
        if not self._failing:
            return False
        key = str(directory)
        failure = self._failing.get(key)
        if failure is None or failure.mark > mark:
            return False
        del self._failing[key]
        log_.warning(
            "log written again",
            log=key,
            failing_ms=time.time_ns() // 1_000_000 - failure.since_ms,
            logs_still_failing=len(self._failing),
        )
        return True


def describe_error(error: BaseException) -> str:
    """`ENOSPC: No space left on device` for an OSError; the exception (with its cause,
    such as the fsync error behind a LogFailed) otherwise."""
    seen = 0
    current: BaseException | None = error
    while current is not None and seen < 4:
        if isinstance(current, OSError) and current.errno is not None:
            name = errno.errorcode.get(current.errno, str(current.errno))
            return f"{name}: {current.strerror or os.strerror(current.errno)}"
        current = current.__cause__
        seen += 1
    return f"{type(error).__name__}: {error}"
