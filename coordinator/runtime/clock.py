"""Where the runtime reads time, so tests can move it by hand.

The runtime's timers read the event loop's monotonic clock and arm the loop's timers
(`time()`, `call_at()`): in production the running asyncio loop itself is the clock (no
wrapper on the heartbeat path), and shards get the wall clock's `now_ms`. Tests inject a
ManualClock instead: time moves only when the test calls `advance(ms)`, which runs the
callbacks that come due in due order, each at its due time (so what a timer sees is
exactly what it would see on an idle loop), or `stall(ms)`, which moves time without
running anything (a loop busy past a deadline: the callbacks then run late, at the next
`advance`). No test sleeps on the wall clock, and none depends on how busy the machine is.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Any, Protocol

# Callbacks due within this of the target time run in that advance: LoopTimer computes a
# deadline as time() + delay_ms / 1000, and sums of float seconds differ in the last bits.
_DUE_SLACK_S = 1e-9


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class LoopClock(Protocol):
    """The part of an asyncio event loop the timers use."""

    def time(self) -> float: ...

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> Cancellable: ...


class Clock(LoopClock, Protocol):
    """A loop clock that also tells the wall time (a shard's `now_ms`)."""

    def now_ms(self) -> int: ...


async def sleep(clock: LoopClock | None, seconds: float) -> None:
    """asyncio.sleep on `clock` (the running loop's when None)."""
    if clock is None:
        await asyncio.sleep(seconds)
        return
    woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    handle = clock.call_at(clock.time() + seconds, _wake, woken)
    try:
        await woken
    finally:
        handle.cancel()


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Handle:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A Clock for tests: `advance(ms)` moves time and runs what comes due."""

    def __init__(self, wall_ms: int = 1_000_000) -> None:
        self._now_s = 0.0
        self._wall_start_ms = wall_ms
        self._heap: list[tuple[float, int, _Handle, Callable[..., object], tuple[Any, ...]]] = []
        self._seq = itertools.count()

    def time(self) -> float:
        return self._now_s

    def now_ms(self) -> int:
        """The wall clock: `wall_ms` at the start, moving with `time()`."""
        return self._wall_start_ms + round(self._now_s * 1000)

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> _Handle:
        handle = _Handle()
        heapq.heappush(self._heap, (when, next(self._seq), handle, callback, args))
        return handle

    def pending(self) -> int:
        """Callbacks armed and not cancelled."""
        return sum(1 for entry in self._heap if not entry[2].cancelled)

    def advance(self, ms: float) -> None:
        """Move time forward by `ms`, running each callback due by then at its due time (ties
        in the order they were armed; overdue ones, after a stall, at once), callbacks armed
        meanwhile included."""
        target = self._now_s + ms / 1000
        heap = self._heap
        while heap and heap[0][0] <= target + _DUE_SLACK_S:
            when, _, handle, callback, args = heapq.heappop(heap)
            if handle.cancelled:
                continue
            self._now_s = max(self._now_s, when)
            callback(*args)
        self._now_s = max(self._now_s, target)

    def stall(self, ms: float) -> None:
        """Move time forward by `ms` running nothing, as a loop busy for that long."""
        self._now_s += ms / 1000
