"""Spark's Kafka connector's request sequence, replayed with a raw client at exactly the
versions Spark 4 (kafka-clients 3.9) sends (shared/reference/spark-kafka-connector.md)."""

from __future__ import annotations

import datetime
import uuid

from groupcoord.protocol.batches import record_timestamps, split_batches
from tests.rawclient import RawClient, request_class
from tests.support import ServerProcess, make_batch

TOPIC = "spark-topic"
PARTITIONS = 3


def _module(api_key: int, version: int):  # type: ignore[no-untyped-def]
    import sys

    return sys.modules[request_class(api_key, version).__module__]


def _batch(producer_id: int, epoch: int, seq: int, start_ts: int, count: int) -> bytes:
    return make_batch(
        count,
        producer_id=producer_id,
        epoch=epoch,
        seq=seq,
        start_ts_ms=start_ts,
        step_ms=10,
        headers=(("h", b"x"),),
    )


def test_spark_request_sequence(server: ServerProcess) -> None:
    with RawClient(server.bootstrap) as client:
        # ApiVersions v4
        av = _module(18, 4)
        versions = client.request(
            18,
            4,
            av.ApiVersionsRequest(
                client_software_name="apache-kafka-java", client_software_version="3.9.1"
            ),
        )
        assert versions.error_code == 0
        served = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        for key, version in [(18, 4), (60, 1), (75, 0), (3, 12), (2, 9), (1, 17), (22, 5), (0, 11)]:
            low, high = served[key]
            assert low <= version <= high, (key, version, served[key])
        assert 71 not in served  # telemetry is not advertised (client-compat 12)

        # Admin: create the topic (CreateTopics v7) so the sequence has data to find.
        ct = _module(19, 7)
        created = client.request(
            19,
            7,
            ct.CreateTopicsRequest(
                topics=(
                    ct.CreatableTopic(
                        name=TOPIC,
                        num_partitions=PARTITIONS,
                        replication_factor=1,
                        assignments=(),
                        configs=(),
                    ),
                ),
                timeout=datetime.timedelta(seconds=5),
                validate_only=False,
            ),
        )
        assert created.topics[0].error_code == 0
        topic_id = created.topics[0].topic_id
        assert topic_id != uuid.UUID(int=0)

        # Producer: InitProducerId v5, Produce v11 (idempotent, acks=all).
        ip = _module(22, 5)
        pid = client.request(
            22,
            5,
            ip.InitProducerIdRequest(
                transactional_id=None,
                transaction_timeout=datetime.timedelta(milliseconds=-1),
                producer_id=-1,
                producer_epoch=-1,
            ),
        )
        assert pid.error_code == 0
        producer_id, epoch = pid.producer_id, pid.producer_epoch
        pr = _module(0, 11)
        sizes = [5, 1, 1, 3]  # batches of different sizes: the high watermark must be exact
        seq = [0] * PARTITIONS
        ts = 1_700_000_000_000
        for partition in range(PARTITIONS):
            for size in sizes:
                payload = _batch(producer_id, epoch, seq[partition], ts, size)
                seq[partition] += size
                ts += 1000
                resp = client.request(
                    0,
                    11,
                    pr.ProduceRequest(
                        transactional_id=None,
                        acks=-1,
                        timeout=datetime.timedelta(seconds=5),
                        topic_data=(
                            pr.TopicProduceData(
                                name=TOPIC,
                                partition_data=(
                                    pr.PartitionProduceData(index=partition, records=payload),
                                ),
                            ),
                        ),
                    ),
                )
                part = resp.responses[0].partition_responses[0]
                assert part.error_code == 0, part

        # Driver: DescribeCluster v1, DescribeTopicPartitions v0, Metadata v12.
        dc = _module(60, 1)
        cluster = client.request(
            60,
            1,
            dc.DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1),
        )
        assert cluster.error_code == 0
        assert [(b.host, b.port) for b in cluster.brokers] == [("127.0.0.1", server.port)]
        dtp = _module(75, 0)
        described = client.request(
            75,
            0,
            dtp.DescribeTopicPartitionsRequest(
                topics=(dtp.TopicRequest(name=TOPIC),), response_partition_limit=2000, cursor=None
            ),
        )
        topic = described.topics[0]
        assert topic.error_code == 0 and topic.topic_id == topic_id
        assert len(topic.partitions) == PARTITIONS
        assert all(
            p.eligible_leader_replicas == () and p.last_known_elr == () for p in topic.partitions
        )
        md = _module(3, 12)
        meta = client.request(
            3,
            12,
            md.MetadataRequest(
                topics=(md.MetadataRequestTopic(topic_id=None, name=TOPIC),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
        assert meta.topics[0].topic_id == topic_id
        assert len(meta.topics[0].partitions) == PARTITIONS

        # Executors: ListOffsets v9 (earliest, latest, by timestamp), Fetch v17 by topic id.
        lo = _module(2, 9)

        def list_offset(partition: int, timestamp: int, isolation: int = 0) -> tuple[int, int]:
            resp = client.request(
                2,
                9,
                lo.ListOffsetsRequest(
                    replica_id=-1,
                    isolation_level=isolation,
                    topics=(
                        lo.ListOffsetsTopic(
                            name=TOPIC,
                            partitions=(
                                lo.ListOffsetsPartition(
                                    partition_index=partition,
                                    current_leader_epoch=-1,
                                    timestamp=timestamp,
                                ),
                            ),
                        ),
                    ),
                ),
            )
            p = resp.topics[0].partitions[0]
            assert p.error_code == 0
            return p.offset, p.timestamp

        total = sum(sizes)
        for partition in range(PARTITIONS):
            assert list_offset(partition, -2)[0] == 0
            assert list_offset(partition, -1)[0] == total  # last offset + 1, not base + 1
            assert list_offset(partition, -1, isolation=1)[0] == total
        # Partition 0's batches start at ts, ts+1000, ts+2000, ts+3000 (records 10 ms apart).
        base = 1_700_000_000_000
        assert list_offset(0, base) == (0, base)
        assert list_offset(0, base + 15) == (2, base + 20)  # first ts >= asked
        assert list_offset(0, base + 1000) == (5, base + 1000)
        assert list_offset(0, base + 3021) == (-1, -1)  # nothing that late
        offset, max_ts = list_offset(0, -3)
        assert (offset, max_ts) == (total - 1, base + 3020)

        fr = _module(1, 17)
        fetched = client.request(
            1,
            17,
            fr.FetchRequest(
                cluster_id=None,
                replica_state=fr.ReplicaState(replica_id=-1, replica_epoch=-1),
                max_wait=datetime.timedelta(milliseconds=500),
                min_bytes=1,
                max_bytes=50 * 2**20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=(
                    fr.FetchTopic(
                        topic_id=topic_id,
                        partitions=tuple(
                            fr.FetchPartition(
                                partition=p,
                                current_leader_epoch=-1,
                                fetch_offset=0,
                                last_fetched_epoch=-1,
                                log_start_offset=-1,
                                partition_max_bytes=1 << 20,
                                replica_directory_id=None,
                            )
                            for p in range(PARTITIONS)
                        ),
                    ),
                ),
                forgotten_topics_data=(),
                rack_id="",
            ),
        )
        assert fetched.error_code == 0 and fetched.session_id == 0
        parts = fetched.responses[0].partitions
        assert fetched.responses[0].topic_id == topic_id
        for p in parts:
            assert p.error_code == 0
            assert p.high_watermark == total and p.last_stable_offset == total
            offsets = [o for h in _headers(p.records) for o, _ in _records(p.records, h)]
            assert offsets == list(range(total))

        # Fetching by an unknown topic id, and past the end.
        bad = client.request(
            1,
            17,
            fr.FetchRequest(
                cluster_id=None,
                replica_state=fr.ReplicaState(replica_id=-1, replica_epoch=-1),
                max_wait=datetime.timedelta(milliseconds=0),
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=(
                    fr.FetchTopic(
                        topic_id=uuid.uuid4(),
                        partitions=(
                            fr.FetchPartition(
                                partition=0,
                                current_leader_epoch=-1,
                                fetch_offset=0,
                                last_fetched_epoch=-1,
                                log_start_offset=-1,
                                partition_max_bytes=1 << 20,
                                replica_directory_id=None,
                            ),
                        ),
                    ),
                    fr.FetchTopic(
                        topic_id=topic_id,
                        partitions=(
                            fr.FetchPartition(
                                partition=0,
                                current_leader_epoch=-1,
                                fetch_offset=total + 5,
                                last_fetched_epoch=-1,
                                log_start_offset=-1,
                                partition_max_bytes=1 << 20,
                                replica_directory_id=None,
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
                rack_id="",
            ),
        )
        assert bad.responses[0].partitions[0].error_code == 100  # UNKNOWN_TOPIC_ID
        assert bad.responses[1].partitions[0].error_code == 1  # OFFSET_OUT_OF_RANGE


def _headers(records: bytes):  # type: ignore[no-untyped-def]
    pos = 0
    out = []
    for header in split_batches(records):
        out.append((pos, header))
        pos += header.size_bytes
    return out


def _records(records: bytes, item):  # type: ignore[no-untyped-def]
    pos, header = item
    return record_timestamps(records[pos : pos + header.size_bytes])
