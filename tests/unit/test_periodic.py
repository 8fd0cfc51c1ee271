"""run_periodically (coordinator/runtime/periodic.py), the loop of both log cleaners: a
pass every interval until cancelled; a pass that raises does not stop the next ones."""

from __future__ import annotations

import asyncio

import pytest

from groupcoord.coordinator.runtime.periodic import run_periodically


async def test_a_failed_pass_is_followed_by_the_next_until_cancelled() -> None:
    outcomes: list[int | Exception] = [RuntimeError("disk"), 3, 0, RuntimeError("again"), 5]
    ran: list[int | Exception] = []
    done = asyncio.Event()

    async def one_pass() -> int:
        outcome = outcomes[len(ran)]
        ran.append(outcome)
        if len(ran) == len(outcomes):
            done.set()
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    task = asyncio.ensure_future(run_periodically(1, one_pass, "test"))
    await asyncio.wait_for(done.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran == outcomes  # every pass ran, in turn, failures included
