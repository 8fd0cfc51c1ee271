"""A connection's Produce requests append in the order they came even when the first waits
for the transaction coordinator (KIP-890: the partition leader asks it before a batch
opens its producer's transaction): a producer pipelines its batches, and the one after the
batch that opens the transaction, appended first, would be refused
OUT_OF_ORDER_SEQUENCE_NUMBER (the Java client's transactions V2 did, on a loaded machine)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from groupcoord.coordinator.server.app import Server
from groupcoord.coordinator.topics.produce import handle_produce
from groupcoord.protocol.api import ApiKey, decode_request
from groupcoord.protocol.errors import ErrorCode
from tests.integration.txn_support import txn_batch
from tests.rawclient import encode_request, request_class
from tests.unit.server_support import client_context, started_server

TOPIC = "out"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async for started in started_server(tmp_path / "data"):
        yield started


class Coordinator:
    """The transaction gateway's add_partitions: the first call answers once `release` is
    set (the previous transaction's markers still being written), later ones at once."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls = 0

    async def add_partitions(self, *args: Any) -> ErrorCode:
        self.calls += 1
        if self.calls == 1:
            await self.release.wait()
        return ErrorCode.NONE


def request(batch: bytes, correlation_id: int) -> Any:
    version = 12
    m = sys.modules[request_class(ApiKey.PRODUCE, version).__module__]
    body = m.ProduceRequest(
        transactional_id="tx",
        acks=-1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            m.TopicProduceData(
                name=TOPIC, partition_data=(m.PartitionProduceData(index=0, records=batch),)
            ),
        ),
    )
    frame = encode_request(ApiKey.PRODUCE, version, correlation_id, body)
    return decode_request(frame[4:], {ApiKey.PRODUCE: (12, 12)})


async def test_pipelined_batches_append_in_order(server: Server) -> None:
    server.context.topics.create(TOPIC, 1, {})
    coordinator = Coordinator()
    ctx = dataclasses.replace(client_context(server), txns=coordinator)
    first = asyncio.ensure_future(handle_produce(ctx, request(txn_batch([b"a", b"b"], 9, 0, 0), 1)))
    second = asyncio.ensure_future(handle_produce(ctx, request(txn_batch([b"c"], 9, 0, 2), 2)))
    await asyncio.sleep(0.05)
    assert not first.done() and not second.done()
    coordinator.release.set()
    answers = await asyncio.wait_for(asyncio.gather(first, second), 30)
    results = [answer.responses[0].partition_responses[0] for answer in answers]
    assert [(r.error_code, r.base_offset) for r in results] == [
        (ErrorCode.NONE, 0),
        (ErrorCode.NONE, 2),
    ]
