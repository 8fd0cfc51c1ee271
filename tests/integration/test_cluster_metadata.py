"""Issue 22 item 2b, the metadata half: three `serve --cluster` nodes on a real PostgreSQL
share one metadata image. A topic created on one node is served by every node with the
store's topic id, configs and partition counts follow, a deletion removes the topic and its
committed offsets everywhere, a node that missed a NOTIFY catches up, and ACLs and SCRAM
credentials made on one node are enforced on the others. Each change is sent to one named
node (a raw request), so the node that made it and the nodes that follow are known."""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from groupcoord.coordinator.cluster.metadata_sync import follower_name
from groupcoord.protocol.api import build
from tests.cluster_support import Cluster, cluster_fixture, request_module, topic_error, until
from tests.rawclient import RawClient, request_class

pytestmark = pytest.mark.integration

TOPIC_AUTHORIZATION_FAILED = 29
UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_ALREADY_EXISTS = 36
REQUEST_TIMED_OUT = 7


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from cluster_fixture(secured=True)


def call(cluster: Cluster, node_id: int, api_key: int, version: int, **body: Any) -> Any:
    """One request to node `node_id` alone; its response."""
    request = request_class(api_key, version)
    with RawClient(cluster.nodes[node_id].bootstrap, timeout_s=60) as client:
        return client.request(api_key, version, build(request, **body))


def create_topic(cluster: Cluster, node_id: int, name: str, partitions: int) -> Any:
    m = request_module(19, 7)
    topic = build(m.CreatableTopic, name=name, num_partitions=partitions, replication_factor=1)
    return call(cluster, node_id, 19, 7, topics=(topic,)).topics[0]


def metadata(cluster: Cluster, node_id: int, name: str) -> Any:
    m = request_module(3, 12)
    return call(
        cluster,
        node_id,
        3,
        12,
        topics=(m.MetadataRequestTopic(name=name, topic_id=None),),
        allow_auto_topic_creation=False,
    )


def topic_config(cluster: Cluster, node_id: int, name: str, config: str) -> str | None:
    m = request_module(32, 4)
    resource = build(m.DescribeConfigsResource, resource_type=2, resource_name=name)
    answer = call(cluster, node_id, 32, 4, resources=(resource,))
    return next((c.value for c in answer.results[0].configs if c.name == config), None)


def store_topic_id(cluster: Cluster, name: str) -> uuid.UUID | None:
    rows = cluster.query("SELECT topic_id FROM topics WHERE name = $1", name)
    return rows[0][0] if rows else None


def test_topic_created_on_one_node_is_served_by_all_with_the_store_ids(cluster: Cluster) -> None:
    created = create_topic(cluster, 1, "meta-a", 3)
    assert created.error_code == 0, created
    stored = store_topic_id(cluster, "meta-a")
    assert created.topic_id == stored
    for node_id in (1, 2, 3):
        until(
            lambda n=node_id: topic_error(cluster.nodes[n].bootstrap, "meta-a") == 0,
            f"node {node_id} listing meta-a",
        )
        topic = metadata(cluster, node_id, "meta-a").topics[0]
        assert (topic.topic_id, len(topic.partitions)) == (stored, 3), node_id
    # One cluster id, the store's, on every node.
    cluster_id = cluster.query("SELECT cluster_id FROM cluster_id")[0][0]
    assert {metadata(cluster, n, "meta-a").cluster_id for n in (1, 2, 3)} == {cluster_id}
    # The name is taken on every node.
    again = create_topic(cluster, 2, "meta-a", 5)
    assert again.error_code == TOPIC_ALREADY_EXISTS


