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

The budget also holds the server's bytes (queued_request_bytes_max, Kafka's
queued.max.request.bytes): the frames being received and the responses not yet sent.
A connection whose read leaves part of a frame claims that frame's whole announced size
(as Kafka allocates it on reading the size), and keeps reading only if the claim is
granted; otherwise it stops reading and waits, in order, for bytes to be freed. A granted
frame can always complete (its bytes are already counted), so the partial frames never hold
each other up; a claim is granted past the cap only when nothing else is held, so one frame
larger than the cap still goes through alone. Unsent responses are counted as measured, by
the periodic sweep (connection_limits.py) and at once when a transport's buffer crosses its
high-water mark (they are not refused: that mark pauses their readers). Small requests that
arrive whole claim nothing, and writes measure nothing: the cap costs the common path
nothing. What a waiting connection read before it stopped (one socket read at most) is not
counted.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


class FrameBudget:
    __slots__ = (
        "per_iteration",
        "left",
        "_armed",
        "_waiting",
        "held_bytes",
        "held_bytes_max",
        "_bytes_waiting",
        "_bytes_resume_scheduled",
    )

    def __init__(self, per_iteration: int, held_bytes_max: int = 2**62) -> None:
        if per_iteration < 1:
            raise ValueError("per_iteration must be >= 1")
        if held_bytes_max < 1:
            raise ValueError("held_bytes_max must be >= 1")
        self.per_iteration = per_iteration
        self.left = 0  # frames left in this iteration once armed
        self._armed = False
        # Connections that ran out of budget, oldest first: resumed by the next iterations.
        self._waiting: deque[Callable[[], None]] = deque()
        # Bytes granted to partial frames plus unsent responses, and the cap on grants.
        self.held_bytes = 0
        self.held_bytes_max = held_bytes_max
        # Connections waiting for bytes, oldest first; resumed once bytes are freed.
        self._bytes_waiting: deque[Callable[[], None]] = deque()
        self._bytes_resume_scheduled = False

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
        _resume_while(self._waiting, lambda: not self._armed or self.left > 0, "frames")

    # bytes ---------------------------------------------------------------------------------

    def claim(self, held: int, wanted: int) -> bool:
        """A holder of `held` counted bytes asks to hold `wanted` instead (more). Granted
        (and counted) when the total stays within the cap, or when nobody else holds any."""
        others = self.held_bytes - held
        if others + wanted <= self.held_bytes_max or others <= 0:
            self.held_bytes = others + wanted
            return True
        return False

    def adjust(self, delta: int) -> None:
        """Count `delta` more bytes (negative: freed) without asking: what was granted and is
        given back, or unsent responses as measured. Freed bytes resume waiting claims."""
        self.held_bytes += delta
        if delta < 0 and self._bytes_waiting and not self._bytes_resume_scheduled:
            self._bytes_resume_scheduled = True
            asyncio.get_running_loop().call_soon(self._resume_bytes)

    def wait_for_bytes(self, resume: Callable[[], None]) -> None:
        """Call `resume` once bytes were freed, after the claims that waited before it. It
        claims again, and may wait again."""
        self._bytes_waiting.append(resume)

    def _resume_bytes(self) -> None:
        """Let the waiting claims retry, oldest first, while there is room (a retry that is
        refused waits again, behind the others)."""
        self._bytes_resume_scheduled = False
        _resume_while(self._bytes_waiting, lambda: self.held_bytes < self.held_bytes_max, "reads")


def _resume_while(waiting: deque[Callable[[], None]], room: Callable[[], bool], what: str) -> None:
    """Call the waiting resumes, oldest first, while `room()` holds; each is called at most
    once (one that waits again goes to the back, for a later turn)."""
    for _ in range(len(waiting)):
        if not room():
            break
        resume = waiting.popleft()
        try:
            resume()
        except Exception as exc:  # one connection's failure must not strand the others
            asyncio.get_running_loop().call_exception_handler(
                {"message": f"resuming a connection's {what} failed", "exception": exc}
            )
