"""The web page's JSON API (served by http.py): GET /api/groups and GET /api/groups/<group>.

/api/groups: {"now_ms", "groups": [{"group", "type", "protocol_type", "protocol", "state",
"members", "partitions", "lag"}]} sorted by group id; `lag` is the records behind summed
over the group's committed offsets on existing partitions (0 without any), as /metrics
measures it (lag.py). One shard is read at a time, between events, yielding to the loop
after each.

/api/groups/<group>: the group's page (runtime/group_pages.py: members with their
assignment by topic, state, protocol, epoch) with "offsets": [{"topic", "partition",
"committed", "end", "lag", "lag_seconds"}] and "now_ms"; None for a group not held (404)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

from .lag import lag_seconds
from .lag_metrics import PartitionEndsView

Summary = tuple[str, str, str, str, str, int]
GroupSources = Callable[[], Iterator[tuple[list[Summary], list[tuple[str, str, int, int]]]]]
GroupPage = Callable[[str], dict[str, Any] | None]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupApi:
    def __init__(
        self,
        sources: GroupSources,
        page: GroupPage,
        ends: PartitionEndsView,
        clock_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        """`sources()`: per active shard, its group summaries and committed offsets
        (CoordinatorService.group_sources); `page(group)`: CoordinatorService.group_page;
        `ends`: a PartitionEnds of the API's own (its timestamp cache is per request)."""
        self.sources = sources
        self.page = page
        self.ends = ends
        self.clock_ms = clock_ms

    async def groups(self) -> dict[str, Any]:
        """Every group with its state, protocol, members and total lag."""
        high_watermark = self.ends.high_watermark
        out: list[dict[str, Any]] = []
        for summaries, committed in self.sources():
            lag: dict[str, int] = {}
            partitions: dict[str, int] = {}
            ends: dict[tuple[str, int], int | None] = {}
            for group, topic, partition, offset in committed:
                key = (topic, partition)
                end = ends[key] if key in ends else ends.setdefault(key, high_watermark(*key))
                if end is not None:
                    lag[group] = lag.get(group, 0) + max(end - offset, 0)
                    partitions[group] = partitions.get(group, 0) + 1
            for group, kind, protocol_type, protocol, state, members in summaries:
                out.append(
                    {
                        "group": group,
                        "type": kind,
                        "protocol_type": protocol_type,
                        "protocol": protocol,
                        "state": state,
                        "members": members,
                        "partitions": partitions.get(group, 0),
                        "lag": lag.get(group, 0),
                    }
                )
            await asyncio.sleep(0)  # the next shard is read after the events between
        out.sort(key=lambda g: str(g["group"]))
        return {"now_ms": self.clock_ms(), "groups": out}

    def group(self, group_id: str) -> dict[str, Any] | None:
        """The group's page with lag per committed partition (None: not held)."""
        page = self.page(group_id)
        if page is None:
            return None
        ends = self.ends
        ends.begin_scrape()
        now_ms = self.clock_ms()
        offsets = []
        for topic, partition, committed in page.pop("offsets"):
            end = ends.high_watermark(topic, partition)
            records = None if end is None else max(end - committed, 0)
            seconds = None
            if records is not None:
                first_ms = ends.timestamp_ms(topic, partition, committed) if records else None
                seconds = lag_seconds(now_ms, records, first_ms)
            offsets.append(
                {
                    "topic": topic,
                    "partition": partition,
                    "committed": committed,
                    "end": end,
                    "lag": records,
                    "lag_seconds": seconds,
                }
            )
        page["offsets"] = offsets
        page["now_ms"] = now_ms
        return page
