"""Waiting in async unit tests without sleeping on the wall clock.

A test waits for an event, never for a length of time: a reply (`Replies`), a
threading.Event set by a worker thread (`thread_event`), the jobs handed to the loop's
default executor (`Executor.done`), or a condition that the loop alone makes true within
some iterations (`turns_until`). Each gives up after a generous
bound (a failure, not a wait the test relies on). Timers run on a ManualClock
(coordinator/runtime/clock.py) and move only when the test advances it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

BOUND_S = 10.0  # how long a wait may take before the test fails
TURNS_MAX = 10_000  # loop iterations turns_until allows


class Replies(list[Any]):
    """A reply list whose `append` is a reply callback a test can await."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = asyncio.Event()

    def append(self, reply: Any) -> None:
        super().append(reply)
        self._changed.set()

    async def wait(self, count: int = 1) -> None:
        """Until at least `count` replies came."""
        async with asyncio.timeout(BOUND_S):
            while len(self) < count:
                self._changed.clear()
                await self._changed.wait()


async def thread_event(event: threading.Event) -> None:
    """Until another thread sets `event` (waited for in a worker thread: the loop runs)."""
    if not await asyncio.to_thread(event.wait, BOUND_S):
        raise AssertionError("the event was never set")


async def turns_until(condition: Callable[[], object], what: str) -> None:
    """Until `condition()` holds, letting the loop run one iteration at a time: for what
    the loop alone brings about (a reload, callbacks already queued)."""
    for _ in range(TURNS_MAX):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{what}: not after {TURNS_MAX} loop iterations")


async def turns(count: int = 10) -> None:
    """Let the loop run `count` iterations (for checks that something does not happen
    while it is blocked on a gate, not on time)."""
    for _ in range(count):
        await asyncio.sleep(0)


class Executor:
    """The running loop's default executor (run_in_executor(None, ...)) for one test:
    `done()` returns once every job handed to it so far has finished and the loop has run
    what the job's completion schedules (the callbacks of its asyncio future)."""

    def __init__(self) -> None:
        self._pool = self._install()

    @staticmethod
    def _install() -> ThreadPoolExecutor:
        pool = ThreadPoolExecutor(4)
        asyncio.get_running_loop().set_default_executor(pool)
        return pool

    async def done(self) -> None:
        pool, self._pool = self._pool, self._install()
        # Once the pool is shut down, each job's result is queued to the loop ahead of this
        # wait's own; its future's callbacks then run in the next iteration.
        await asyncio.to_thread(pool.shutdown)
        await turns(2)
