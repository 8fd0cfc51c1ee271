"""Limits that outlive a request (issue 16, items 8 and 9): per-address admission
(connection_limits.py), the periodic sweep's deadlines (idle connections, frames that
dribble in) with a bounded cost per tick, and the byte budget for partial frames and unsent
responses (frame_budget.py). A real Server in this process; only the sockets are replaced
by recording transports, and the sweep is driven with explicit times."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from groupcoord.coordinator.config import ConfigError, load_config
from groupcoord.coordinator.server import app as app_module
from groupcoord.coordinator.server.app import Server
from groupcoord.coordinator.server.connection import Connection
from groupcoord.coordinator.server.connection_limits import (
    SWEEP_CONNECTIONS_PER_TICK,
    ConnectionLimits,
)
from groupcoord.coordinator.server.dispatch import build_dispatch
from groupcoord.coordinator.server.frame_budget import FrameBudget
from tests.unit.server_support import started_server
from tests.unit.test_connection_limits import RecordingTransport
from tests.unit.waits import BOUND_S

MiB = 1024 * 1024


class Transport(RecordingTransport):
    """A recording transport from a chosen address that records aborts."""

    def __init__(self, host: str = "127.0.0.1", unsent: int = 0) -> None:
        super().__init__()
        self.host = host
        self.aborted = False
        self.unsent = unsent

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return (self.host, 40000) if name == "peername" else default

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def abort(self) -> None:
        self.aborted = True


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async for srv in started_server(
        tmp_path / "data",
        connections_max_per_ip=2,
        connections_max_per_ip_overrides="127.0.0.9:0, 127.0.0.8:3",
        connections_max_idle_ms=10_000,
        frame_read_timeout_ms=2_000,
        frame_bytes_max=64 * MiB,
        queued_request_bytes_max=16 * MiB,
    ):
        srv.limits.stop()  # the tests drive the sweep themselves
        yield srv


def connect(
    server: Server, host: str = "127.0.0.1", unsent: int = 0
) -> tuple[Connection, Transport]:
    conn = Connection(server)
    transport = Transport(host, unsent)
    conn.connection_made(transport)
    return conn, transport


def api_versions_frame(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, -1)
    return struct.pack(">i", len(body)) + body


# admission -----------------------------------------------------------------------------------


async def test_connections_beyond_the_per_address_cap_are_refused(server: Server) -> None:
    first = [connect(server) for _ in range(2)]
    refused = connect(server)
    assert refused[1].aborted and refused[0].closed
    assert not any(t.aborted for _, t in first)
    assert not connect(server, "127.0.0.2")[1].aborted  # another address
    assert connect(server, "127.0.0.9")[1].aborted  # an override of 0
    assert [connect(server, "127.0.0.8")[1].aborted for _ in range(4)] == [False] * 3 + [True]
    assert server.limits.per_ip == {"127.0.0.1": 2, "127.0.0.2": 1, "127.0.0.8": 3}
    # A refused connection going away frees nothing; an admitted one frees its slot.
    refused[0].connection_lost(None)
    assert server.limits.per_ip["127.0.0.1"] == 2
    first[0][0].connection_lost(None)
    assert server.limits.per_ip["127.0.0.1"] == 1
    assert not connect(server)[1].aborted


class _Client:
    """A real connection to the server's listener from a chosen loopback address."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, server: Server, host: str) -> _Client:
        async with asyncio.timeout(BOUND_S):
            return cls(
                *await asyncio.open_connection("127.0.0.1", server.node.port, local_addr=(host, 0))
            )

    async def served(self, correlation_id: int) -> bool:
        """Whether an ApiVersions request is answered."""
        self.writer.write(api_versions_frame(correlation_id))
        async with asyncio.timeout(BOUND_S):
            size = struct.unpack(">i", await self.reader.readexactly(4))[0]
            body = await self.reader.readexactly(size)
        return struct.unpack_from(">i", body)[0] == correlation_id

    def close(self) -> None:
        self.writer.close()


