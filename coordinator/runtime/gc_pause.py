"""The cyclic garbage collector held off while something builds a large structure that
makes no cycles (issue 16, item 11): a shard's load, a target assignment computed off the
loop.

Why. A collection walks every young container and what it references. A structure
being built is young and large: a 20,000-member group's inputs and the assignor's maps,
or the groups a load replays. A collection that comes due meanwhile walks all of it (a
gen-0 collection of 44,000 objects with 320,000 references took 23-53 ms, in the
offload's worker thread, which holds the GIL: the loop stalls as long); once built, what
is kept is walked again by gen-1 and gen-2 collections. What such work makes dies by
reference counting (it makes no cycles), so nothing is lost by collecting afterwards: what
other tasks make meanwhile waits for the next collection. A pause lasts as long as its
work, which must be bounded: a plugin assignor's computation (its cost unknown, it may
hang) runs with the GC on.

Pauses nest (two loads, or a load and an offload, may overlap), from any thread.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_pauses = 0
_was_enabled = False


def pause_gc() -> None:
    """Disable the cyclic GC until the matching resume_gc."""
    global _pauses, _was_enabled
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1


def resume_gc() -> None:
    """Release one pause; the last one re-enables the GC if it was enabled before."""
    global _pauses
    with _lock:
        _pauses -= 1
        if _pauses == 0 and _was_enabled:
            gc.enable()


def pauses() -> int:
    """How many pauses are held (0: the GC runs as configured)."""
    return _pauses


def without_gc(compute: Callable[[], T]) -> Callable[[], T]:
    """`compute` run with the GC paused (in whichever thread runs it); its temporaries,
    freed when it returns, are gone before the GC resumes."""

    def run() -> T:
        pause_gc()
        try:
            return compute()
        finally:
            resume_gc()

    return run
