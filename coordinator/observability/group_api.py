"""The web page's JSON API (served by http.py): GET /api/groups and GET /api/groups/<group>.

/api/groups: {"now_ms", "groups": [{"group", "type", "protocol_type", "protocol", "state",
"members", "partitions", "lag"}]} sorted by group id; `lag` is the records behind summed
over the group's committed offsets on existing partitions (0 without any), as /metrics
measures it (lag.py). One shard is read at a time, between events; the loop gets a turn
between shards once ~2 ms of it were used (lag_metrics.LoopSlicer).

/api/groups/<group>: the group's page (runtime/group_pages.py: members with their
assignment by topic, state, protocol, epoch) with "offsets": [{"topic", "partition",
"committed", "end", "lag", "lag_seconds"}] and "now_ms"; None for a group not held (404)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from .lag import lag_seconds
from .lag_metrics import LoopSlicer, PartitionEndsView

Summaries = Callable[[Callable[[str, int], int | None]], Iterator[list[dict[str, Any]]]]
GroupPage = Callable[[str], dict[str, Any] | None]


def _by_group(summary: dict[str, Any]) -> str:
    return str(summary["group"])


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupApi:
    def __init__(
        self,
        summaries: Summaries,
        page: GroupPage,
        ends: PartitionEndsView,
        clock_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        """`summaries(high_watermark)`: per active shard, its groups with lag
        (CoordinatorService.group_summaries); `page(group)`: CoordinatorService.group_page;
        `ends`: a PartitionEnds of the API's own (its timestamp cache is per request)."""
        self.summaries = summaries
        self.page = page
        self.ends = ends
        self.clock_ms = clock_ms

    async def groups(self) -> dict[str, Any]:
        """Every group with its state, protocol, members and total lag."""
        ends: dict[tuple[str, int], int | None] = {}  # read once per request
        read = self.ends.high_watermark

        def high_watermark(topic: str, partition: int) -> int | None:
            key = (topic, partition)
            if key in ends:
                return ends[key]
            end = ends[key] = read(topic, partition)
            return end

        out: list[dict[str, Any]] = []
        slicer = LoopSlicer()
        for summaries in self.summaries(high_watermark):
            out += summaries
            await slicer.step()  # a turn for the loop: the next shard after its events
        out.sort(key=_by_group)
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
