"""TLS connections are read as buffered protocols (server/tls_connection.py): the TLS
layer decrypts into the server's read buffer instead of a bytes object per record. Shown
on a real Server in this process with a PLAINTEXT and an SSL listener and a real TLS
client: pipelined requests split across TLS records and reads, and a produce request of
several MiB (its batch CRC-checked on append, so a byte lost or misplaced between reads
would be refused), are answered in order and intact; the responses ready together go to
the TLS layer as one buffer (one TLS record), a plaintext connection's as they are. Each
test runs on the standard event loop and on uvloop (the server's loop): their TLS layers
call get_buffer / buffer_updated differently (uvloop offers a read the whole buffer we
give, and reads again when it is filled)."""

from __future__ import annotations

import asyncio
import ssl
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from groupcoord.coordinator.server.app import Server
from groupcoord.protocol.batches import DefaultRecordBatchBuilder
from tests.support import free_port
from tests.tls_certs import make_pki
from tests.unit.server_support import produce_frame, started_server
from tests.unit.test_connection_guards import api_versions_frame
from tests.unit.test_connection_limits import RecordingTransport
from tests.unit.waits import BOUND_S

MiB = 1024 * 1024


@pytest.fixture(scope="module", params=["asyncio", "uvloop"])
def event_loop_policy(request: pytest.FixtureRequest) -> asyncio.AbstractEventLoopPolicy:
    if request.param == "uvloop":
        import uvloop

        return uvloop.EventLoopPolicy()
    return asyncio.DefaultEventLoopPolicy()


@pytest.fixture(scope="module")
def pki_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(CA, server certificate, key), made once for the module."""
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    cert, key = pki.issue("server", "/CN=localhost", server=True)
    return pki.ca, cert, key


@pytest.fixture
async def tls_server(
    tmp_path: Path, pki_files: tuple[Path, Path, Path]
) -> AsyncIterator[tuple[Server, ssl.SSLContext]]:
    ca, cert, key = pki_files
    async for server in started_server(
        tmp_path / "data",
        listeners=f"PLAINTEXT://127.0.0.1:{free_port()},SSL://127.0.0.1:{free_port()}",
        ssl_certificate_file=str(cert),
        ssl_key_file=str(key),
        message_bytes_max=4 * MiB,
    ):
        client = ssl.create_default_context(cafile=str(ca))
        yield server, client


async def test_tls_connections_are_buffered_protocols(
    tls_server: tuple[Server, ssl.SSLContext],
) -> None:
    server, _ = tls_server
    plain, secure = server.listeners
    streaming = server.protocol_for("127.0.0.1", plain)
    buffered = server.protocol_for("127.0.0.1", secure)
    # uvloop reads into get_buffer only for a protocol that is no asyncio.Protocol; the
    # standard loop for a BufferedProtocol. Plaintext stays streaming (data_received).
    assert not hasattr(streaming, "get_buffer")
    assert isinstance(buffered, asyncio.BufferedProtocol)
    assert not isinstance(buffered, asyncio.Protocol)
    for protocol in (streaming, buffered):
        assert protocol is not None
        protocol.connection_lost(None)  # give the admissions back


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def test_pipelined_requests_and_a_large_produce_over_tls_are_answered_intact(
    tls_server: tuple[Server, ssl.SSLContext],
    event_loop_policy: asyncio.AbstractEventLoopPolicy,
) -> None:
    server, client = tls_server
    loop_package = type(asyncio.get_running_loop()).__module__.split(".")[0]
    assert loop_package == type(event_loop_policy).__module__.split(".")[0]
    server.context.topics.create("big", 1, {})
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    now_ms = int(time.time() * 1000)
    for i in range(3000):  # ~3 MiB: many TLS records, several reads of the server
        builder.append(i, now_ms, b"k%d" % i, bytes([i % 251]) * 1000, [])
    batch = bytes(builder.build())
    large = produce_frame("big", {0: batch}, 9, 1000)
    assert len(large) > 2 * MiB
    small = [api_versions_frame(i) for i in range(300)]
    _, secure = server.listeners
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", secure.spec.port, ssl=client, server_hostname="localhost"
    )
    try:
        # Small requests in odd-sized writes (frames split across TLS records), the large
        # one between them.
        stream = b"".join(small[:150]) + large + b"".join(small[150:])
        for pos in range(0, len(stream), 7777):
            writer.write(stream[pos : pos + 7777])
        await writer.drain()
        async with asyncio.timeout(BOUND_S):
            answers = [await _read_frame(reader) for _ in range(301)]
    finally:
        writer.close()
    correlation_ids = [struct.unpack_from(">i", a)[0] for a in answers]
    assert correlation_ids == [*range(150), 1000, *range(150, 300)]
    produced = answers[150]
    # ProduceResponse v9: header tagged fields, responses[1] name "big", partitions[1]:
    # index, then the partition's error code.
    name_at = 4 + 1 + 1
    assert produced[name_at : name_at + 4] == b"\x04big"
    error_at = name_at + 4 + 1 + 4
    assert struct.unpack_from(">h", produced, error_at)[0] == 0
    log = server.context.topics.get("big").partitions[0].log
    assert log.next_offset == 3000


class _CountingTransport(RecordingTransport):
    """Records each write call (the TLS layer makes TLS records of each buffer given)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def write(self, data: Any) -> None:
        self.calls.append(1)
        super().write(data)

    def writelines(self, list_of_data: Any) -> None:
        self.calls.append(len(list_of_data))
        super().writelines(list_of_data)


