"""Per-address accept queues (issue 16, item 8's flood target; accept_queues.py): a flood of
connections from one address waits in its own queue, so a new client from another address
is accepted at once instead of after the flood. Real sockets on loopback addresses."""

from __future__ import annotations

import asyncio
import select
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from groupcoord.coordinator.config import ConfigError, load_config
from groupcoord.coordinator.server.accept_queues import listen_sockets, queue_of
from groupcoord.coordinator.server.app import Server
from groupcoord.coordinator.server.listener import _ACCEPTS_PER_CALLBACK
from tests.unit.server_support import started_server
from tests.unit.waits import BOUND_S

FLOOD = 300


def _connect(port: int, host: str) -> socket.socket:
    sock = socket.socket()
    sock.bind((host, 0))
    sock.connect(("127.0.0.1", port))  # completes in the kernel: nobody accepts yet
    return sock


def test_the_kernel_picks_the_queue_of_the_source_address() -> None:
    """Connections from one address always land in the queue queue_of() names, whatever
    their source port; two addresses in different queues do not share one."""
    sockets = listen_sockets(socket.AF_INET, socket.SOCK_STREAM, 0, ("127.0.0.1", 0), 64, 8)
    port = sockets[0].getsockname()[1]
    clients = []
    try:
        assert len(sockets) == 8
        assert {s.getsockname()[1] for s in sockets} == {port}
        for host in ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.1", "127.0.0.2"):
            clients.append(_connect(port, host))
            ready, _, _ = select.select(sockets, [], [], BOUND_S)
            assert len(ready) == 1
            assert sockets.index(ready[0]) == queue_of(host, 8)
            conn, address = ready[0].accept()
            assert address[0] == host
            conn.close()
        assert queue_of("127.0.0.1", 8) != queue_of("127.0.0.2", 8)
    finally:
        for sock in sockets + clients:
            sock.close()


def test_a_port_held_by_a_server_is_not_shared_with_a_second_one() -> None:
    """SO_REUSEPORT would let a second server bind the port too and take connections
    silently: the port is bound alone first, which fails while a server holds it."""
    sockets = listen_sockets(socket.AF_INET, socket.SOCK_STREAM, 0, ("127.0.0.1", 0), 64, 8)
    try:
        address = ("127.0.0.1", sockets[0].getsockname()[1])
        with pytest.raises(OSError) as raised:
            listen_sockets(socket.AF_INET, socket.SOCK_STREAM, 0, address, 64, 8)
        assert raised.value.errno == 98  # EADDRINUSE
    finally:
        for sock in sockets:
            sock.close()
    one = listen_sockets(socket.AF_INET, socket.SOCK_STREAM, 0, ("127.0.0.1", 0), 64, 1)
    assert len(one) == 1
    one[0].close()


def test_accept_queues_is_bounded_by_the_hash() -> None:
    with pytest.raises(ConfigError):
        load_config(overrides={"accept_queues": 65}, environ={})
    with pytest.raises(ConfigError):
        load_config(overrides={"accept_queues": 0}, environ={})


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async for srv in started_server(tmp_path / "data", connections_max_per_ip=5):
        yield srv


async def test_a_client_is_accepted_before_a_flood_from_another_address(server: Server) -> None:
    """FLOOD connections from 127.0.0.1 wait to be accepted, then one from 127.0.0.2: the
    listener reaches 127.0.0.2's connection in its first turn, not after the flood (one
    FIFO queue made it wait for all FLOOD, ~40 us each). The flood is still refused past
    its address's cap, and the other client is admitted."""
    listener = server._listener
    assert listener is not None
    order: list[str] = []
    protocol_for = listener._protocol_for

    def recording(host: str) -> asyncio.Protocol | None:
        order.append(host)
        return protocol_for(host)

    listener._protocol_for = recording
    listener._pause()  # connections queue in the kernel meanwhile
    port = server.node.port
    loop = asyncio.get_running_loop()
    flood = await loop.run_in_executor(
        None, lambda: [_connect(port, "127.0.0.1") for _ in range(FLOOD)]
    )
    other = _connect(port, "127.0.0.2")
    try:
        listener._resume()
        async with asyncio.timeout(BOUND_S):
            while len(order) < FLOOD + 1:
                await asyncio.sleep(0.005)
        # At most one batch of the flood's queue goes first (the loop runs the ready
        # queues' callbacks in its own order).
        assert order.index("127.0.0.2") <= _ACCEPTS_PER_CALLBACK
        assert order.count("127.0.0.1") == FLOOD
        assert server.limits.per_ip == {"127.0.0.1": 5, "127.0.0.2": 1}
    finally:
        for sock in [*flood, other]:
            sock.close()
