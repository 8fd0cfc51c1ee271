"""The per-iteration frame budget (coordinator/server/frame_budget.py): the connections
together handle at most frames_per_loop_iteration_max request frames per event-loop
iteration; the rest wait in their decoders (reading paused) and are handled in later
iterations, in order, first come first served, so that callbacks queued meanwhile (an fsync
round's completion) are not held behind one long burst of reads.

A real Server in this process; only the sockets are replaced by recording transports."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from groupcoord.coordinator.config import ConfigError, load_config
from groupcoord.coordinator.server.app import Server
from groupcoord.coordinator.server.connection import Connection
from groupcoord.coordinator.server.frame_budget import FrameBudget
from tests.unit.server_support import started_server
from tests.unit.test_connection_limits import TOPIC, RecordingTransport, _commits

BUDGET = 3


async def test_a_budget_is_spent_within_an_iteration_and_renewed_for_the_next() -> None:
    budget = FrameBudget(BUDGET)
    assert [budget.take() for _ in range(BUDGET + 2)] == [True] * BUDGET + [False, False]
    await asyncio.sleep(0)  # the next iteration
    assert [budget.take() for _ in range(BUDGET + 1)] == [True] * BUDGET + [False]
    await asyncio.sleep(0)
    assert budget.take()
    await asyncio.sleep(0)
    # What an iteration left unused does not carry over.
    assert [budget.take() for _ in range(BUDGET + 1)] == [True] * BUDGET + [False]
    with pytest.raises(ValueError):
        FrameBudget(0)


async def test_a_resume_that_fails_does_not_strand_the_others() -> None:
    budget = FrameBudget(2)
    resumed: list[str] = []
    reported: list[str] = []

    def failing() -> None:
        assert budget.take()
        raise RuntimeError("broken connection")

    def healthy() -> None:
        assert budget.take()
        resumed.append("healthy")

    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context["message"]))
    try:
        assert budget.take() and budget.take() and not budget.take()  # spent
        budget.wait(failing)
        budget.wait(healthy)
        await asyncio.sleep(0)  # the next iteration: both resumed, one budget of 2
        assert resumed == ["healthy"]
        assert reported == ["resuming a connection's frames failed"]
    finally:
        loop.set_exception_handler(None)


def test_the_setting_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="frames_per_loop_iteration_max"):
        load_config(
            overrides={"data_dir": str(tmp_path), "frames_per_loop_iteration_max": 0},
            environ={},
        )


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async for srv in started_server(tmp_path / "data", frames_per_loop_iteration_max=BUDGET):
        srv.topics.create(TOPIC, 1, {})
        yield srv


async def test_frames_beyond_the_budget_wait_for_later_iterations(server: Server) -> None:
    connections = [Connection(server) for _ in range(2)]
    transports = [RecordingTransport() for _ in connections]
    handled: list[list[int]] = [[], []]  # frames each connection handled, per iteration
    for index, (conn, transport) in enumerate(zip(connections, transports, strict=True)):
        conn.connection_made(transport)
        handle = conn._handle_frame

        def counting(frame: bytes, handle: Any = handle, index: int = index) -> None:
            handled[index][-1] += 1
            handle(frame)

        conn._handle_frame = counting  # type: ignore[method-assign]
    count = 4 * BUDGET

    def iteration() -> None:
        for counts in handled:
            counts.append(0)

    # Both reads arrive in the same iteration: the first connection spends the budget,
    # the second handles nothing; both keep the rest unread and pause reading.
    iteration()
    for conn in connections:
        conn.data_received(_commits(count))
    assert [counts[-1] for counts in handled] == [BUDGET, 0]
    assert all(transport.paused for transport in transports)
    # The next iterations resume them in the order they ran out (the first, then the
    # second), one budget each, and one that runs out again waits behind the other.
    for expected in ([BUDGET, 0], [0, BUDGET], [BUDGET, 0]):
        iteration()
        await asyncio.sleep(0)
        assert [counts[-1] for counts in handled] == expected
    for transport in transports:
        await transport.answered(count)
    # Every request answered, each connection's in order, and reading resumed.
    for transport in transports:
        assert transport.correlation_ids() == list(range(1, count + 1))
        assert not transport.paused
    committed = server.coordinator.runner_for("g").shard.offsets.get("g", TOPIC, 0)
    assert committed is not None and committed.offset == count
