"""A real Server started in the test's event loop (no client traffic: tests call handlers
directly), the handler context a client's connection gets, and Produce requests through
the codec."""

from __future__ import annotations

import datetime
import inspect
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from kio.serial import entity_reader

from groupcoord.coordinator.config import load_config
from groupcoord.coordinator.server.app import Server
from groupcoord.coordinator.server.context import GroupContext
from groupcoord.coordinator.topics.produce import handle_produce
from groupcoord.protocol.api import ApiKey, decode_request, encode_response, response_schema
from tests.rawclient import encode_request, request_class


async def started_server(data_dir: Path, **overrides: Any) -> AsyncIterator[Server]:
    """For an async fixture: a started server (with `overrides` to its settings) whose
    shards are loaded; stopped after."""
    config = load_config(
        overrides={
            "data_dir": str(data_dir),
            "metrics_listen": "",
            "listen": "127.0.0.1:0",
            **overrides,
        },
        environ={},
    )
    started = Server(config)
    await started.start()
    await started.coordinator.loaded.wait()
    yield started
    await started.stop()


def client_context(server: Server) -> GroupContext:
    """The handler context of a client's connection from 127.0.0.1."""
    return server.context.for_client("/127.0.0.1")


def produce_frame(
    topic: str, records: Mapping[int, bytes], version: int, correlation_id: int
) -> bytes:
    """A Produce request frame (acks=-1) of `records` by partition, through the codec."""
    m = sys.modules[request_class(ApiKey.PRODUCE, version).__module__]
    body = m.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            m.TopicProduceData(
                name=topic,
                partition_data=tuple(
                    m.PartitionProduceData(index=index, records=batch)
                    for index, batch in records.items()
                ),
            ),
        ),
    )
    return encode_request(ApiKey.PRODUCE, version, correlation_id, body)


async def produce(server: Server, topic: str, records: bytes, version: int = 11) -> Any:
    """Partition 0's answer to a Produce of `records` to partition 0 of `topic`, the
    request and the response both through the codec."""
    frame = produce_frame(topic, {0: records}, version, 7)
    request = decode_request(frame[4:], server.supported_versions)
    response = handle_produce(server.context, request)
    if inspect.isawaitable(response):
        response = await response
    data = encode_response(ApiKey.PRODUCE, version, 7, response)
    header_size = 9 if version >= 9 else 8
    decoded, _ = entity_reader(response_schema(ApiKey.PRODUCE, version))(data, header_size)
    (topic_response,) = decoded.responses
    (partition_response,) = topic_response.partition_responses
    return partition_response
