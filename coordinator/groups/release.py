"""Large structures an event lets go of, freed a slice at a time (issue 16, item 11).

Freeing is work too: when a 20,000-member classic group's last member expired, the event
that wrote its emptied record also dropped the previous record, 20,000 MemberMetadata
with their ids, hosts, subscriptions and assignments (~3 ms of deallocation in one shard
event). `SlicedRelease.later(items)` takes the items over instead; a 0-delay timer
(`release`) then drops RELEASE_SLICE of them per shard event until none is left. What is
held was already unreachable for the shard's logic: this changes when memory is returned,
never what the shard does or writes.
"""

from __future__ import annotations

from collections.abc import Iterable

from .result import Result, Timer

# Items dropped per shard event (a classic member's record: ~1 us to free with its fields).
RELEASE_SLICE = 1_000
RELEASE_KEY = "release"


class SlicedRelease:
    """Holds what events let go of and frees it RELEASE_SLICE items per shard event."""

    def __init__(self, timer: Timer) -> None:
        self._timer = timer
        self._held: list[list[object] | dict[object, object]] = []

    def later(self, items: Iterable[object]) -> None:
        """Take over `items` and free them over the next shard events: a dict as it is
        (emptied a slice at a time), anything else as a list of its items (the caller
        drops its container, which then only lets go of its references). Fewer than
        RELEASE_SLICE items are left to the caller."""
        if isinstance(items, dict):
            if len(items) <= RELEASE_SLICE:
                return
            held: list[object] | dict[object, object] = items
        else:
            held = list(items)
            if len(held) <= RELEASE_SLICE:
                return
        self._held.append(held)
        if not self._timer.is_scheduled(RELEASE_KEY):
            self._timer.schedule(RELEASE_KEY, 0, self._step)

    def held(self) -> int:
        """Items still waiting to be freed."""
        return sum(map(len, self._held))

    def _step(self, now_ms: int) -> Result:
        """Free up to RELEASE_SLICE items; the rest in the next shard event."""
        budget = RELEASE_SLICE
        while self._held and budget:
            held = self._held[-1]
            dropped = min(budget, len(held))
            if isinstance(held, dict):
                for _ in range(dropped):
                    held.popitem()
            else:
                del held[len(held) - dropped :]
            budget -= dropped
            if not held:
                self._held.pop()
        if self._held:
            self._timer.schedule(RELEASE_KEY, 0, self._step)
        return Result()
