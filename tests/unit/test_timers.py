"""LoopTimer: replaceable keyed timers whose later deadlines re-arm lazily."""

from __future__ import annotations

import asyncio

from coordinator.groups.result import Result
from coordinator.runtime.timers import LoopTimer


async def test_pushed_deadline_fires_once_at_the_latest_time() -> None:
    fired: list[tuple[str, float]] = []
    loop = asyncio.get_running_loop()
    timer = LoopTimer(lambda callback: callback(0))

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
    timer = LoopTimer(lambda callback: callback(0))

    def record(name: str):  # type: ignore[no-untyped-def]
        return lambda now_ms: fired.append(name) or Result()

    timer.schedule("a", 500, record("late"))
    timer.schedule("a", 10, record("early"))  # sooner: re-armed at once
    timer.schedule("b", 10, record("cancelled"))
    timer.cancel("b")
    await asyncio.sleep(0.1)
    assert fired == ["early"]
    assert len(timer) == 0
