"""Keyed, replaceable timers on the event loop, firing as events of their shard.

Heartbeats push a member's session deadline forward thousands of times a second; cancelling
and re-creating a loop timer for each was a visible share of a heartbeat's cost. So a
timer pushed later only records its new deadline, and when it comes up early it re-arms
itself for the rest: one arming per session timeout, not one per heartbeat.

Timers due in the same millisecond share one loop timer (a bucket), and what comes due is
fired at most FIRE_BATCH at a time, the rest on the loop's next turns (after it polled
sockets). 20,000 members whose sessions end together (started together by a load, or
whose clients vanished at once) were 20,000 loop timers run in one loop iteration: 165 ms
of asyncio's own heap work before any of them did anything. Now they are one loop timer
and 20,000 / FIRE_BATCH short turns. (The shard then removes them in slices of its own:
consumer/departures.py.) Between two such turns the loop makes two hops, not one, so that a
coroutine woken meanwhile runs in between (see _next_turn).

The loop's clock and timers are those of the running loop, or of an injected clock (a
test's ManualClock, see clock.py).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ..groups.result import OffloadFinish, Result, TimerCallback
from ..observability.logging import get_logger
from .clock import Cancellable, LoopClock
from .gc_pause import without_gc
from .plugin_threads import plugin_threads

log = get_logger("groupcoord.coordinator")


# Due callbacks fired per loop turn (~10 us each as shard events: about 1 ms a turn), and
# the time after which a turn stops early (a callback costing more than most, a slow host).
FIRE_BATCH = 100
FIRE_BUDGET_S = 0.002
# Float seconds summed (time() + delay_ms / 1000) differ in the last bits: a deadline this
# close to now is due.
_DUE_SLACK_S = 1e-6


def _cancelled(now_ms: int) -> Result:
    raise AssertionError("a cancelled timer never fires")


def _bucket_ms(at: float) -> int:
    """The millisecond whose loop timer fires a deadline (the first at or after it)."""
    return math.ceil(at * 1000 - _DUE_SLACK_S * 1000)


class _Entry:
    __slots__ = ("key", "bucket", "deadline", "callback", "alone")

    def __init__(
        self,
        key: str,
        bucket: int,
        deadline: float,
        callback: TimerCallback,
        alone: bool = False,
    ) -> None:
        self.key = key
        self.bucket = bucket  # the millisecond whose loop timer it waits for
        self.deadline = deadline  # when the callback is due (never before `bucket`)
        self.callback = callback
        # The next slice of a sliced computation (a 0-delay timer): it fires alone in
        # its loop turn (see _fire_due).
        self.alone = alone


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
        # Millisecond -> its loop timer and the entries armed for it (an entry replaced
        # meanwhile stays in its old bucket's list and is skipped when that one fires).
        self._buckets: dict[int, tuple[Cancellable, list[_Entry]]] = {}
        self._due: deque[_Entry] = deque()  # come up, not yet fired or re-armed
        self._turn: Cancellable | None = None  # the next turn that fires from _due
        self._firing = False  # inside _fire_due: it arms the next turn itself, at its end
        self._offloads: dict[str, asyncio.Future[Any]] = {}

    def schedule(self, key: str, delay_ms: int, callback: TimerCallback) -> None:
        loop = self._clock or asyncio.get_running_loop()
        deadline = loop.time() + max(0, delay_ms) / 1000
        entry = self._entries.get(key)
        if entry is not None:
            if entry.bucket <= deadline * 1000:
                entry.deadline = deadline  # comes up early, then re-arms for the rest
                entry.callback = callback
                return
            entry.callback = _cancelled  # sooner: a new entry; its bucket skips this one
        if delay_ms <= 0:
            # Due now (the next slice of a sliced computation): the next loop turn fires
            # it, not the next millisecond's loop timer.
            entry = self._entries[key] = _Entry(key, int(deadline * 1000), deadline, callback, True)
            self._due.append(entry)
            if self._turn is None and not self._firing:
                self._turn = loop.call_at(deadline, self._fire_due)
            return
        entry = self._entries[key] = _Entry(key, _bucket_ms(deadline), deadline, callback)
        self._arm(entry, loop)

    def _arm(self, entry: _Entry, loop: LoopClock) -> None:
        armed = self._buckets.get(entry.bucket)
        if armed is None:
            handle = loop.call_at(entry.bucket / 1000, self._run, entry.bucket)
            self._buckets[entry.bucket] = (handle, [entry])
        else:
            armed[1].append(entry)

    def cancel(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            entry.callback = _cancelled  # its bucket skips it; what it held goes now
        self._offloads.pop(key, None)

    def offload(
        self, key: str, compute: Callable[[], Any], finish: OffloadFinish, *, plugin: bool = False
    ) -> None:
        """`compute` in the loop's default executor, or for `plugin` code in a plugin
        thread (plugin_threads.py): a thread, which with the GIL shares the CPU, but the
        interpreter switches threads every few hundred microseconds, so the loop keeps
        answering meanwhile; a built-in computation runs with the GC paused (gc_pause.py:
        a collection in the thread would hold the GIL while it walks the structures being
        built). `finish` then runs as a shard event. What compute raises is logged here
        (the shard does no I/O), then handed to finish."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = (
            asyncio.wrap_future(plugin_threads.submit(compute))
            if plugin
            else loop.run_in_executor(None, without_gc(compute))
        )
        self._offloads[key] = future

        def done(f: asyncio.Future[Any]) -> None:
            if f.cancelled():
                return  # the loop is closing
            error = f.exception()
            if error is not None:
                log.error("offloaded computation failed", key=key, error=str(error), exc_info=error)
            if self._offloads.get(key) is not f:
                return  # superseded, cancelled, or the shard reloaded meanwhile
            del self._offloads[key]
            value: Any = error if error is not None else f.result()
            self._firing = True  # a turn of its own: the next slice two hops later
            try:
                self._fire(lambda now_ms: finish(value, now_ms), None)
            finally:
                self._firing = False
            self._next_turn(self._clock or loop)

        future.add_done_callback(done)

    def is_scheduled(self, key: str) -> bool:
        return key in self._entries

    def cancel_all(self) -> None:
        for handle, _ in self._buckets.values():
            handle.cancel()
        if self._turn is not None:
            self._turn.cancel()
            self._turn = None
        self._buckets.clear()
        self._due.clear()
        self._entries.clear()
        self._offloads.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def _run(self, bucket: int) -> None:
        """A bucket's loop timer: its entries come up (C-speed, whatever their number)."""
        _, entries = self._buckets.pop(bucket)
        self._due.extend(entries)
        if self._turn is None:
            self._fire_due()

    def _fire_due(self) -> None:
        """Fire (or re-arm, when pushed later) up to FIRE_BATCH of the entries that came
        up, in due order, for at most FIRE_BUDGET_S; the rest on the next loop turn. The
        next slice of a sliced computation (a 0-delay timer: a mass expiry's removals, an
        offloaded target's records) fires alone in its turn: a slice costs up to a few
        milliseconds, and after FIRE_BUDGET_S of other callbacks it made a turn (a loop
        stall) of both."""
        self._turn = None
        loop = self._clock or asyncio.get_running_loop()
        now = loop.time()
        due = self._due
        entries = self._entries
        fired = 0
        started = time.perf_counter()
        self._firing = True
        try:
            while due and fired < FIRE_BATCH and time.perf_counter() - started < FIRE_BUDGET_S:
                entry = due.popleft()
                if entries.get(entry.key) is not entry:
                    continue  # cancelled or replaced
                if entry.deadline > now + _DUE_SLACK_S:
                    entry.bucket = _bucket_ms(entry.deadline)
                    self._arm(entry, loop)
                    continue
                if entry.alone and fired:
                    due.appendleft(entry)  # first in the next turn
                    break
                del entries[entry.key]
                fired += 1
                self._fire(entry.callback, now - entry.deadline)
                if entry.alone:
                    break
        finally:
            self._firing = False
        self._next_turn(loop)

    def _next_turn(self, loop: LoopClock) -> None:
        """At the end of a turn that fired timers: arm the next turn if anything is due."""
        if self._due and self._turn is None:
            # Two hops to the next turn, not one: what came due during this turn (a timer,
            # a read) runs on the loop's next turn, but a coroutine it wakes (a task
            # awaiting a future) runs one hop later still; with one hop the next turn of
            # ours ran in between, and whoever waited saw both turns as one stall
            # (bench_mass_expiry's probe: gaps of two 2-3 ms turns).
            self._turn = loop.call_at(loop.time(), self._yield_turn)

    def _yield_turn(self) -> None:
        """The first of the two hops to the next _fire_due turn (see there)."""
        loop = self._clock or asyncio.get_running_loop()
        self._turn = loop.call_at(loop.time(), self._fire_due)