def test_configs_and_partitions_changed_on_node_2_are_seen_on_node_3(cluster: Cluster) -> None:
    assert create_topic(cluster, 1, "meta-c", 2).error_code == 0
    until(lambda: topic_error(cluster.nodes[2].bootstrap, "meta-c") == 0, "meta-c on node 2")
    m = request_module(44, 1)
    op = build(m.AlterableConfig, name="retention.ms", config_operation=0, value="4321000")
    resource = build(m.AlterConfigsResource, resource_type=2, resource_name="meta-c", configs=(op,))
    answer = call(cluster, 2, 44, 1, resources=(resource,))
    assert answer.responses[0].error_code == 0, answer
    until(
        lambda: topic_config(cluster, 3, "meta-c", "retention.ms") == "4321000",
        "node 3 describing node 2's retention.ms",
    )
    p = request_module(37, 3)
    grow = build(p.CreatePartitionsTopic, name="meta-c", count=5, assignments=None)
    answer = call(cluster, 2, 37, 3, topics=(grow,))
    assert answer.results[0].error_code == 0, answer
    until(
        lambda: len(metadata(cluster, 3, "meta-c").topics[0].partitions) == 5,
        "node 3 serving five partitions",
    )


def group_offsets(cluster: Cluster, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for _ in range(30):
        future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
        try:
            return {
                (tp.topic, tp.partition): tp.offset for tp in future.result(30).topic_partitions
            }
        except KafkaException:  # the coordinator moving or loading: asked again
            continue
    raise AssertionError(f"no offsets of {group}")


def test_topic_deleted_on_node_3_is_gone_everywhere_with_its_offsets(cluster: Cluster) -> None:
    assert create_topic(cluster, 1, "meta-d", 2).error_code == 0
    until(lambda: topic_error(cluster.nodes[3].bootstrap, "meta-d") == 0, "meta-d on node 3")
    # A group whose coordinator is another node than 3: its offsets go by that node's
    # following of the image, not by node 3's own DeleteTopics.
    group = next(g for g in (f"meta-g{i}" for i in range(100)) if cluster.owner(g)[0] in (1, 2))
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[TopicPartition("meta-d", p, 7) for p in range(2)], asynchronous=False
        )
    finally:
        consumer.close()
    assert group_offsets(cluster, group) == {("meta-d", 0): 7, ("meta-d", 1): 7}
    d = request_module(20, 6)
    answer = call(cluster, 3, 20, 6, topics=(d.DeleteTopicState(name="meta-d", topic_id=None),))
    assert answer.responses[0].error_code == 0, answer
    assert store_topic_id(cluster, "meta-d") is None
    for node_id in (1, 2, 3):
        until(
            lambda n=node_id: (
                topic_error(cluster.nodes[n].bootstrap, "meta-d") == UNKNOWN_TOPIC_OR_PARTITION
            ),
            f"meta-d gone from node {node_id}",
        )
    until(lambda: group_offsets(cluster, group) == {}, f"{group}'s offsets of meta-d removed")


def follower_pid(cluster: Cluster, node_id: int) -> int | None:
    rows = cluster.query(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1", follower_name(node_id)
    )
    return rows[0][0] if rows else None


def test_a_node_that_missed_a_notify_catches_up(cluster: Cluster) -> None:
    node = cluster.nodes[2]
    assert node.proc is not None
    listening = follower_pid(cluster, 2)
    assert listening is not None
    # Paused, its listening connection killed, a topic created: the NOTIFY reaches no one
    # of node 2's. Short of its lease, so the shards stay put.
    os.kill(node.proc.pid, signal.SIGSTOP)
    try:
        cluster.query("SELECT pg_terminate_backend($1)", listening)
        assert create_topic(cluster, 1, "meta-missed", 1).error_code == 0
    finally:
        os.kill(node.proc.pid, signal.SIGCONT)
    until(lambda: topic_error(node.bootstrap, "meta-missed") == 0, "node 2 catching up")
    assert follower_pid(cluster, 2) not in (None, listening)


def test_an_acl_made_on_node_1_refuses_a_client_on_node_3(cluster: Cluster) -> None:
    assert create_topic(cluster, 1, "meta-acl", 1).error_code == 0
    until(lambda: topic_error(cluster.nodes[3].bootstrap, "meta-acl") == 0, "meta-acl on 3")
    m = request_module(30, 3)
    deny = build(
        m.AclCreation,
        resource_type=2,  # TOPIC
        resource_name="meta-acl",
        resource_pattern_type=3,  # LITERAL
        principal="User:*",
        host="*",
        operation=8,  # DESCRIBE
        permission_type=2,  # DENY
    )
    answer = call(cluster, 1, 30, 3, creations=(deny,))
    assert answer.results[0].error_code == 0, answer
    until(
        lambda: topic_error(cluster.nodes[3].bootstrap, "meta-acl") == TOPIC_AUTHORIZATION_FAILED,
        "node 3 refusing meta-acl",
    )


