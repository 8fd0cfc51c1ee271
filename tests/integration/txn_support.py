"""Raw data-plane requests for the transaction tests: transactional Produce, WriteTxnMarkers,
Fetch with an isolation level, ListOffsets, DescribeProducers; and a read_committed
consumer's filter (Kafka's CompletedFetch) to check what such a reader would see."""

from __future__ import annotations

import datetime
import sys
import time
from dataclasses import dataclass
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from groupcoord.protocol.batches import parse_header
from groupcoord.protocol.control_batches import marker_of
from tests.rawclient import RawClient, request_class

PRODUCE, FETCH, LIST_OFFSETS, WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS = 0, 1, 2, 27, 61
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def _m(api_key: int, version: int) -> Any:
    return sys.modules[request_class(api_key, version).__module__]


def txn_batch(
    values: list[bytes],
    producer_id: int,
    epoch: int,
    seq: int,
    transactional: bool = True,
    keys: list[bytes] | None = None,
) -> bytes:
    """A batch as a transactional (or idempotent) producer builds it."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=1 if transactional else 0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=10**7,
    )
    now_ms = int(time.time() * 1000)
    for delta, value in enumerate(values):
        key = keys[delta] if keys is not None else None
        builder.append(delta, timestamp=now_ms, key=key, value=value, headers=[])
    return bytes(builder.build())


def produce(
    client: RawClient,
    topic: str,
    partition: int,
    records: bytes,
    transactional_id: str | None = "txn",
    version: int = 11,
) -> Any:
    """One partition's answer to a Produce (acks=-1)."""
    m = _m(PRODUCE, version)
    resp = client.request(
        PRODUCE,
        version,
        m.ProduceRequest(
            transactional_id=transactional_id,
            acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                m.TopicProduceData(
                    name=topic,
                    partition_data=(m.PartitionProduceData(index=partition, records=records),),
                ),
            ),
        ),
    )
    return resp.responses[0].partition_responses[0]


def write_markers(
    client: RawClient,
    markers: list[tuple[int, int, bool, dict[str, list[int]]]],
    coordinator_epoch: int = 0,
    version: int = 1,
    transaction_version: int = 0,
) -> dict[tuple[int, str, int], int]:
    """WriteTxnMarkers of (producer id, epoch, commit, topics); returns the error code of
    each (producer id, topic, partition)."""
    m = _m(WRITE_TXN_MARKERS, version)
    extra = {"transaction_version": transaction_version} if version >= 2 else {}
    resp = client.request(
        WRITE_TXN_MARKERS,
        version,
        m.WriteTxnMarkersRequest(
            markers=tuple(
                m.WritableTxnMarker(
                    producer_id=pid,
                    producer_epoch=epoch,
                    transaction_result=commit,
                    topics=tuple(
                        m.WritableTxnMarkerTopic(name=name, partition_indexes=tuple(ps))
                        for name, ps in topics.items()
                    ),
                    coordinator_epoch=coordinator_epoch,
                    **extra,
                )
                for pid, epoch, commit, topics in markers
            )
        ),
    )
    return {
        (marker.producer_id, topic.name, p.partition_index): int(p.error_code)
        for marker in resp.markers
        for topic in marker.topics
        for p in topic.partitions
    }


def fetch(
    client: RawClient,
    topic: str,
    partition: int,
    offset: int,
    isolation: int,
    max_bytes: int = 1 << 20,
    max_wait_ms: int = 0,
    version: int = 12,
) -> Any:
    """One partition's Fetch answer."""
    m = _m(FETCH, version)
    resp = client.request(
        FETCH,
        version,
        m.FetchRequest(
            cluster_id=None,
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=1,
            max_bytes=max_bytes,
            isolation_level=isolation,
            session_id=0,
            session_epoch=-1,
            topics=(
                m.FetchTopic(
                    topic=topic,
                    partitions=(
                        m.FetchPartition(
                            partition=partition,
                            current_leader_epoch=-1,
                            fetch_offset=offset,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=max_bytes,
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        ),
    )
    return resp.responses[0].partitions[0]


def list_offset(
    client: RawClient, topic: str, partition: int, timestamp: int, isolation: int
) -> tuple[int, int]:
    """(error code, offset) of a ListOffsets v7 query."""
    m = _m(LIST_OFFSETS, 7)
    resp = client.request(
        LIST_OFFSETS,
        7,
        m.ListOffsetsRequest(
            replica_id=-1,
            isolation_level=isolation,
            topics=(
                m.ListOffsetsTopic(
                    name=topic,
                    partitions=(
                        m.ListOffsetsPartition(
                            partition_index=partition, current_leader_epoch=-1, timestamp=timestamp
                        ),
                    ),
                ),
            ),
        ),
    )
    p = resp.topics[0].partitions[0]
    return int(p.error_code), int(p.offset)


def describe_producers(client: RawClient, topic: str, partition: int) -> Any:
    m = _m(DESCRIBE_PRODUCERS, 0)
    resp = client.request(
        DESCRIBE_PRODUCERS,
        0,
        m.DescribeProducersRequest(
            topics=(m.TopicRequest(name=topic, partition_indexes=(partition,)),)
        ),
    )
    return resp.topics[0].partitions[0]


@dataclass
class Seen:
    values: list[bytes]  # data records handed to the application, in order
    next_offset: int  # where the consumer's position ends up


def consume(data: bytes, aborted: list[tuple[int, int]] | None) -> Seen:
    """What a consumer hands to its application from a Fetch answer's records: every data
    record for read_uncommitted (`aborted` None); for read_committed, Kafka's CompletedFetch
    filter (aborted transactions' batches skipped, control batches never shown)."""
    pending = sorted(aborted or [], key=lambda a: a[1])
    aborting: set[int] = set()
    values: list[bytes] = []
    pos = 0
    next_offset = -1
    while pos < len(data):
        header = parse_header(data, pos)
        batch = data[pos : pos + header.size_bytes]
        pos += header.size_bytes
        next_offset = header.last_offset + 1
        if aborted is not None:
            while pending and pending[0][1] <= header.last_offset:
                aborting.add(pending.pop(0)[0])
        if header.is_control:
            marker = marker_of(batch)
            if marker is not None and not marker[0]:
                aborting.discard(header.producer_id)
            continue
        if aborted is not None and header.is_transactional and header.producer_id in aborting:
            continue
        values.extend(r.value for r in DefaultRecordBatch(batch))
    return Seen(values, next_offset)


def read_all(client: RawClient, topic: str, partition: int, isolation: int) -> Seen:
    """Fetch from the log start until nothing more comes; the records a consumer sees."""
    m_offset = list_offset(client, topic, partition, -2, isolation)[1]
    values: list[bytes] = []
    offset = m_offset
    while True:
        p = fetch(client, topic, partition, offset, isolation)
        assert p.error_code == 0, p
        if not p.records:
            return Seen(values, offset)
        aborted = (
            None
            if p.aborted_transactions is None
            else [(a.producer_id, a.first_offset) for a in p.aborted_transactions]
        )
        seen = consume(p.records, aborted)
        values.extend(seen.values)
        offset = seen.next_offset
