"""The group events' log lines (runtime/group_event_log.py): one per event, except a burst
of one group's same event in one loop turn, written as one line listing its members."""

from __future__ import annotations

import asyncio
from typing import Any

from groupcoord.coordinator.groups.events import GroupEvent
from groupcoord.coordinator.runtime.group_event_log import (
    BURST_MIN,
    MEMBER_IDS_LISTED,
    GroupEventLog,
)


class Lines:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def info(self, message: str, **fields: Any) -> None:
        self.lines.append({"event": message} | fields)


def event(seq: int, group: str, kind: str, member: str | None, cause: str = "c") -> GroupEvent:
    return GroupEvent(seq, 0, group, kind, 3, member, cause, {})


async def test_a_turns_events_are_written_at_its_end_bursts_as_one_line() -> None:
    lines = Lines()
    log = GroupEventLog(lines)
    log(event(1, "g", "rebalance_started", None))
    for i in range(BURST_MIN + MEMBER_IDS_LISTED):
        log(event(2 + i, "g", "member_expired", f"m{i}", "session timeout"))
    log(event(500, "h", "member_expired", "x", "session timeout"))  # another group
    log(event(501, "g", "member_left", "y"))
    assert lines.lines == []  # nothing until the turn ends
    await asyncio.sleep(0)
    kinds = [(line["group"], line["group_event"]) for line in lines.lines]
    assert kinds == [
        ("g", "rebalance_started"),
        ("g", "member_expired"),
        ("h", "member_expired"),
        ("g", "member_left"),
    ]
    burst = lines.lines[1]
    assert burst["member_count"] == BURST_MIN + MEMBER_IDS_LISTED
    assert burst["member_ids"] == [f"m{i}" for i in range(MEMBER_IDS_LISTED)]
    assert burst["cause"] == "session timeout"
    assert lines.lines[2]["member_id"] == "x"


async def test_fewer_than_a_burst_are_one_line_each() -> None:
    lines = Lines()
    log = GroupEventLog(lines)
    for i in range(BURST_MIN - 1):
        log(event(i, "g", "member_expired", f"m{i}"))
    await asyncio.sleep(0)
    assert [line["member_id"] for line in lines.lines] == [f"m{i}" for i in range(BURST_MIN - 1)]


def test_without_a_loop_each_event_is_written_at_once() -> None:
    lines = Lines()
    log = GroupEventLog(lines)
    log(event(1, "g", "member_joined", "m"))
    assert [line["member_id"] for line in lines.lines] == ["m"]
