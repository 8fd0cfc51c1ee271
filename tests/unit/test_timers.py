"""LoopTimer: replaceable keyed timers whose later deadlines re-arm lazily. Time is a
ManualClock's: it moves only when a test advances it."""

from __future__ import annotations

from groupcoord.coordinator.groups.result import Result
from groupcoord.coordinator.runtime.clock import ManualClock
from groupcoord.coordinator.runtime.timers import LoopTimer


def test_pushed_deadline_fires_once_at_the_latest_time() -> None:
    clock = ManualClock()
    fired: list[tuple[str, float]] = []
    timer = LoopTimer(lambda callback, _late_s: callback(0), clock)

    def callback(name: str):  # type: ignore[no-untyped-def]
        def run(now_ms: int) -> Result:
            fired.append((name, clock.time()))
            return Result()

        return run

    timer.schedule("k", 50, callback("first"))
    for _ in range(5):  # like heartbeats pushing a session deadline forward
        clock.advance(20)
        timer.schedule("k", 50, callback("pushed"))
    assert clock.pending() == 1  # one loop timer, re-armed, not one per push
    clock.advance(49)
    assert fired == []
    clock.advance(1)
    assert [name for name, _ in fired] == ["pushed"]
    assert abs(fired[0][1] - (0.1 + 0.05)) < 1e-6  # the last push's deadline
    assert not timer.is_scheduled("k")
    clock.advance(1_000)
    assert len(fired) == 1


def test_earlier_deadline_replaces_and_cancel_stops() -> None:
    clock = ManualClock()
    fired: list[str] = []
    timer = LoopTimer(lambda callback, _late_s: callback(0), clock)

    def record(name: str):  # type: ignore[no-untyped-def]
        return lambda now_ms: fired.append(name) or Result()

    timer.schedule("a", 500, record("late"))
    timer.schedule("a", 10, record("early"))  # sooner: re-armed at once
    timer.schedule("b", 10, record("cancelled"))
    timer.cancel("b")
    clock.advance(10)
    assert fired == ["early"]
    assert len(timer) == 0
    clock.advance(1_000)
    assert fired == ["early"]


def test_a_timer_reports_how_late_it_fires() -> None:
    """The lateness goes to the shard's queue-time metric: a loop busy past the due time
    makes the timer late by that much."""
    clock = ManualClock()
    lateness: list[float | None] = []
    timer = LoopTimer(lambda callback, late_s: lateness.append(late_s) or callback(0), clock)
    timer.schedule("k", 10, lambda now_ms: Result())
    clock.stall(60)  # the loop is blocked past the 10 ms deadline
    assert lateness == []
    clock.advance(0)
    assert len(lateness) == 1 and lateness[0] is not None
    assert abs(lateness[0] - 0.05) < 1e-6
    timer.schedule("k", 10, lambda now_ms: Result())
    clock.advance(10)  # an idle loop: on time
    assert lateness[1] is not None and abs(lateness[1]) < 1e-6