async def _reset(server: Server, host: str) -> bool:
    """Whether the server resets a new connection from `host` (rather than closing it with a
    FIN, or keeping it). The reset may come before this process's connect completes."""
    try:
        client = await _Client.open(server, host)
    except ConnectionResetError:
        return True
    try:
        async with asyncio.timeout(BOUND_S):
            await client.reader.read(1)
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    finally:
        client.close()
    return False


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Until `condition()` holds (the server saw a client's close), within BOUND_S."""
    async with asyncio.timeout(BOUND_S):
        while not condition():
            await asyncio.sleep(0.005)
    assert condition(), what


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The addresses of the Connections the server builds (one entry each)."""
    addresses: list[str] = []

    class Counted(Connection):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            addresses.append(self.host)

    monkeypatch.setattr(app_module, "Connection", Counted)
    return addresses


async def test_a_refused_connection_is_reset_by_the_listener_before_anything_is_built(
    server: Server, built: list[str]
) -> None:
    """Over the listener, with real sockets: refusal happens right after accept(), with a
    reset, and no Connection (nor transport) is built for a refused connection."""
    admitted = [await _Client.open(server, "127.0.0.1") for _ in range(2)]
    assert [await c.served(i) for i, c in enumerate(admitted)] == [True, True]
    resets = [await _reset(server, "127.0.0.1") for _ in range(20)]
    resets.append(await _reset(server, "127.0.0.9"))  # an override of 0
    other = await _Client.open(server, "127.0.0.2")
    assert await other.served(7)
    assert built == ["127.0.0.1", "127.0.0.1", "127.0.0.2"]
    assert resets == [True] * 21
    assert server.limits.per_ip == {"127.0.0.1": 2, "127.0.0.2": 1}
    assert server.limits.admitted == len(server.connections) == 3
    errors = server.metrics.connection_errors
    assert errors.labels("connections_max_per_ip")._value.get() == 21
    # The admitted connections were kept and are still served.
    assert [await c.served(10 + i) for i, c in enumerate(admitted)] == [True, True]
    for client in (*admitted, other):
        client.close()


async def test_admitted_connections_release_their_count_once_when_they_close(
    server: Server, built: list[str]
) -> None:
    """Each admitted connection is counted once and released once when it closes, so the
    address's cap is reusable; refusals release nothing."""
    first = [await _Client.open(server, "127.0.0.1") for _ in range(2)]
    assert [await c.served(i) for i, c in enumerate(first)] == [True, True]
    assert await _reset(server, "127.0.0.1")
    first[0].close()
    await _until(lambda: len(server.connections) == 1, "the closed connection is lost")
    assert server.limits.per_ip == {"127.0.0.1": 1} and server.limits.admitted == 1
    # The freed slot is taken again, and the cap holds again after.
    again = await _Client.open(server, "127.0.0.1")
    assert await again.served(3)
    assert await _reset(server, "127.0.0.1")
    assert server.limits.per_ip == {"127.0.0.1": 2}
    for client in (first[1], again):
        client.close()
    await _until(lambda: not server.connections, "every connection is lost")
    assert server.limits.per_ip == {} and server.limits.admitted == 0
    assert built == ["127.0.0.1"] * 3
    # A connection whose transport could not be set up releases its admission too: the
    # listener tells the protocol (the loop never will).
    protocol = server.protocol_for("127.0.0.1")
    assert protocol is not None and server.limits.per_ip == {"127.0.0.1": 1}
    dead = socket.socket()
    dead.close()
    assert server._listener is not None
    await server._listener._connect(dead, protocol)
    assert server.limits.per_ip == {} and server.limits.admitted == 0


def test_the_connections_max_applies_before_the_address_cap() -> None:
    from groupcoord.coordinator.observability.metrics import ServerMetrics

    config = load_config(overrides={"connections_max": 3}, environ={})
    limits = ConnectionLimits(config, ServerMetrics(), [])
    assert limits.admit("a", 2) is None
    assert limits.admit("b", 3) == "connections_max"
    assert limits.per_ip == {"a": 1}


@pytest.mark.parametrize("text", ["127.0.0.1", "127.0.0.1:x", ":5", "a:1,b"])
def test_malformed_overrides_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="connections_max_per_ip_overrides"):
        load_config(overrides={"connections_max_per_ip_overrides": text}, environ={})


