"""The group events in the log (issue 20): one INFO line per event of groups/events.py,
written at the end of the loop turn that derived them, where a burst of the same event
for many members of one group becomes one line listing them.

Why. A JSON log line costs ~50 us of loop time: 20,000 members expiring together (their
removals run in slices of a few members per turn) would spend a second of loop time on
their lines alone, as long as the expiry itself (issue 16's target: all gone within a
session timeout + 1 s). So events of one group with the same kind, generation or epoch and
cause, at least BURST_MIN of them in one turn, are written as one line with `member_ids`
(the first MEMBER_IDS_LISTED of them) and `member_count`. Fewer are written one line each,
as before; the rebalance timeline keeps every event whatever the log does."""

from __future__ import annotations

import asyncio
from typing import Any

from ..groups.events import GroupEvent

# Same-kind events of one group in one turn from which one line lists them all.
BURST_MIN = 8
MEMBER_IDS_LISTED = 100


class GroupEventLog:
    """The shards' event sink (GroupEvents.sink): collects a turn's events, logs them at
    its end (`flush`; at once when no loop runs)."""

    def __init__(self, logger: Any) -> None:
        self.logger = logger
        self._pending: list[GroupEvent] = []

    def __call__(self, event: GroupEvent) -> None:
        pending = self._pending
        pending.append(event)
        if len(pending) == 1:
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop in this thread: write it now
                self.flush()

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        bursts: dict[tuple[str, str, int, str], list[GroupEvent]] = {}
        for event in pending:
            if event.member_id is not None:
                key = (event.group_id, event.event, event.generation_or_epoch, event.cause)
                bursts.setdefault(key, []).append(event)
        written: set[tuple[str, str, int, str]] = set()
        for event in pending:
            key = (event.group_id, event.event, event.generation_or_epoch, event.cause)
            burst = bursts.get(key) if event.member_id is not None else None
            if burst is None or len(burst) < BURST_MIN:
                self._line(event)
            elif key not in written:  # the burst's line, where its first event was
                written.add(key)
                self._burst_line(burst)

    def _line(self, event: GroupEvent) -> None:
        self.logger.info(
            "group event",
            group_event=event.event,
            group=event.group_id,
            generation_or_epoch=event.generation_or_epoch,
            member_id=event.member_id,
            cause=event.cause,
            details=event.details,
        )

    def _burst_line(self, burst: list[GroupEvent]) -> None:
        first = burst[0]
        self.logger.info(
            "group event",
            group_event=first.event,
            group=first.group_id,
            generation_or_epoch=first.generation_or_epoch,
            member_ids=[e.member_id for e in burst[:MEMBER_IDS_LISTED]],
            member_count=len(burst),
            cause=first.cause,
        )
