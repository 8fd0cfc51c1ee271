"""Keyed, replaceable timers on the event loop, firing as events of their shard."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..groups.result import TimerCallback


class LoopTimer:
    """Implements groups.result.Timer. `fire(callback)` is the shard runner's entry point,
    so a timer's Result goes through the same append-then-reply pipeline as a request's."""

    def __init__(self, fire: Callable[[TimerCallback], None]) -> None:
        self._fire = fire
        self._handles: dict[str, asyncio.TimerHandle] = {}

    def schedule(self, key: str, delay_ms: int, callback: TimerCallback) -> None:
        old = self._handles.pop(key, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self._handles[key] = loop.call_later(max(0, delay_ms) / 1000, self._run, key, callback)

    def cancel(self, key: str) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def is_scheduled(self, key: str) -> bool:
        return key in self._handles

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()

    def __len__(self) -> int:
        return len(self._handles)

    def _run(self, key: str, callback: TimerCallback) -> None:
        self._handles.pop(key, None)
        self._fire(callback)
