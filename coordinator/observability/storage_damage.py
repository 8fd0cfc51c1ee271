"""Damage found in stored batches: one JSON error line and one count per damaged batch.

A read that meets a batch failing its checks (storage/segment.py, "Verification on read")
raises CorruptBatch; recovery at open and a coordinator shard's replay remove damaged
batches and keep the valid ones after them (Segment.recover). Each is said once here and
counted in groupcoord_storage_corrupt_batches_total{log=...}.
"""

from __future__ import annotations

from collections.abc import Sequence

from groupcoord.storage import CorruptBatch

from .logging import get_logger
from .metrics import ServerMetrics

log = get_logger("groupcoord.storage")


def report_corrupt_read(
    metrics: ServerMetrics | None, log_name: str, offset: int, exc: CorruptBatch
) -> None:
    """A read at `offset` refused a damaged batch (its readers get an error): said and
    counted the first time that batch is refused only."""
    if not exc.first_report:
        return
    log.error(
        "log damaged: a stored batch failed its checks and is not served",
        log=log_name,
        file=exc.path,
        offset=offset,
        position=exc.position,
        reason=exc.reason,
    )
    if metrics is not None:
        metrics.storage_corrupt_batches.labels(log_name).inc()


def report_damage_removed(
    metrics: ServerMetrics | None,
    log_name: str,
    where: str,
    offsets: Sequence[tuple[int, int]],
    bytes_removed: int,
    **fields: object,
) -> None:
    """Damaged batches were removed from the log in `where` (a file or directory), the
    valid batches after them kept: `offsets` are the (first, last) ranges they held (last
    -1: up to the old end of the log)."""
    log.error(
        "log damaged: damaged batches removed, the valid batches after them kept",
        log=log_name,
        file=where,
        offsets_dropped=[list(r) for r in offsets],
        bytes_removed=bytes_removed,
        **fields,
    )
    if metrics is not None:
        metrics.storage_corrupt_batches.labels(log_name).inc(max(len(offsets), 1))
