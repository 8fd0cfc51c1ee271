"""Keyed, replaceable timers on the event loop, firing as events of their shard.

Heartbeats push a member's session deadline forward thousands of times a second; cancelling
and re-creating a loop timer for each was a visible share of a heartbeat's cost. So a
timer pushed later only records its new deadline, and when the loop timer fires early it
re-arms itself for the rest: one loop timer per session timeout, not one per heartbeat.

The loop's clock and timers are those of the running loop, or of an injected clock (a
test's ManualClock, see clock.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..groups.result import OffloadFinish, TimerCallback
from .clock import Cancellable, LoopClock


class _Entry:
    __slots__ = ("handle", "fires_at", "deadline", "callback")

    def __init__(self, handle: Cancellable, at: float, callback: TimerCallback) -> None:
        self.handle = handle
        self.fires_at = at  # when the loop timer goes off
        self.deadline = at  # when the callback is due (never earlier than fires_at)
        self.callback = callback


class LoopTimer:
    """Implements groups.result.Timer. `fire(callback)` is the shard runner's entry point,
    so a timer's Result goes through the same append-then-reply pipeline as a request's."""

    def __init__(
        self, fire: Callable[[TimerCallback, float | None], None], clock: LoopClock | None = None
    ) -> None:
        """`fire(callback, late_s)` runs a due callback; late_s: how long after its due time
        (None for an offloaded computation's finish, which has none). `clock`: where time
        and loop timers come from (default: the running loop)."""
        self._fire = fire
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._offloads: dict[str, asyncio.Future[Any]] = {}

    def schedule(self, key: str, delay_ms: int, callback: TimerCallback) -> None:
        loop = self._clock or asyncio.get_running_loop()
        deadline = loop.time() + max(0, delay_ms) / 1000
        entry = self._entries.get(key)
        if entry is not None:
            if entry.fires_at <= deadline:
                entry.deadline = deadline  # fires early, then re-arms for the rest
                entry.callback = callback
                return
            entry.handle.cancel()
        handle = loop.call_at(deadline, self._run, key)
        self._entries[key] = _Entry(handle, deadline, callback)

    def cancel(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            entry.handle.cancel()
        self._offloads.pop(key, None)

    def offload(self, key: str, compute: Callable[[], Any], finish: OffloadFinish) -> None:
        """`compute` in the loop's default executor (a thread: with the GIL it shares the
        CPU, but the interpreter switches threads every few hundred microseconds, so the
        loop keeps answering meanwhile); `finish` then runs as a shard event."""
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(None, compute)
        self._offloads[key] = future

        def done(f: asyncio.Future[Any]) -> None:
            if self._offloads.get(key) is not f:
                return  # superseded, cancelled, or the shard reloaded meanwhile
            del self._offloads[key]
            value: Any = f.exception() if f.exception() is not None else f.result()
            self._fire(lambda now_ms: finish(value, now_ms), None)

        future.add_done_callback(done)

    def is_scheduled(self, key: str) -> bool:
        return key in self._entries

    def cancel_all(self) -> None:
        for entry in self._entries.values():
            entry.handle.cancel()
        self._entries.clear()
        self._offloads.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def _run(self, key: str) -> None:
        entry = self._entries.get(key)
        if entry is None:
            return
        loop = self._clock or asyncio.get_running_loop()
        if loop.time() < entry.deadline:
            entry.fires_at = entry.deadline
            entry.handle = loop.call_at(entry.deadline, self._run, key)
            return
        del self._entries[key]
        self._fire(entry.callback, loop.time() - entry.deadline)