def test_a_scram_user_made_on_node_2_authenticates_on_node_1(cluster: Cluster) -> None:
    password = b"carol-secret"
    salt = os.urandom(16)
    m = request_module(51, 0)
    upsertion = build(
        m.ScramCredentialUpsertion,
        name="carol",
        mechanism=1,  # SCRAM-SHA-256
        iterations=8192,
        salt=salt,
        salted_password=hashlib.pbkdf2_hmac("sha256", password, salt, 8192),
    )
    answer = call(cluster, 2, 51, 0, deletions=(), upsertions=(upsertion,))
    assert answer.results[0].error_code == 0, answer

    def authenticates() -> bool:
        admin = AdminClient(
            {
                "bootstrap.servers": cluster.sasl_bootstrap(1),
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "SCRAM-SHA-256",
                "sasl.username": "carol",
                "sasl.password": password.decode(),
                "log_level": 0,
            }
        )
        try:
            admin.list_topics(timeout=5)
        except KafkaException:
            return False
        return True

    until(authenticates, "carol authenticating on node 1")


def test_one_name_created_on_two_nodes_at_once_has_one_topic(cluster: Cluster) -> None:
    results: dict[int, Any] = {}

    def create(node_id: int) -> None:
        results[node_id] = create_topic(cluster, node_id, "meta-race", 2)

    threads = [threading.Thread(target=create, args=(n,)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    codes = sorted(int(r.error_code) for r in results.values())
    assert codes == [0, TOPIC_ALREADY_EXISTS], results
    stored = store_topic_id(cluster, "meta-race")
    winner = next(r for r in results.values() if r.error_code == 0)
    assert winner.topic_id == stored
    for node_id in (1, 2, 3):
        until(
            lambda n=node_id: metadata(cluster, n, "meta-race").topics[0].topic_id == stored,
            f"node {node_id} serving the stored meta-race",
        )


def test_metadata_auto_creates_through_the_store(cluster: Cluster) -> None:
    m = request_module(3, 12)
    wanted = (m.MetadataRequestTopic(name="meta-auto", topic_id=None),)
    # The first answer is LEADER_NOT_AVAILABLE (the store is written in the background);
    # asked again, as clients do, node 2 serves it, and so do the others, with one id.
    until(
        lambda: (
            call(cluster, 2, 3, 12, topics=wanted, allow_auto_topic_creation=True)
            .topics[0]
            .error_code
            == 0
        ),
        "node 2 auto-creating meta-auto",
    )
    stored = store_topic_id(cluster, "meta-auto")
    for node_id in (1, 2, 3):
        until(
            lambda n=node_id: metadata(cluster, n, "meta-auto").topics[0].topic_id == stored,
            f"node {node_id} serving meta-auto",
        )


def test_a_change_the_store_cannot_take_is_refused_and_undone(cluster: Cluster) -> None:
    # Last in the module: the database goes away for a moment.
    cluster.pg.stop()
    try:
        answer = create_topic(cluster, 1, "meta-down", 1)
    finally:
        cluster.pg.start()
    assert answer.error_code == REQUEST_TIMED_OUT, answer
    until(
        lambda: topic_error(cluster.nodes[1].bootstrap, "meta-down") == UNKNOWN_TOPIC_OR_PARTITION,
        "node 1 undoing the topic the store never had",
    )
    assert store_topic_id(cluster, "meta-down") is None
    # Once the database is back, changes go through again.
    until(
        lambda: create_topic(cluster, 1, "meta-down", 1).error_code in (0, TOPIC_ALREADY_EXISTS),
        "meta-down made",
    )
    assert store_topic_id(cluster, "meta-down") is not None
    until(lambda: topic_error(cluster.nodes[3].bootstrap, "meta-down") == 0, "meta-down on 3")
