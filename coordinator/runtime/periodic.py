"""A periodic background pass (the log cleaners of the coordinator's shard logs and of
compacted topics): one loop, one way of logging what a pass did or why it failed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ..observability.logging import get_logger

log = get_logger("groupcoord.cleaner")


async def run_periodically(
    interval_ms: int, one_pass: Callable[[], Awaitable[int]], logs: str
) -> None:
    """`one_pass()` every `interval_ms` until cancelled. It returns the records it dropped
    (logged when any); one that raises is logged and the next runs as usual (a failed
    compaction leaves the old segments in place). `logs` names what it cleans."""
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            dropped = await one_pass()
        except Exception as e:
            log.error("log compaction failed", logs=logs, error=repr(e))
            continue
        if dropped:
            log.info("compacted logs", logs=logs, records_dropped=dropped)