# deadlines -----------------------------------------------------------------------------------


async def test_an_idle_connection_is_closed_an_active_one_is_not(server: Server) -> None:
    idle, idle_transport = connect(server)
    busy, busy_transport = connect(server)
    start = idle.context.read_at
    limits = server.limits
    assert idle.sweep(start + 9.9, limits.idle_s, limits.frame_read_s) is None
    busy.data_received(api_versions_frame(1))
    await busy_transport.answered(1)
    assert idle.sweep(start + 10.1, limits.idle_s, limits.frame_read_s) == "idle_timeout"
    assert idle_transport.aborted and idle.closed
    # Idle counts from the last read.
    assert busy.sweep(busy.context.read_at + 9.9, limits.idle_s, limits.frame_read_s) is None
    assert not busy_transport.aborted


async def test_a_connection_with_a_request_in_flight_is_not_idle(server: Server) -> None:
    conn, transport = connect(server)
    conn.pending.append(object())  # type: ignore[arg-type]  # a parked request
    assert conn.sweep(conn.context.read_at + 60, 10, 2) is None
    assert not transport.aborted


async def test_a_frame_that_dribbles_in_is_closed_after_the_read_deadline(
    server: Server,
) -> None:
    conn, transport = connect(server)
    frame = api_versions_frame(1)
    conn.data_received(frame[:1])
    started = conn.context.read_at
    # More bytes keep coming (never idle), but the frame is still incomplete.
    for i in range(1, 5):
        conn.data_received(frame[i : i + 1])
        assert conn.sweep(started + 1.9, 10, 2) is None
    assert conn.sweep(started + 2.1, 10, 2) == "frame_read_timeout"
    assert transport.aborted


async def test_each_frame_gets_its_own_read_deadline(server: Server) -> None:
    conn, transport = connect(server)
    frames = b"".join(api_versions_frame(i) for i in range(1, 4))
    conn.data_received(frames[:5])
    assert conn._frame_started == conn.context.read_at
    conn.data_received(frames[5:8])  # the same frame: its deadline runs on
    first = conn._frame_started
    assert first < conn.context.read_at
    # A read that completes the first frame and begins the next: the deadline restarts.
    conn.data_received(frames[8:20])
    assert conn._frame_started == conn.context.read_at > first
    conn.data_received(frames[20:])  # all complete: no deadline at all
    assert not conn._frame_started
    assert conn.sweep(conn.context.read_at + 100, 1000, 2) is None
    await transport.answered(3)


async def test_a_tick_visits_a_bounded_number_of_connections() -> None:
    from groupcoord.coordinator.observability.metrics import ServerMetrics

    visits: list[int] = []

    class Fake:
        def __init__(self, index: int) -> None:
            self.index = index

        def sweep(self, now: float, idle_s: float, frame_read_s: float) -> str | None:
            visits.append(self.index)
            return "idle_timeout" if self.index % 7 == 0 else None

    count = 2 * SWEEP_CONNECTIONS_PER_TICK + 500
    connections = [Fake(i) for i in range(count)]
    limits = ConnectionLimits(load_config(environ={}), ServerMetrics(), connections)
    for _ in range(3):
        before = len(visits)
        limits.sweep_once()
        assert len(visits) - before <= SWEEP_CONNECTIONS_PER_TICK
    assert sorted(visits) == list(range(count))  # one round visits each once
    limits.sweep_once()  # the next round starts over
    assert visits[-SWEEP_CONNECTIONS_PER_TICK:] == list(range(SWEEP_CONNECTIONS_PER_TICK))


# the byte budget -------------------------------------------------------------------------------