async def test_responses_ready_together_are_one_write_of_a_tls_connection(
    tls_server: tuple[Server, ssl.SSLContext],
) -> None:
    server, _ = tls_server
    plain, secure = server.listeners
    stream = b"".join(api_versions_frame(i) for i in range(10))
    for served, expected_calls in ((secure, [1]), (plain, [10])):
        connection = server.protocol_for("127.0.0.1", served)
        assert connection is not None
        transport = _CountingTransport()
        connection.connection_made(transport)
        if isinstance(connection, asyncio.BufferedProtocol):
            connection.get_buffer(len(stream))[: len(stream)] = stream
            connection.buffer_updated(len(stream))
        else:
            connection.data_received(stream)  # type: ignore[attr-defined]
        await transport.answered(10)
        assert transport.correlation_ids() == list(range(10))
        assert transport.calls == expected_calls  # one buffer: one TLS record or a few
        connection.connection_lost(None)


async def _produce_over_tls(port: int, client: ssl.SSLContext, index: int) -> bytes:
    """One ~1.5 MiB produce request to topic "budget" (correlation id `index`), written in
    pieces; its answer."""
    now_ms = int(time.time() * 1000)
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for i in range(1500):
        builder.append(i, now_ms, b"k", bytes([(i + index) % 251]) * 1000, [])
    request = produce_frame("budget", {0: bytes(builder.build())}, 9, index)
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client, server_hostname="localhost"
    )
    try:
        for pos in range(0, len(request), 50_000):
            writer.write(request[pos : pos + 50_000])
            await asyncio.sleep(0)
        await writer.drain()
        async with asyncio.timeout(BOUND_S):
            return await _read_frame(reader)
    finally:
        writer.close()


async def test_large_tls_frames_waiting_for_the_byte_budget_come_through_intact(
    tmp_path: Path,
    pki_files: tuple[Path, Path, Path],
) -> None:
    """With queued_request_bytes_max below two large frames, connections sending them at
    once wait for each other's bytes (frame_budget.py); a waiting connection keeps what
    it read instead of allocating its frame (buffered_framing.py, keep_rest), and every
    frame still arrives intact (CRC-checked on append)."""
    ca, cert, key = pki_files
    async for server in started_server(
        tmp_path / "data",
        listeners=f"SSL://127.0.0.1:{free_port()}",
        ssl_certificate_file=str(cert),
        ssl_key_file=str(key),
        message_bytes_max=4 * MiB,
        queued_request_bytes_max=2 * MiB,
    ):
        client = ssl.create_default_context(cafile=str(ca))
        server.context.topics.create("budget", 1, {})
        (secure,) = server.listeners
        answers = await asyncio.gather(
            *(_produce_over_tls(secure.spec.port, client, i) for i in range(4))
        )
        for index, answer in enumerate(answers):
            assert struct.unpack_from(">i", answer)[0] == index
            error_at = 4 + 1 + 1 + 7 + 1 + 4
            assert struct.unpack_from(">h", answer, error_at)[0] == 0
        assert server.context.topics.get("budget").partitions[0].log.next_offset == 6000
