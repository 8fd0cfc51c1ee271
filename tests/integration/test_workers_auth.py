"""`serve --workers 2` with SASL and the authorizer: the workers' requests to each other
go by their own channel as their own principal (worker_channel.py), so

- a transaction of an ordinary user coordinated by one worker, writing to partitions and
  committing offsets of a group on both, commits (markers and AddPartitionsToTxn between
  the workers are authorized), while that user's own WriteTxnMarkers to a worker gets
  CLUSTER_AUTHORIZATION_FAILED, as in Kafka;
- ACLs made through one worker hold on the other, and a client calling itself by the
  workers' old client id cannot stop its topic change from reaching the other worker.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.integration.test_workers import PARTITIONS, group_on, txn_id_on, wait_for
from tests.integration.txn_support import write_markers
from tests.rawclient import RawClient, request_class
from tests.support import WorkersProcess

pytestmark = pytest.mark.integration

WORKERS = 2
CLUSTER_AUTHORIZATION_FAILED = 31


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkersProcess]:
    tmp = tmp_path_factory.mktemp("workers-auth")
    users = tmp / "plain-users"
    users.write_text("admin:admin-secret\nalice:alice-secret\n")
    proc = WorkersProcess(tmp / "data", WORKERS)
    settings = {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{proc.port}",
        "sasl_plain_users_file": users,
        "authorizer_enabled": "true",
        "super_users": "User:admin",
        "auto_create_topics": "false",
        "group_initial_rebalance_delay_ms": 0,
        "log_level": "info",
    }
    proc.extra_args += [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
    proc.start(timeout_s=120)
    try:
        yield proc
    finally:
        proc.kill()


def sasl(cluster: WorkersProcess, worker: int, user: str, **more: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": cluster.bootstrap_of(worker),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
        "log_level": 0,
        **more,
    }


def login(cluster: WorkersProcess, worker: int, user: str) -> RawClient:
    client = RawClient(cluster.bootstrap_of(worker))
    handshake = client.request(17, 1, request_class(17, 1)(mechanism="PLAIN"))
    assert handshake.error_code == 0
    token = f"\x00{user}\x00{user}-secret".encode()
    assert client.request(36, 2, request_class(36, 2)(auth_bytes=token)).error_code == 0
    return client


def has_topic(cluster: WorkersProcess, worker: int, topic: str) -> bool:
    """Whether worker `worker` itself has `topic` (Metadata v12 on a logged-in connection:
    librdkafka's list_topics may ask the other worker)."""
    m = sys.modules[request_class(3, 12).__module__]
    with login(cluster, worker, "admin") as client:
        answer = client.request(
            3,
            12,
            m.MetadataRequest(
                topics=(m.MetadataRequestTopic(name=topic, topic_id=None),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
    return bool(answer.topics[0].error_code == 0)


def acl_count(cluster: WorkersProcess, worker: int) -> int:
    """How many ACLs worker `worker` itself has (DescribeAcls v3 matching any)."""
    with login(cluster, worker, "admin") as client:
        answer = client.request(
            29,
            3,
            request_class(29, 3)(
                resource_type_filter=1,
                resource_name_filter=None,
                pattern_type_filter=1,
                principal_filter=None,
                host_filter=None,
                operation=1,
                permission_type=1,
            ),
        )
    assert answer.error_code == 0, answer.error_code
    return sum(len(r.acls) for r in answer.resources)


def allow(rtype: ResourceType, prefix: str) -> AclBinding:
    return AclBinding(
        rtype,
        prefix,
        ResourcePatternType.PREFIXED,
        "User:alice",
        "*",
        AclOperation.ALL,
        AclPermissionType.ALLOW,
    )


def test_ordinary_user_cannot_write_markers_but_transactions_span_workers(
    cluster: WorkersProcess,
) -> None:
    admin = AdminClient(sasl(cluster, 0, "admin"))
    bindings = [
        allow(ResourceType.TOPIC, "t-"),
        allow(ResourceType.GROUP, "alice-"),
        allow(ResourceType.TRANSACTIONAL_ID, "alice-"),
    ]
    for future in admin.create_acls(bindings).values():
        future.result(30)
    # Made through worker 0, in force on worker 1 too.
    wait_for(lambda: acl_count(cluster, 1) == len(bindings), 30, "the ACLs on worker 1")
    topic = f"t-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    wait_for(lambda: has_topic(cluster, 1, topic), 30, "the topic on worker 1")

    # alice's own WriteTxnMarkers: refused on either worker, whole request.
    for worker in range(WORKERS):
        with login(cluster, worker, "alice") as client:
            errors = write_markers(client, [(1000, 0, True, {topic: [0, 1]})])
        assert set(errors.values()) == {CLUSTER_AUTHORIZATION_FAILED}, errors

    for coordinator in range(WORKERS):
        group = group_on(1 - coordinator, "alice-g")
        producer = Producer(
            sasl(
                cluster,
                1 - coordinator,
                "alice",
                **{"transactional.id": txn_id_on(coordinator, "alice-txn")},
            )
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(40):
            producer.produce(topic, value=f"c{coordinator}-{i}".encode(), partition=i % PARTITIONS)
        member = Consumer(sasl(cluster, 0, "alice", **{"group.id": group}))
        producer.send_offsets_to_transaction(
            [TopicPartition(topic, p, 7) for p in range(PARTITIONS)],
            member.consumer_group_metadata(),
            30,
        )
        producer.commit_transaction(30)
        committed = member.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 30)
        member.close()
        assert {tp.partition: tp.offset for tp in committed} == dict.fromkeys(range(PARTITIONS), 7)
    reader = Consumer(
        sasl(
            cluster,
            0,
            "admin",
            **{
                "group.id": "reader",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            },
        )
    )
    reader.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    while len(seen) < 80 and time.monotonic() < deadline:
        msg = reader.poll(0.5)
        if msg is not None and not msg.error():
            seen.add(msg.value())
    reader.close()
    assert seen == {f"c{c}-{i}".encode() for c in range(WORKERS) for i in range(40)}


def test_a_client_cannot_pass_for_a_worker(cluster: WorkersProcess) -> None:
    """The client id the workers once marked their requests with is just a client id: a
    topic created under it still reaches the other worker."""
    topic = f"t-disguised-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(sasl(cluster, 0, "admin", **{"client.id": "groupcoord-worker"}))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    wait_for(lambda: has_topic(cluster, 1, topic), 30, "the topic on worker 1")
