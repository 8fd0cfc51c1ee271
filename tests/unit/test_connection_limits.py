"""The per-connection in-flight limit holds within one read: a read that carries more
pipelined requests than connection_inflight_max is handled in slices, the rest waiting in
the frame decoder (reading paused) until answers make room. Why: one socket read can hold
thousands of small requests; handling them all in one go held the event loop for seconds
under overload, fsync completions could not run, and durable commits stopped being answered
(50,000 commits/s offered to a server serving 10,000/s: 0.5/s answered, now ~10,000/s).

A real Server (shards, group commit, fsync) in this process; only the socket is replaced by
a transport that records what the connection does with it."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from groupcoord.coordinator.server.app import Server
from groupcoord.coordinator.server.connection import Connection
from tests.bench import groupload as gl
from tests.unit.server_support import started_server
from tests.unit.waits import BOUND_S

INFLIGHT_MAX = 10
TOPIC = "limits"


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.paused = False
        self.pauses = 0
        self._wrote = asyncio.Event()

    def write(self, data: Any) -> None:
        self.written += data
        self._wrote.set()

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.written += data
        self._wrote.set()

    async def until(self, condition: Callable[[], bool]) -> None:
        """Until `condition()` holds, checked after each write."""
        async with asyncio.timeout(BOUND_S):
            while not condition():
                self._wrote.clear()
                await self._wrote.wait()

    async def answered(self, count: int) -> None:
        """Until `count` responses were written."""
        await self.until(lambda: len(self.correlation_ids()) >= count)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0  # everything written is taken at once

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def correlation_ids(self) -> list[int]:
        ids, pos = [], 0
        while pos + 8 <= len(self.written):
            size, cid = struct.unpack_from(">ii", self.written, pos)
            ids.append(cid)
            pos += 4 + size
        return ids


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async for srv in started_server(tmp_path / "data", connection_inflight_max=INFLIGHT_MAX):
        srv.topics.create(TOPIC, 1, {})
        yield srv


def _commits(count: int) -> bytes:
    """`count` pipelined OffsetCommit v9 frames (correlation ids 1..count), one group."""
    template = gl.Template(
        gl.OFFSET_COMMIT, 9, gl.commit_body("g", TOPIC, 0, 0x5EED), i64_marker=0x5EED
    )
    return b"".join(template.frame(cid, cid) for cid in range(1, count + 1))


async def test_a_read_beyond_the_inflight_limit_is_handled_in_slices(server: Server) -> None:
    conn = Connection(server)
    transport = RecordingTransport()
    conn.connection_made(transport)
    count = 25 * INFLIGHT_MAX
    conn.data_received(_commits(count))
    # Only the limit was handed to the shards; the rest waits, and reading is paused.
    assert len(conn.pending) == INFLIGHT_MAX
    assert transport.paused

    def all_answered() -> bool:
        assert len(conn.pending) <= INFLIGHT_MAX  # at every answer
        return len(transport.correlation_ids()) == count

    await transport.until(all_answered)
    assert transport.correlation_ids() == list(range(1, count + 1))  # all, in order
    assert not transport.paused and not conn.pending
    # Every commit was applied, the last one last.
    committed = server.coordinator.runner_for("g").shard.offsets.get("g", TOPIC, 0)
    assert committed is not None and committed.offset == count
