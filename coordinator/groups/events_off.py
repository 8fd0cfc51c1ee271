"""Test-only: a shard without group events, for measuring what the event log and the
rebalance timeline cost heartbeats and commits (issue 20; tests/bench/bench_group_events.py
runs bench_groups with and without them, alternating).

GROUPCOORD_TEST_NO_GROUP_EVENTS=1 in the server's environment (a harness variable: the
settings check lets GROUPCOORD_TEST_* through) gives every shard a NoGroupEvents: nothing is
derived from the records the shard writes or replays, what the managers announce is
dropped, no event is logged and no timeline kept (the timeline endpoint finds no group)."""

from __future__ import annotations

import os
from typing import Any

from .events import GroupEvent, GroupEvents

NO_GROUP_EVENTS_ENV = "GROUPCOORD_TEST_NO_GROUP_EVENTS"


def new_group_events(timeline_events: int, total_max: int) -> GroupEvents:
    """The shard's GroupEvents, or a NoGroupEvents when the environment asks for one."""
    if os.environ.get(NO_GROUP_EVENTS_ENV) == "1":
        return NoGroupEvents(0, 0)
    return GroupEvents(timeline_events, total_max)


class NoGroupEvents(GroupEvents):
    """Every call the managers and the shard make does nothing; `derived` False tells the
    shard's replay to derive nothing from the records."""

    derived = False

    def cause(self, group_id: str, member_id: str, event: str, why: str) -> None:
        return None

    def announce(self, *args: Any, **kwargs: Any) -> None:
        return None

    def reason(self, group_id: str, why: str) -> None:
        return None

    def rebalance_started(self, group_id: str, generation: int, now_ms: int) -> None:
        return None

    def track_record(self, group_id: str, member_ids: frozenset[str]) -> None:
        return None

    def emit(self, *args: Any, **kwargs: Any) -> None:
        return None

    def timeline(self, group_id: str) -> list[GroupEvent] | None:
        return None
