"""Produce (coordinator/topics/produce.py) against a failed partition log: that partition is
answered KAFKA_STORAGE_ERROR and the request's other partitions are answered normally. Why:
a LogFailed escaping the handler became a generic error response, and a ProduceResponse has
no top-level error code, so the client got no partition entries at all, while partitions
handled earlier in the request were appended but never acknowledged.

A real Server (group commit, fsync) in this process; only the socket is replaced by a
transport that records what the connection writes."""

from __future__ import annotations

import asyncio
import datetime
import struct
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.serial import entity_reader

from coordinator.server.app import Server
from coordinator.server.connection import Connection
from protocol.api import ApiKey, response_schema
from protocol.errors import ErrorCode
from tests.rawclient import encode_request, request_class
from tests.support import make_batch
from tests.unit.server_support import started_server
from tests.unit.test_connection_limits import RecordingTransport

TOPIC = "produce"
VERSION = 11


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async for srv in started_server(tmp_path / "data"):
        srv.topics.create(TOPIC, 2, {})
        yield srv


def _produce_frame(correlation_id: int, partitions: tuple[int, ...]) -> bytes:
    m = sys.modules[request_class(ApiKey.PRODUCE, VERSION).__module__]
    body = m.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            m.TopicProduceData(
                name=TOPIC,
                partition_data=tuple(
                    m.PartitionProduceData(index=p, records=make_batch(2)) for p in partitions
                ),
            ),
        ),
    )
    return encode_request(ApiKey.PRODUCE, VERSION, correlation_id, body)


def _decode_response(written: bytes) -> Any:
    (size,) = struct.unpack_from(">i", written, 0)
    assert len(written) == 4 + size  # exactly one response
    frame = written[4:]
    # Response header v1: correlation id, then empty tagged fields.
    value, _ = entity_reader(response_schema(ApiKey.PRODUCE, VERSION))(frame, 5)
    return value


async def test_a_failed_log_answers_its_partition_and_the_others_normally(
    server: Server,
) -> None:
    topic = server.topics.get(TOPIC)
    assert topic is not None
    # As after a failed fsync: the log refuses writes until it is reopened (LogFailed).
    topic.partitions[0].log.mark_failed(OSError(5, "Input/output error"))
    conn = Connection(server)
    transport = RecordingTransport()
    conn.connection_made(transport)
    conn.data_received(_produce_frame(1, (1, 0)) + _produce_frame(2, (0, 1)))
    for _ in range(1000):
        if len(transport.correlation_ids()) == 2:
            break
        await asyncio.sleep(0.005)
    assert transport.correlation_ids() == [1, 2]
    first_size = 4 + struct.unpack_from(">i", transport.written, 0)[0]
    for written, expected_base in (
        (bytes(transport.written[:first_size]), 0),
        (bytes(transport.written[first_size:]), 2),
    ):
        response = _decode_response(written)
        assert [t.name for t in response.responses] == [TOPIC]
        answers = {p.index: p for p in response.responses[0].partition_responses}
        assert sorted(answers) == [0, 1]  # both partitions answered, in any order asked
        assert answers[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert answers[0].base_offset == -1
        assert answers[1].error_code == ErrorCode.NONE
        assert answers[1].base_offset == expected_base
    # Partition 1 took both appends and made them durable; partition 0 took none.
    assert topic.partitions[1].log.durable_offset == 4
    assert topic.partitions[0].log.next_offset == 0
    conn.close()
