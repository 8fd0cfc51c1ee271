"""LoopTimer: replaceable keyed timers whose later deadlines re-arm lazily."""

from __future__ import annotations

import asyncio
import time

from groupcoord.coordinator.groups.result import Result
from groupcoord.coordinator.runtime.timers import LoopTimer


async def test_pushed_deadline_fires_once_at_the_latest_time() -> None:
    fired: list[tuple[str, float]] = []
    loop = asyncio.get_running_loop()
    timer = LoopTimer(lambda callback, _late_s: callback(0))

    def callback(name: str):  # type: ignore[no-untyped-def]
        def run(now_ms: int) -> Result:
            fired.append((name, loop.time()))
            return Result()

        return run

    start = loop.time()
    timer.schedule("k", 50, callback("first"))
    for _ in range(5):  # like heartbeats pushing a session deadline forward
        await asyncio.sleep(0.02)
        timer.schedule("k", 50, callback("pushed"))
    await asyncio.sleep(0.2)
    assert [name for name, _ in fired] == ["pushed"]
    assert fired[0][1] - start >= 0.1 + 0.05 - 0.005  # the last push's deadline
    assert not timer.is_scheduled("k")


async def test_earlier_deadline_replaces_and_cancel_stops() -> None:
    fired: list[str] = []
    timer = LoopTimer(lambda callback, _late_s: callback(0))

    def record(name: str):  # type: ignore[no-untyped-def]
        return lambda now_ms: fired.append(name) or Result()

    timer.schedule("a", 500, record("late"))
    timer.schedule("a", 10, record("early"))  # sooner: re-armed at once
    timer.schedule("b", 10, record("cancelled"))
    timer.cancel("b")
    await asyncio.sleep(0.1)
    assert fired == ["early"]
    assert len(timer) == 0


async def test_a_timer_reports_how_late_it_fires() -> None:
    """The lateness goes to the shard's queue-time metric: a loop busy past the due time
    makes the timer late by at least that much."""
    lateness: list[float | None] = []
    timer = LoopTimer(lambda callback, late_s: lateness.append(late_s) or callback(0))
    timer.schedule("k", 10, lambda now_ms: Result())
    await asyncio.sleep(0)
    time.sleep(0.06)  # the loop is blocked past the 10 ms deadline
    await asyncio.sleep(0.02)
    assert len(lateness) == 1 and lateness[0] is not None
    assert 0.045 <= lateness[0] < 1.0
