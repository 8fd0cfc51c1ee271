"""A manual clock and timer for shard tests: time moves only when a test says so.

`sleep(ms)` advances the clock, fires due timers in due order (ties in scheduling order),
and returns the merged Result of everything that fired, exactly what the runtime would
have appended and answered. Each fired Result is also passed to `on_result` (a harness
replays its records there, as the runtime does, before the next timer fires).
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections.abc import Callable
from typing import Any

from .result import OffloadFinish, Result, TimerCallback


class ManualTimer:
    def __init__(self, start_ms: int = 0) -> None:
        self.now_ms = start_ms
        self._heap: list[tuple[int, int, str]] = []
        self._live: dict[str, tuple[int, TimerCallback]] = {}
        self._seq = itertools.count()
        self.on_result: Callable[[Result], None] | None = None
        self.offloaded = 0  # how many computations went through offload()
        self.offloaded_plugins = 0  # ... of which with plugin=True
        self.failures: list[Exception] = []  # what offloaded computations raised

    def schedule(self, key: str, delay_ms: int, callback: TimerCallback) -> None:
        seq = next(self._seq)
        self._live[key] = (seq, callback)
        heapq.heappush(self._heap, (self.now_ms + max(0, delay_ms), seq, key))

    def cancel(self, key: str) -> None:
        self._live.pop(key, None)

    def is_scheduled(self, key: str) -> bool:
        return key in self._live

    def offload(
        self, key: str, compute: Callable[[], Any], finish: OffloadFinish, *, plugin: bool = False
    ) -> None:
        """Computes at once; `finish` runs at the next sleep (as a 0-delay timer `key`).
        An exception compute raises is kept in `failures` (the runtime logs it)."""
        try:
            value: Any = compute()
        except Exception as e:  # noqa: BLE001 - handed to finish, as the runtime does
            value = e
            self.failures.append(e)
        self.offloaded += 1
        self.offloaded_plugins += plugin
        self.schedule(key, 0, lambda now_ms: finish(value, now_ms))

    def deadline(self, key: str) -> int | None:
        entry = self._live.get(key)
        if entry is None:
            return None
        for due, seq, k in self._heap:
            if k == key and seq == entry[0]:
                return due
        return None

    def sleep(self, ms: int) -> Result:
        """Advance time by `ms`, firing due timers; returns what they produced."""
        target = self.now_ms + ms
        merged = Result()
        while self._heap and self._heap[0][0] <= target:
            due, seq, key = heapq.heappop(self._heap)
            entry = self._live.get(key)
            if entry is None or entry[0] != seq:
                continue  # cancelled or replaced
            del self._live[key]
            self.now_ms = due
            result = entry[1](due)
            if self.on_result is not None:
                self.on_result(result)
            merged.extend(result)
        self.now_ms = target
        return merged


class SequentialIds:
    """Deterministic UUID-shaped ids for tests."""

    def __init__(self) -> None:
        self._n = itertools.count(1)

    def new_uuid(self) -> str:
        return str(uuid.UUID(int=next(self._n)))