async def test_a_budget_grants_claims_within_its_cap_or_to_a_lone_holder() -> None:
    budget = FrameBudget(10, held_bytes_max=100)
    assert budget.claim(0, 60)
    assert not budget.claim(0, 50)  # 60 + 50 > 100
    assert budget.claim(60, 90)  # the only holder may grow past the cap
    assert budget.held_bytes == 90
    resumed: list[str] = []
    budget.wait_for_bytes(lambda: resumed.append("a"))
    budget.wait_for_bytes(lambda: resumed.append("b"))
    budget.adjust(-90)
    assert resumed == []  # resumed in a later iteration, in order
    await asyncio.sleep(0)
    assert resumed == ["a", "b"] and budget.held_bytes == 0


async def test_partial_frames_beyond_the_budget_wait_and_resume_in_turn(server: Server) -> None:
    frame_bytes = 12 * MiB  # two do not fit in the 16 MiB budget
    body = struct.pack(">hhih", 18, 0, 1, -1) + b"\x00" * (frame_bytes - 10)
    frame = struct.pack(">i", len(body)) + body
    (a, ta), (b, tb) = connect(server, "127.0.0.1"), connect(server, "127.0.0.2")
    a.data_received(frame[:1000])
    b.data_received(frame[:1000])
    budget = server.frame_budget
    # The first claims its whole frame and reads on; the second waits, reading paused.
    assert budget.held_bytes == frame_bytes and not ta.paused
    assert tb.paused
    # Waiting for the budget is the server's doing: no read deadline meanwhile.
    assert b.sweep(b.context.read_at + 60, 1000, 2) is None
    a.data_received(frame[1000:])
    await ta.answered(1)
    await asyncio.sleep(0)  # the freed bytes resume the waiting connection
    assert not tb.paused and budget.held_bytes == frame_bytes
    b.data_received(frame[1000:])
    await tb.answered(1)
    assert budget.held_bytes == 0


async def test_unsent_responses_are_counted_until_they_drain(server: Server) -> None:
    conn, transport = connect(server, unsent=5 * MiB)
    conn.data_received(api_versions_frame(1))
    await transport.answered(1)
    assert server.frame_budget.held_bytes == 0  # writes measure nothing
    assert conn.sweep(conn.context.read_at, 1000, 2) is None  # the sweep does
    assert server.frame_budget.held_bytes == 5 * MiB
    transport.unsent = 0  # drained
    assert conn.sweep(conn.context.read_at, 1000, 2) is None
    assert server.frame_budget.held_bytes == 0
    # Past the transport's high-water mark they are counted at once.
    conn2, transport2 = connect(server, unsent=9 * MiB)
    conn2.pause_writing()
    assert server.frame_budget.held_bytes == 9 * MiB
    transport2.unsent = 1 * MiB
    conn2.resume_writing()
    assert server.frame_budget.held_bytes == 1 * MiB
    conn2.connection_lost(None)  # a closed connection gives its bytes back
    assert server.frame_budget.held_bytes == 0


# failures while answering ------------------------------------------------------------------


async def test_a_response_that_cannot_be_encoded_closes_only_that_connection(
    server: Server,
) -> None:
    """A handler's answer the codec cannot write (a bug: no handler is known to give one
    now) would leave the client waiting forever: the connection closes, with one log line
    and the metric, and another connection is served."""
    server.handlers[18] = lambda context, request: object()  # ApiVersions answers garbage
    conn, transport = connect(server)
    conn.data_received(api_versions_frame(1))
    await asyncio.sleep(0)
    assert conn.closed and transport.written == b""
    errors = server.metrics.connection_errors.labels("response_encoding_failed")
    assert errors._value.get() == 1
    other, other_transport = connect(server, "127.0.0.2")
    del server.handlers[18]  # a KeyError would close it too: the real handler back
    server.handlers.update(build_dispatch()[0])
    other.data_received(api_versions_frame(2))
    await other_transport.answered(1)
