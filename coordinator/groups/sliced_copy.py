"""Copies of large dicts made a slice at a time, one shard event each (issue 16, item 11).

A computation off the loop works on copies of what it reads, made on the loop: a
20,000-member consumer group's members, target and hints were ~5 ms of copying in one
shard event (cold entries: each copied reference touches its object). `SlicedCopy` makes
the same copies `budget` entries per `step`, at C speed (dict.update of an islice of the
source's items). Between two steps the loop runs other events: the copies are valid only
if no source changed meanwhile, which the caller checks (a version it keeps with them)
before each step, starting again when one did (a dict iterator would raise on a change of
size, but not on a value replaced).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import islice
from typing import Any


class SlicedCopy:
    """Copies of `sources`, in their iteration order, made by `step`."""

    def __init__(self, sources: Sequence[Mapping[Any, Any]]) -> None:
        self.copies: list[dict[Any, Any]] = [{} for _ in sources]
        self._pending: list[tuple[Iterator[tuple[Any, Any]], dict[Any, Any]]] = [
            (iter(source.items()), copy) for source, copy in zip(sources, self.copies, strict=True)
        ]

    def step(self, budget: int) -> bool:
        """Copy up to `budget` more entries; True once every copy is complete."""
        pending = self._pending
        while pending and budget > 0:
            items, copy = pending[0]
            before = len(copy)
            copy.update(islice(items, budget))
            budget -= len(copy) - before
            if budget > 0:  # the source ran out before the budget did
                pending.pop(0)
        return not pending
