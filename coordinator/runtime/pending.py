"""Pending: a response that a shard will give once its records are durable.

Why not an asyncio Future: a durable offset commit is answered through one, and creating
it, scheduling its done callbacks through the loop and reading it back cost about a tenth
of the commit's CPU. A Pending calls its single listener (the connection's flush) at once
when set, from the shard runner's delivery of the batch. It is still awaitable, for the
handlers that gather several shards' answers in a coroutine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any


class Pending:
    """Set once with `set`; `listener` (at most one) is called when it is set."""

    __slots__ = ("done", "value", "listener", "_future")

    def __init__(self) -> None:
        self.done = False
        self.value: Any = None
        self.listener: Callable[[], None] | None = None
        self._future: asyncio.Future[Any] | None = None

    def set(self, value: Any) -> None:
        if self.done:
            return
        self.done = True
        self.value = value
        if self.listener is not None:
            self.listener()
        if self._future is not None and not self._future.done():
            self._future.set_result(value)

    def __await__(self) -> Generator[Any, None, Any]:
        if not self.done:
            if self._future is None:
                self._future = asyncio.get_running_loop().create_future()
            return (yield from self._future.__await__())
        return self.value
