"""FrameBudget: how many request frames the connections together may still handle in the
current event-loop iteration.

Why: one iteration of the loop runs the reads of every readable socket back to back, and a
commit load makes that a burst of hundreds of requests (100 connections, several pipelined
requests each: ~8 ms of handling). The group committer's completion of an fsync round is a
callback queued from its thread, run only in the next iteration, so the answers to a whole
round waited behind such a burst and the loop then idled while the clients they released
sent their next requests. Past the budget a connection leaves its frames in its decoder
(reading stays paused, as when its in-flight limit is reached) and handles them in the next
iteration, after the callbacks queued before: completions go out within a few frames'
handling. Measured with 100 connections x 4 commits in flight: 44k -> 49-50k durable
commits/s (tests/bench/bench_groups.py). Frames of a connection keep their order; deferred
connections are resumed oldest first at the start of the next iteration, before its
reads.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


class FrameBudget:
    __slots__ = ("per_iteration", "left", "_armed", "_waiting")

    def __init__(self, per_iteration: int) -> None:
        if per_iteration < 1:
            raise ValueError("per_iteration must be >= 1")
        self.per_iteration = per_iteration
        self.left = 0  # frames left in this iteration once armed
        self._armed = False
        # Connections that ran out of budget, oldest first: resumed by the next iterations.
        self._waiting: deque[Callable[[], None]] = deque()

    def take(self) -> bool:
        """Whether one more frame may be handled in this iteration (and count it). The
        first frame of an iteration arms a fresh budget, renewed on the next iteration."""
        if self.left > 0:
            self.left -= 1
            return True
        if self._armed:
            return False
        self._armed = True
        self.left = self.per_iteration - 1
        asyncio.get_running_loop().call_soon(self._renew)
        return True

    def wait(self, resume: Callable[[], None]) -> None:
        """Call `resume` (after take() said no) in a later iteration, after everything that
        waited before it. It may wait again."""
        self._waiting.append(resume)

    def _renew(self) -> None:
        """The next iteration, before its reads: resume the waiting connections, oldest
        first, while the fresh budget lasts (one that runs out waits again at the end)."""
        # What this iteration left unused does not carry over to the next.
        self._armed = False
        self.left = 0
        waiting = self._waiting
        for _ in range(len(waiting)):
            if self._armed and self.left <= 0:
                break
            resume = waiting.popleft()
            try:
                resume()
            except Exception as exc:  # one connection's failure must not strand the others
                asyncio.get_running_loop().call_exception_handler(
                    {"message": "resuming a connection's frames failed", "exception": exc}
                )
