"""The process's file-descriptor budget: raise the soft limit, size the segment-file LRU.

A topic of 2,000 partitions needs 2,000 segment descriptors with every log's file kept
open, past a default limit of 1,024 or 2,048, and then every new connection failed. At
start the soft RLIMIT_NOFILE is raised to the hard limit (allowed without privileges),
and the LRU of open segment files (storage/open_files.py) gets its share of it: by
default half, the other half left to connections and the short-lived files of flushes.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

from groupcoord.storage.open_files import OPEN_FILES

# Descriptors kept for everything but segments and connections: the listeners, the
# event loop's own, the data directory lock, and the files a flush opens for a moment
# (directory fsyncs, recovery-point files, index files at roll).
RESERVED_FDS = 64


@dataclass(frozen=True, slots=True)
class FdLimits:
    soft_before: int  # the soft limit the process started with (-1: unlimited)
    soft: int  # after raising it
    hard: int
    segment_files_open_max: int


def raise_soft_limit() -> tuple[int, int, int]:
    """(soft before, soft now, hard) of RLIMIT_NOFILE after raising the soft limit to the
    hard one where the system allows it (an unlimited hard limit is not taken literally:
    Linux caps descriptors at fs.nr_open, so the soft limit is raised as far as accepted)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = soft
    if soft != hard:
        for target in (hard, 1 << 20, 1 << 16):
            if hard != resource.RLIM_INFINITY and target > hard:
                continue
            if soft != resource.RLIM_INFINITY and target <= soft:
                break
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            except (ValueError, OSError):
                continue
            soft = target
            break
    return before, soft, hard


def apply_fd_limits(segment_files_open_max: int) -> FdLimits:
    """Raise the soft limit and bound the segment-file LRU: `segment_files_open_max`, or
    with 0 half of the (raised) soft limit."""
    before, soft, hard = raise_soft_limit()
    if segment_files_open_max > 0:
        bound = segment_files_open_max
    else:
        usable = soft if soft != resource.RLIM_INFINITY else 1 << 20
        bound = max(16, usable // 2)
    OPEN_FILES.resize(bound)
    return FdLimits(_finite(before), _finite(soft), _finite(hard), bound)


def _finite(limit: int) -> int:
    return -1 if limit == resource.RLIM_INFINITY else limit
