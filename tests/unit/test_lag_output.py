"""The text `/metrics` gets from consumer lag (observability/lag_metrics.py), byte for byte,
for a fixed state scraped several times: every level (per partition, per group and topic,
per group, names off), Burrow's statuses as they evolve, labels that need escaping, ages
that cannot be read. tests/data/lag_scrape_golden.txt was recorded from the renderer before
scrapes were made incremental (session 16), so a faster scrape must render the same bytes.

    python -m tests.unit.test_lag_output --record   # only when the output is meant to change
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

from groupcoord.coordinator.observability.lag_metrics import LagMetrics

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "lag_scrape_golden.txt"

Committed = list[tuple[str, str, int, int, int]]


class _State:
    """Shards of committed offsets and members, and partitions' ends and timestamps, that
    the scenario changes between scrapes."""

    def __init__(self) -> None:
        self.ends: dict[tuple[str, int], int] = {}
        self.shards: list[tuple[Committed, dict[str, int]]] = []
        self.now_ms = 1_000_000

    def high_watermark(self, topic: str, partition: int) -> int | None:
        return self.ends.get((topic, partition))

    def timestamp_ms(self, topic: str, partition: int, offset: int) -> int | None:
        if topic == "unreadable" or offset >= self.ends.get((topic, partition), 0):
            return None
        if topic == "skewed":
            return self.now_ms + 5_000  # a producer clock ahead of ours
        return 900_000 + 7 * offset + 13 * partition + len(topic)

    def timestamps_ms(self, topic: str, partition: int, offsets: list[int]) -> list[int | None]:
        return [self.timestamp_ms(topic, partition, offset) for offset in offsets]

    def begin_scrape(self) -> None:
        pass

    def sources(self) -> Iterator[tuple[Committed, dict[str, int]]]:
        for committed, members in self.shards:
            yield list(committed), dict(members)


def _scenario(series_max: int, names: bool) -> list[bytes]:
    """Five scrapes of a state that moves: a group catching up, one stalled, one stopped,
    one rewound, one too slow, groups created and deleted, topics of odd names."""
    state = _State()
    lag = LagMetrics(
        state.sources,
        state,
        series_max,
        clock_ms=lambda: state.now_ms,
        status_intervals=4,
        status_min_distance_ms=1000,
        name_labels=names,
    )
    topics = ["t", 'q"uote', "back\\slash", "new\nline", "unreadable", "skewed"]
    for t, topic in enumerate(topics):
        for p in range(3 + t % 2):
            state.ends[topic, p] = 1_000 + 100 * t + 10 * p
    texts = [lag.text()]
    for step in range(5):
        now = state.now_ms
        shard0: Committed = []
        shard1: Committed = []
        for p in range(3):
            # catching up: commits move and lag falls
            shard0.append(("fast", "t", p, 900 + 30 * step, now - 100))
            # stalled: commits the same offset with lag
            shard0.append(("stalled", 'q"uote', p, 500, now - 200))
            # stopped: committed twice, then nothing while records arrive
            shard1.append(("stopped", "t", p, 300 + min(step, 1), 1_000_000 + 1000 * min(step, 1)))
            # rewound on step 3
            shard1.append(('we"ird\\grp', "back\\slash", p, 700 - 50 * (step == 3), now))
            # too slow: moves, lag never falls
            shard1.append(("slow", "new\nline", p, 100 + step, now - 1))
            shard0.append(("ages", "unreadable", p, 10, now))
            shard0.append(("ages", "skewed", p, 10 * step, now))
        shard0.append(("ahead", "t", 0, 5_000, now))  # committed past the end
        shard0.append(("gone", "no-such-topic", 0, 3, now))
        if step < 3:
            shard1.append(("deleted-later", "t", 1, 2, now))
        state.shards = [
            (shard0, {"fast": 3, "stalled": 1, "ages": 0, "ahead": 0, "gone": 0}),
            (shard1, {"stopped": 0, 'we"ird\\grp': 2, "slow": 1, "empty": 0}),
        ]
        asyncio.run(lag.refresh())
        texts.append(lag.text())
        for key in state.ends:
            state.ends[key] += 7 * (step + 1)
        state.now_ms += 1_500
    return texts


CASES = [(100, True), (20, True), (8, True), (100, False)]


def _render_all() -> bytes:
    out = []
    for series_max, names in CASES:
        for i, text in enumerate(_scenario(series_max, names)):
            out.append(f"=== series_max={series_max} names={names} scrape={i}\n".encode())
            out.append(text)
    return b"".join(out)


def test_scrapes_render_the_recorded_text() -> None:
    assert _render_all() == GOLDEN.read_bytes()


if __name__ == "__main__":
    if "--record" in sys.argv:
        GOLDEN.write_bytes(_render_all())
