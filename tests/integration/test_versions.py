"""Every served version of every data-plane API, driven with a raw client: each request
decodes, is answered at its own version, and the answer is right for that version."""

from __future__ import annotations

import datetime
import sys
import uuid
from typing import Any

import pytest

from groupcoord.coordinator.server.dispatch import APIS
from groupcoord.protocol.api import build
from tests.rawclient import RawClient, request_class
from tests.support import ServerProcess, make_batch

TOPIC = "versions"


def _m(api_key: int, version: int) -> Any:
    return sys.modules[request_class(api_key, version).__module__]


def _batch(count: int) -> bytes:
    return make_batch(count)


@pytest.fixture(scope="module")
def versions_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    proc = ServerProcess(tmp_path_factory.mktemp("versions") / "data").start()
    with RawClient(proc.bootstrap) as client:
        m = _m(19, 7)
        client.request(
            19,
            7,
            m.CreateTopicsRequest(
                topics=(
                    m.CreatableTopic(
                        name=TOPIC,
                        num_partitions=1,
                        replication_factor=1,
                        assignments=(),
                        configs=(),
                    ),
                ),
                timeout=datetime.timedelta(seconds=5),
                validate_only=False,
            ),
        )
    try:
        yield proc
    finally:
        proc.kill()


def _topic_id(client: RawClient) -> uuid.UUID:
    m = _m(3, 12)
    resp = client.request(
        3,
        12,
        m.MetadataRequest(
            topics=(m.MetadataRequestTopic(topic_id=None, name=TOPIC),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    )
    return resp.topics[0].topic_id


@pytest.mark.parametrize("version", range(APIS[0][1], APIS[0][2] + 1))
def test_produce_every_version(versions_server: ServerProcess, version: int) -> None:
    m = _m(0, version)
    with RawClient(versions_server.bootstrap) as client:
        resp = client.request(
            0,
            version,
            build(
                m.ProduceRequest,
                transactional_id=None,
                acks=1,
                timeout=datetime.timedelta(seconds=5),
                topic_data=(
                    build(
                        m.TopicProduceData,
                        name=TOPIC,
                        partition_data=(build(m.PartitionProduceData, index=0, records=_batch(3)),),
                    ),
                ),
            ),
        )
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == 0 and part.base_offset >= 0


@pytest.mark.parametrize("version", range(APIS[1][1], APIS[1][2] + 1))
def test_fetch_every_version(versions_server: ServerProcess, version: int) -> None:
    m = _m(1, version)
    with RawClient(versions_server.bootstrap) as client:
        m0 = _m(0, 9)
        client.request(
            0,
            9,
            m0.ProduceRequest(
                transactional_id=None,
                acks=1,
                timeout=datetime.timedelta(seconds=5),
                topic_data=(
                    m0.TopicProduceData(
                        name=TOPIC,
                        partition_data=(m0.PartitionProduceData(index=0, records=_batch(2)),),
                    ),
                ),
            ),
        )
        topic_id = _topic_id(client)
        partition = build(
            m.FetchPartition,
            partition=0,
            current_leader_epoch=-1,
            fetch_offset=0,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=1 << 20,
            replica_directory_id=None,
        )
        resp = client.request(
            1,
            version,
            build(
                m.FetchRequest,
                replica_id=-1,
                replica_state=build(m.ReplicaState, replica_id=-1, replica_epoch=-1)
                if hasattr(m, "ReplicaState")
                else None,
                max_wait=datetime.timedelta(milliseconds=100),
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=(
                    build(m.FetchTopic, topic=TOPIC, topic_id=topic_id, partitions=(partition,)),
                ),
                forgotten_topics_data=(),
                rack_id="",
            ),
        )
        part = resp.responses[0].partitions[0]
        assert part.error_code == 0
        assert part.high_watermark >= 2 and len(part.records) > 0


@pytest.mark.parametrize("version", range(APIS[2][1], APIS[2][2] + 1))
def test_list_offsets_every_version(versions_server: ServerProcess, version: int) -> None:
    m = _m(2, version)
    with RawClient(versions_server.bootstrap) as client:
        m1 = _m(3, 12)
        hw_resp = client.request(
            3,
            12,
            m1.MetadataRequest(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
        assert any(t.name == TOPIC for t in hw_resp.topics)
        answers = []
        for timestamp in (-2, -1, 1000):
            resp = client.request(
                2,
                version,
                build(
                    m.ListOffsetsRequest,
                    replica_id=-1,
                    isolation_level=0,
                    topics=(
                        build(
                            m.ListOffsetsTopic,
                            name=TOPIC,
                            partitions=(
                                build(
                                    m.ListOffsetsPartition,
                                    partition_index=0,
                                    current_leader_epoch=-1,
                                    timestamp=timestamp,
                                ),
                            ),
                        ),
                    ),
                ),
            )
            part = resp.topics[0].partitions[0]
            assert part.error_code == 0
            answers.append(part.offset)
        earliest, latest, first_at_1000 = answers
        assert earliest == 0 and latest >= 0 and first_at_1000 == 0


@pytest.mark.parametrize("version", range(APIS[3][1], APIS[3][2] + 1))
def test_metadata_every_version(versions_server: ServerProcess, version: int) -> None:
    m = _m(3, version)
    with RawClient(versions_server.bootstrap) as client:
        resp = client.request(
            3,
            version,
            build(
                m.MetadataRequest,
                topics=(build(m.MetadataRequestTopic, name=TOPIC, topic_id=None),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
                include_cluster_authorized_operations=False,
            ),
        )
        assert [t.name for t in resp.topics] == [TOPIC]
        assert resp.topics[0].error_code == 0
        assert [(b.host, b.port) for b in resp.brokers] == [("127.0.0.1", versions_server.port)]


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_every_version(versions_server: ServerProcess, version: int) -> None:
    m = _m(18, version)
    with RawClient(versions_server.bootstrap) as client:
        resp = client.request(
            18,
            version,
            build(m.ApiVersionsRequest, client_software_name="t", client_software_version="1"),
        )
        assert resp.error_code == 0
        served = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert served == {int(k): (low, high) for k, (_, low, high) in APIS.items()}


@pytest.mark.parametrize("version", range(0, 7))
def test_find_coordinator_every_version(versions_server: ServerProcess, version: int) -> None:
    m = _m(10, version)
    with RawClient(versions_server.bootstrap) as client:
        resp = client.request(
            10,
            version,
            build(
                m.FindCoordinatorRequest, key="group-a", key_type=0, coordinator_keys=("g1", "g2")
            ),
        )
        # Kafka's messages on success: v1-v3 Errors.NONE.message() ("NONE"), v4+ never set.
        if version < 4:
            assert resp.error_code == 0 and resp.port == versions_server.port
            assert getattr(resp, "error_message", "NONE") == "NONE"
        else:
            assert [c.key for c in resp.coordinators] == ["g1", "g2"]
            assert all(
                c.error_code == 0 and c.port == versions_server.port and c.error_message == ""
                for c in resp.coordinators
            )


@pytest.mark.parametrize("version", range(0, 6))
def test_init_producer_id_every_version(versions_server: ServerProcess, version: int) -> None:
    m = _m(22, version)
    with RawClient(versions_server.bootstrap) as client:
        first = client.request(
            22,
            version,
            build(
                m.InitProducerIdRequest,
                transactional_id=None,
                transaction_timeout=datetime.timedelta(milliseconds=60000),
                producer_id=-1,
                producer_epoch=-1,
            ),
        )
        assert first.error_code == 0 and first.producer_id >= 0 and first.producer_epoch == 0
        second = client.request(
            22,
            version,
            build(
                m.InitProducerIdRequest,
                transactional_id=None,
                transaction_timeout=datetime.timedelta(milliseconds=60000),
                producer_id=-1,
                producer_epoch=-1,
            ),
        )
        assert second.producer_id != first.producer_id
