"""Metadata, DescribeCluster, DescribeTopicPartitions, CreateTopics, DeleteTopics,
CreatePartitions, DescribeConfigs and IncrementalAlterConfigs handlers, called directly with a
handler context (no server, no sockets): a topic registry on a temp dir and a group
coordinator whose shards are never loaded (its group configs are all these handlers ask of
it; one test runs the data plane with no coordinator at all).

Each request is encoded and decoded through the real codec first, and each response is
encoded and decoded again, so both directions are proven to serialise at the version under
test."""

from __future__ import annotations

import asyncio
import datetime
import inspect
import sys
import types
import uuid
from typing import Any

import pytest
from kio.serial import entity_reader

import groupcoord.coordinator.topics.registry as registry_module
from groupcoord.coordinator.topics.admin import (
    handle_create_partitions,
    handle_create_topics,
    handle_delete_topics,
    handle_describe_configs,
)
from groupcoord.coordinator.topics.alter_configs import handle_incremental_alter_configs
from groupcoord.coordinator.topics.configs import TOPIC_CONFIGS
from groupcoord.coordinator.topics.kafka_broker_configs import DYNAMIC_BROKER_CONFIGS
from groupcoord.coordinator.topics.metadata import (
    handle_describe_cluster,
    handle_describe_topic_partitions,
    handle_metadata,
)
from groupcoord.coordinator.topics.registry import TopicRegistry
from groupcoord.protocol.api import (
    AUTHORIZED_OPERATIONS_OMITTED,
    ZERO_UUID,
    ApiKey,
    decode_request,
    encode_response,
    request_schema,
    response_schema,
)
from groupcoord.protocol.errors import ErrorCode
from tests.rawclient import encode_request
from tests.unit.handler_contexts import (
    NoGroupCoordinator,
    handler_context,
    settings,
    unloaded_gateway,
)

INT32_MIN = -(2**31)
TIMEOUT = datetime.timedelta(seconds=1)


def context(tmp_path: Any, **overrides: Any) -> Any:
    """A handler context on `tmp_path` with these settings; close its registry after."""
    config = settings(tmp_path, **overrides)
    return handler_context(config, unloaded_gateway(config))


@pytest.fixture
def ctx(tmp_path: Any) -> Any:
    handlers_ctx = context(tmp_path)
    yield handlers_ctx
    handlers_ctx.topics.close()


def schema(api_key: int, version: int) -> types.ModuleType:
    """The kio request module of (api_key, version), for its nested entity classes."""
    cls = request_schema(api_key, version)
    assert cls is not None
    return sys.modules[cls.__module__]


def call(ctx: Any, handler: Any, api_key: int, version: int, body: Any) -> Any:
    """Encode `body`, decode it as the server would, run `handler`, and round-trip the
    response through the response codec."""
    frame = encode_request(api_key, version, 42, body)
    request = decode_request(frame[4:], ctx.supported_versions)
    assert request.api_version == version
    response = handler(ctx, request)
    if inspect.iscoroutine(response):  # the topic changes, opening logs in steps
        response = asyncio.run(response)
    assert type(response) is response_schema(api_key, version)
    data = encode_response(api_key, version, 42, response)
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    assert int.from_bytes(data[4:8], "big") == 42
    header_size = 9 if type(response).__flexible__ and api_key != ApiKey.API_VERSIONS else 8
    decoded, _ = entity_reader(type(response))(data, header_size)
    assert type(decoded) is type(response)
    return response


def create(
    ctx: Any,
    name: str,
    partitions: int = 1,
    configs: dict[str, str] | None = None,
    version: int = 7,
    **extra: Any,
) -> Any:
    m = schema(ApiKey.CREATE_TOPICS, version)
    topic = m.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=extra.pop("rf", -1),
        assignments=extra.pop("assignments", ()),
        configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()),
    )
    body = m.CreateTopicsRequest(topics=(topic,), validate_only=extra.pop("validate_only", False))
    return call(ctx, handle_create_topics, ApiKey.CREATE_TOPICS, version, body).topics[0]


def metadata(ctx: Any, version: int, topics: Any, **fields: Any) -> Any:
    m = schema(ApiKey.METADATA, version)
    if topics is not None:
        if version >= 10:
            topics = tuple(
                m.MetadataRequestTopic(name=t, topic_id=ZERO_UUID)
                if isinstance(t, str | None)
                else m.MetadataRequestTopic(name=None, topic_id=t)
                for t in topics
            )
        else:
            topics = tuple(m.MetadataRequestTopic(name=t) for t in topics)
    body = m.MetadataRequest(topics=topics, **fields)
    return call(ctx, handle_metadata, ApiKey.METADATA, version, body)


# Metadata -----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 4, 9, 12])
def test_metadata_all_topics(ctx: Any, version: int) -> None:
    ctx.topics.create("b-topic", 2, {})
    ctx.topics.create("a-topic", 1, {})
    extra = {"allow_auto_topic_creation": True} if version >= 4 else {}
    if version >= 8:
        extra["include_topic_authorized_operations"] = False
    if 8 <= version <= 10:
        extra["include_cluster_authorized_operations"] = False
    response = metadata(ctx, version, () if version == 0 else None, **extra)
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [
        (ctx.node.node_id, ctx.node.host, ctx.node.port)
    ]
    if version >= 1:
        assert response.controller_id == ctx.node.node_id
    if version >= 2:
        assert response.cluster_id == "test-cluster-id"
    assert [t.name for t in response.topics] == ["a-topic", "b-topic"]
    b = response.topics[1]
    assert b.error_code == ErrorCode.NONE
    assert [p.partition_index for p in b.partitions] == [0, 1]
    for p in b.partitions:
        assert p.error_code == ErrorCode.NONE
        assert p.leader_id == ctx.node.node_id
        assert p.replica_nodes == (ctx.node.node_id,)
        assert p.isr_nodes == (ctx.node.node_id,)
    if version >= 7:
        assert b.partitions[0].leader_epoch == 0
    if version >= 8:
        assert b.topic_authorized_operations == INT32_MIN
    if version >= 10:
        assert b.topic_id == ctx.topics.get("b-topic").topic_id


def test_metadata_v1_empty_list_means_no_topics(ctx: Any) -> None:
    ctx.topics.create("t", 1, {})
    assert metadata(ctx, 1, ()).topics == ()


def test_metadata_auto_creates_unknown_topic(ctx: Any) -> None:
    response = metadata(
        ctx,
        12,
        ["fresh"],
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    (topic,) = response.topics
    assert topic.error_code == ErrorCode.NONE
    created = ctx.topics.get("fresh")
    assert created is not None
    assert len(created.partitions) == ctx.settings.default_partitions
    assert topic.topic_id == created.topic_id != ZERO_UUID
    assert len(topic.partitions) == ctx.settings.default_partitions


def test_metadata_v3_always_allows_auto_creation(ctx: Any) -> None:
    (topic,) = metadata(ctx, 3, ["fresh"]).topics
    assert topic.error_code == ErrorCode.NONE
    assert ctx.topics.get("fresh") is not None


def test_metadata_unknown_topic_without_auto_creation(ctx: Any) -> None:
    response = metadata(
        ctx,
        12,
        ["nope"],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    (topic,) = response.topics
    assert topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert topic.name == "nope"
    assert topic.topic_id == ZERO_UUID
    assert topic.partitions == ()
    assert ctx.topics.get("nope") is None


def test_metadata_respects_server_auto_create_setting(tmp_path: Any) -> None:
    ctx = context(tmp_path, auto_create_topics=False)
    try:
        (topic,) = metadata(ctx, 4, ["nope"], allow_auto_topic_creation=True).topics
        assert topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert ctx.topics.get("nope") is None
    finally:
        ctx.topics.close()


@pytest.mark.parametrize("name", ["bad name", "..", "x" * 250, "a/b"])
def test_metadata_invalid_topic_name(ctx: Any, name: str) -> None:
    for allow in (True, False):
        (topic,) = metadata(
            ctx,
            12,
            [name],
            allow_auto_topic_creation=allow,
            include_topic_authorized_operations=False,
        ).topics
        assert topic.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert topic.name == name
    assert ctx.topics.topics() == []


def test_metadata_by_topic_id(ctx: Any) -> None:
    created = ctx.topics.create("by-id", 3, {})
    unknown = uuid.uuid4()
    response = metadata(
        ctx,
        12,
        [created.topic_id, unknown],
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=True,
    )
    found, missing = response.topics
    assert found.error_code == ErrorCode.NONE
    assert found.name == "by-id"
    assert found.topic_id == created.topic_id
    assert len(found.partitions) == 3
    assert found.topic_authorized_operations not in (INT32_MIN, 0)
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_ID
    assert missing.name is None
    assert missing.topic_id == unknown


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_v11_by_id_or_null_name_is_an_invalid_request(ctx: Any, version: int) -> None:
    """Topic ids in requests arrived with v12: a v10-v11 request naming a topic by id, or
    with a null name, is refused whole with INVALID_REQUEST per topic, a null name answered
    as "" (the response has no null name before v12), as Kafka. The schema fuzz suite found
    it: the handler answered name None, which the response could not encode."""
    created = ctx.topics.create("by-id", 1, {})
    # v8-v10 ask for the cluster's authorized operations here (v11: DescribeCluster).
    cluster_ops = {"include_cluster_authorized_operations": False} if version == 10 else {}
    for topics in ([None], ["by-id", None], [created.topic_id], ["by-id", created.topic_id]):
        response = metadata(
            ctx,
            version,
            topics,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
            **cluster_ops,
        )
        assert response.brokers == ()
        assert [t.error_code for t in response.topics] == [ErrorCode.INVALID_REQUEST] * len(topics)
        assert [t.name for t in response.topics] == [
            t if isinstance(t, str) else "" for t in topics
        ]
        assert all(t.partitions == () for t in response.topics)


def test_metadata_cluster_authorized_operations(ctx: Any) -> None:
    response = metadata(
        ctx,
        8,
        None,
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=True,
        include_topic_authorized_operations=False,
    )
    assert response.cluster_authorized_operations not in (INT32_MIN, 0)
    response = metadata(
        ctx,
        10,
        None,
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    assert response.cluster_authorized_operations == INT32_MIN


# DescribeCluster ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_describe_cluster(ctx: Any, version: int) -> None:
    m = schema(ApiKey.DESCRIBE_CLUSTER, version)
    body = m.DescribeClusterRequest(include_cluster_authorized_operations=False)
    response = call(ctx, handle_describe_cluster, ApiKey.DESCRIBE_CLUSTER, version, body)
    assert response.error_code == ErrorCode.NONE
    assert response.cluster_id == "test-cluster-id"
    assert response.controller_id == ctx.node.node_id
    assert [(b.broker_id, b.host, b.port, b.rack) for b in response.brokers] == [
        (ctx.node.node_id, ctx.node.host, ctx.node.port, None)
    ]
    assert response.cluster_authorized_operations == AUTHORIZED_OPERATIONS_OMITTED
    if version == 1:
        assert response.endpoint_type == 1


def test_describe_cluster_authorized_operations_when_asked(ctx: Any) -> None:
    m = schema(ApiKey.DESCRIBE_CLUSTER, 1)
    body = m.DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1)
    response = call(ctx, handle_describe_cluster, ApiKey.DESCRIBE_CLUSTER, 1, body)
    assert response.cluster_authorized_operations not in (INT32_MIN, 0)


@pytest.mark.parametrize(("endpoint_type", "code"), [(2, 114), (7, 115)])
def test_describe_cluster_other_endpoint_types(ctx: Any, endpoint_type: int, code: int) -> None:
    # As Kafka's AuthHelper: CONTROLLER sent to a broker -> MISMATCHED_ENDPOINT_TYPE (114);
    # an unknown type -> UNSUPPORTED_ENDPOINT_TYPE (115).
    m = schema(ApiKey.DESCRIBE_CLUSTER, 1)
    body = m.DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=endpoint_type
    )
    response = call(ctx, handle_describe_cluster, ApiKey.DESCRIBE_CLUSTER, 1, body)
    assert response.error_code == code
    assert response.error_message
    assert response.brokers == ()


# DescribeTopicPartitions --------------------------------------------------------------------


def describe_partitions(
    ctx: Any, names: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None
) -> Any:
    m = schema(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0)
    body = m.DescribeTopicPartitionsRequest(
        topics=tuple(m.TopicRequest(name=n) for n in names),
        response_partition_limit=limit,
        cursor=None
        if cursor is None
        else m.Cursor(topic_name=cursor[0], partition_index=cursor[1]),
    )
    return call(ctx, handle_describe_topic_partitions, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, body)


def pages(ctx: Any, names: list[str], limit: int) -> list[list[tuple[str, list[int]]]]:
    """Follow next_cursor to the end; each page as [(topic, [partition indexes])]."""
    out = []
    cursor = None
    for _ in range(50):
        response = describe_partitions(ctx, names, limit, cursor)
        out.append([(t.name, [p.partition_index for p in t.partitions]) for t in response.topics])
        if response.next_cursor is None:
            return out
        cursor = (response.next_cursor.topic_name, response.next_cursor.partition_index)
    raise AssertionError("pagination did not end")


def test_describe_topic_partitions_all_topics_sorted(ctx: Any) -> None:
    for name, count in (("c", 2), ("a", 3), ("b", 1)):
        ctx.topics.create(name, count, {})
    response = describe_partitions(ctx, [])
    assert response.next_cursor is None
    assert [t.name for t in response.topics] == ["a", "b", "c"]
    a = response.topics[0]
    assert a.error_code == ErrorCode.NONE
    assert a.topic_id == ctx.topics.get("a").topic_id
    assert a.is_internal is False
    assert a.topic_authorized_operations == INT32_MIN
    for p in a.partitions:
        assert p.error_code == ErrorCode.NONE
        assert p.leader_id == ctx.node.node_id
        assert p.leader_epoch == 0
        assert p.replica_nodes == (ctx.node.node_id,)
        assert p.isr_nodes == (ctx.node.node_id,)
        # Never null: the Java Admin client cannot parse a null ELR (client-compat item 2).
        assert p.eligible_leader_replicas == ()
        assert p.last_known_elr == ()
        assert p.offline_replicas == ()


def test_describe_topic_partitions_paginates_like_kafka(ctx: Any) -> None:
    for name, count in (("t1", 3), ("t2", 2), ("t3", 4)):
        ctx.topics.create(name, count, {})
    # Limit 2: t1 is split, t2 fills a page exactly (the next page starts at t3/0).
    assert pages(ctx, [], 2) == [
        [("t1", [0, 1])],
        [("t1", [2]), ("t2", [0])],
        [("t2", [1]), ("t3", [0])],
        [("t3", [1, 2])],
        [("t3", [3])],
    ]
    first = describe_partitions(ctx, [], 2)
    assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == ("t1", 2)
    # Limit 5: the first page ends exactly at the end of t2, so the cursor is t3/0.
    page = describe_partitions(ctx, [], 5)
    assert [t.name for t in page.topics] == ["t1", "t2"]
    assert (page.next_cursor.topic_name, page.next_cursor.partition_index) == ("t3", 0)
    # The pages together hold every partition once.
    flat = [(n, i) for page in pages(ctx, [], 3) for n, idx in page for i in idx]
    assert flat == [
        ("t1", 0),
        ("t1", 1),
        ("t1", 2),
        ("t2", 0),
        ("t2", 1),
        ("t3", 0),
        ("t3", 1),
        ("t3", 2),
        ("t3", 3),
    ]
    # Limit 9 covers everything: no cursor.
    assert describe_partitions(ctx, [], 9).next_cursor is None


def test_describe_topic_partitions_named_topics_with_cursor(ctx: Any) -> None:
    for name, count in (("x", 2), ("y", 3), ("z", 1)):
        ctx.topics.create(name, count, {})
    # Requested out of order and with an unknown topic: answered in name order.
    response = describe_partitions(ctx, ["z", "missing", "y"], cursor=("y", 1))
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("y", ErrorCode.NONE),
        ("z", ErrorCode.NONE),
    ]
    assert [p.partition_index for p in response.topics[0].partitions] == [1, 2]
    response = describe_partitions(ctx, ["y", "missing"])
    unknown = next(t for t in response.topics if t.name == "missing")
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert unknown.topic_id == ZERO_UUID
    assert unknown.partitions == ()
    # A cursor topic that is not among the requested topics is an invalid request.
    response = describe_partitions(ctx, ["x"], cursor=("y", 0))
    assert [(t.name, t.error_code) for t in response.topics] == [("x", ErrorCode.INVALID_REQUEST)]


def test_describe_topic_partitions_empty_cluster(ctx: Any) -> None:
    response = describe_partitions(ctx, [])
    assert response.topics == ()
    assert response.next_cursor is None


# CreateTopics -------------------------------------------------------------------------------


def test_create_topics_v7_success(ctx: Any) -> None:
    result = create(ctx, "orders", 3, {"retention.ms": "1000"})
    assert result.error_code == ErrorCode.NONE
    assert result.error_message is None
    topic = ctx.topics.get("orders")
    assert topic is not None and len(topic.partitions) == 3
    assert result.topic_id == topic.topic_id != ZERO_UUID
    assert result.num_partitions == 3
    assert result.replication_factor == 1
    # An array, never null, when the topic was created (client-compat item 1).
    assert result.configs is not None
    configs = {c.name: c for c in result.configs}
    assert set(configs) == set(TOPIC_CONFIGS)
    assert configs["retention.ms"].value == "1000"
    assert configs["retention.ms"].config_source == 1
    assert configs["segment.bytes"].value == str(ctx.settings.log_segment_bytes)
    assert configs["segment.bytes"].config_source == 5
    assert not any(c.read_only or c.is_sensitive for c in result.configs)


@pytest.mark.parametrize("version", [2, 4, 5, 6])
def test_create_topics_older_versions(ctx: Any, version: int) -> None:
    result = create(ctx, f"v{version}", 2, version=version)
    assert result.error_code == ErrorCode.NONE
    assert len(ctx.topics.get(f"v{version}").partitions) == 2
    if version >= 5:
        assert result.num_partitions == 2
        assert result.configs is not None and len(result.configs) == len(TOPIC_CONFIGS)


def test_create_topics_default_partitions(ctx: Any) -> None:
    result = create(ctx, "defaults", -1)
    assert result.error_code == ErrorCode.NONE
    assert result.num_partitions == ctx.settings.default_partitions


def test_create_topics_duplicate_in_request(ctx: Any) -> None:
    m = schema(ApiKey.CREATE_TOPICS, 7)
    topic = m.CreatableTopic(
        name="dup", num_partitions=1, replication_factor=1, assignments=(), configs=()
    )
    other = m.CreatableTopic(
        name="ok", num_partitions=1, replication_factor=1, assignments=(), configs=()
    )
    body = m.CreateTopicsRequest(topics=(topic, other, topic))
    results = call(ctx, handle_create_topics, ApiKey.CREATE_TOPICS, 7, body).topics
    by_name = {r.name: r for r in results}
    assert len(results) == 2
    assert by_name["dup"].error_code == ErrorCode.INVALID_REQUEST
    assert by_name["ok"].error_code == ErrorCode.NONE
    assert ctx.topics.get("dup") is None


def test_create_topics_already_exists(ctx: Any) -> None:
    ctx.topics.create("here", 1, {})
    result = create(ctx, "here", 1)
    assert result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert result.error_message
    assert result.num_partitions == -1
    assert result.replication_factor == -1
    assert result.topic_id == ZERO_UUID


def test_create_topics_consumer_offsets_already_exists(ctx: Any) -> None:
    # The coordinator's shard logs are __consumer_offsets, as Kafka's internal topic: a
    # script re-creating a cluster's topic list must not get a data-plane copy of it.
    result = create(ctx, "__consumer_offsets", 3)
    assert result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert ctx.topics.get("__consumer_offsets") is None


@pytest.mark.parametrize("rf", [2, 3])
def test_create_topics_bad_replication_factor(ctx: Any, rf: int) -> None:
    result = create(ctx, "replicated", 1, rf=rf)
    assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert result.error_message == f"Replication factor {rf} larger than available brokers 1"
    assert ctx.topics.get("replicated") is None


def test_create_topics_rf_one_ok_and_zero_rejected(ctx: Any) -> None:
    assert create(ctx, "rf1", 1, rf=1).error_code == ErrorCode.NONE
    assert create(ctx, "rf0", 1, rf=0).error_code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_create_topics_bad_config(ctx: Any) -> None:
    result = create(ctx, "badcfg", 1, {"retention.ms": "soon"})
    assert result.error_code == ErrorCode.INVALID_CONFIG
    assert "retention.ms" in result.error_message
    result = create(ctx, "badcfg", 1, {"no.such.config": "1"})
    assert result.error_code == ErrorCode.INVALID_CONFIG
    assert ctx.topics.get("badcfg") is None


def test_create_topics_invalid_name_and_partitions(ctx: Any) -> None:
    assert create(ctx, "bad name", 1).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert create(ctx, "zero", 0).error_code == ErrorCode.INVALID_PARTITIONS


def test_create_topics_validate_only(ctx: Any) -> None:
    result = create(ctx, "dry", 4, {"retention.ms": "5"}, validate_only=True)
    assert result.error_code == ErrorCode.NONE
    assert result.num_partitions == 4
    assert result.configs is not None
    assert ctx.topics.get("dry") is None
    assert not any(p.name.startswith("dry-") for p in (ctx.settings.data_path / "topics").iterdir())
    # Errors are still reported.
    ctx.topics.create("wet", 1, {})
    result = create(ctx, "wet", 1, validate_only=True)
    assert result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_create_topics_refuses_a_name_colliding_with_an_existing_topic(ctx: Any) -> None:
    # Kafka: names equal once '.' and '_' are unified collide (metric names would clash).
    assert create(ctx, "ok.name", 1).error_code == ErrorCode.NONE
    for validate_only in (True, False):
        result = create(ctx, "ok_name", 1, validate_only=validate_only)
        assert result.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert result.error_message == "Topic 'ok_name' collides with existing topics: ok.name"
        assert (result.num_partitions, result.topic_id, result.configs) == (-1, ZERO_UUID, ())
    assert ctx.topics.get("ok_name") is None
    assert create(ctx, "ok.name", 1).error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    result = create(ctx, "__consumer.offsets", 1)
    assert result.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "__consumer_offsets" in result.error_message
    ctx.topics.create("a_b", 1, {})
    assert create(ctx, "a.b", 1).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("validate_only", [False, True])
def test_create_topics_refuses_the_second_of_two_colliding_names(
    ctx: Any, validate_only: bool
) -> None:
    results = create_many(
        ctx,
        ("x.y", 1, {}),
        ("other", 1, {}),
        ("x_y", 1, {}),
        validate_only=validate_only,
    )
    assert results["x.y"].error_code == ErrorCode.NONE
    assert results["other"].error_code == ErrorCode.NONE
    assert results["x_y"].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert results["x_y"].error_message == "Topic 'x_y' collides with existing topics: x.y"
    assert ctx.topics.get("x_y") is None
    assert (ctx.topics.get("x.y") is None) == validate_only
    # A name refused for another reason does not take the key: the next one is created.
    results = create_many(ctx, ("p.q", 0, {}), ("p_q", 1, {}))
    assert results["p.q"].error_code == ErrorCode.INVALID_PARTITIONS
    assert results["p_q"].error_code == ErrorCode.NONE


def create_many(ctx: Any, *topics: tuple[str, int, dict[str, str]], **extra: Any) -> Any:
    """One CreateTopics v7 request for several topics; results by name."""
    m = schema(ApiKey.CREATE_TOPICS, 7)
    body = m.CreateTopicsRequest(
        topics=tuple(
            m.CreatableTopic(
                name=name,
                num_partitions=count,
                replication_factor=-1,
                assignments=(),
                configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
            )
            for name, count, configs in topics
        ),
        validate_only=extra.pop("validate_only", False),
    )
    results = call(ctx, handle_create_topics, ApiKey.CREATE_TOPICS, 7, body).topics
    return {r.name: r for r in results}


def fail_topics_json_once(monkeypatch: Any) -> None:
    """The next topics.json write fails as a full disk would; later ones succeed."""
    real = registry_module.atomic_write
    failed: list[bool] = []

    def flaky(path: Any, data: bytes) -> None:
        if not failed:
            failed.append(True)
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(registry_module, "atomic_write", flaky)


@pytest.mark.parametrize("validate_only", [False, True])
def test_create_topics_int_config_above_java_int(ctx: Any, validate_only: bool) -> None:
    # segment.bytes is a Java int in Kafka: 3000000000 is INVALID_CONFIG, also for a dry run,
    # and only that topic fails -- the next one in the request is created.
    results = create_many(
        ctx,
        ("huge", 2, {"segment.bytes": "3000000000"}),
        ("fine", 2, {"segment.bytes": "2147483647"}),
        validate_only=validate_only,
    )
    huge = results["huge"]
    assert huge.error_code == ErrorCode.INVALID_CONFIG
    assert "segment.bytes" in huge.error_message and "INT" in huge.error_message
    assert (huge.num_partitions, huge.topic_id, huge.configs) == (-1, ZERO_UUID, ())
    assert results["fine"].error_code == ErrorCode.NONE
    assert results["fine"].num_partitions == 2
    assert ctx.topics.get("huge") is None
    (listed,) = metadata(
        ctx,
        12,
        ["huge"],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    ).topics
    assert listed.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    every = metadata(
        ctx,
        12,
        None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    ).topics
    assert [t.name for t in every] == ([] if validate_only else ["fine"])
    assert not any(
        p.name.startswith("huge-") for p in (ctx.settings.data_path / "topics").iterdir()
    )
    # Fixing the config then works: the failed attempt left no half-created topic behind.
    assert create(ctx, "huge", 1, {"segment.bytes": "1048576"}).error_code == ErrorCode.NONE


def test_create_topics_disk_failure_fails_only_that_topic(ctx: Any, monkeypatch: Any) -> None:
    fail_topics_json_once(monkeypatch)
    results = create_many(ctx, ("lost", 3, {}), ("kept", 2, {}))
    lost = results["lost"]
    assert lost.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert "No space left on device" in lost.error_message
    assert (lost.num_partitions, lost.topic_id, lost.configs) == (-1, ZERO_UUID, ())
    assert results["kept"].error_code == ErrorCode.NONE
    assert ctx.topics.get("lost") is None
    assert [t.name for t in ctx.topics.topics()] == ["kept"]
    # A restart from the same directory: the failed topic never existed, nothing of it is
    # on disk, and the topic created after it survives.
    ctx.topics.close()
    restarted = TopicRegistry(ctx.settings)
    restarted.load()
    try:
        assert {t.name: len(t.partitions) for t in restarted.topics()} == {"kept": 2}
    finally:
        restarted.close()
    names = {p.name for p in (ctx.settings.data_path / "topics").iterdir()}
    assert names == {"kept-0", "kept-1"}


def test_create_topics_unexpected_error_fails_only_that_topic(ctx: Any, monkeypatch: Any) -> None:
    real = ctx.topics.create_in_steps

    async def buggy(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "buggy":
            raise RuntimeError("unexpected")
        return await real(name, *args, **kwargs)

    monkeypatch.setattr(ctx.topics, "create_in_steps", buggy)
    results = create_many(ctx, ("buggy", 1, {}), ("after", 1, {}))
    assert results["buggy"].error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert "unexpected" in results["buggy"].error_message
    assert results["after"].error_code == ErrorCode.NONE
    assert [t.name for t in ctx.topics.topics()] == ["after"]


def auto_create(ctx: Any, name: str) -> Any:
    """Metadata v12 for `name`, letting the server create it; the topic's entry."""
    (topic,) = metadata(
        ctx,
        12,
        [name],
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    ).topics
    return topic


def test_metadata_auto_create_disk_failure_creates_nothing(ctx: Any, monkeypatch: Any) -> None:
    fail_topics_json_once(monkeypatch)
    assert auto_create(ctx, "auto").error_code == ErrorCode.LEADER_NOT_AVAILABLE
    assert ctx.topics.get("auto") is None
    assert not any(
        p.name.startswith("auto-") for p in (ctx.settings.data_path / "topics").iterdir()
    )
    assert auto_create(ctx, "auto").error_code == ErrorCode.NONE  # the client's retry
    assert len(ctx.topics.get("auto").partitions) == ctx.settings.default_partitions


def test_metadata_auto_create_waits_for_a_topic_being_created_in_steps(
    ctx: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(registry_module, "CHANGE_STEP_S", 0.0)  # a step per partition

    async def main() -> None:
        creating = asyncio.create_task(ctx.topics.create_in_steps("stepping", 20, {}))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        # Retriable, and nothing opened under the directories being created.
        assert auto_create(ctx, "stepping").error_code == ErrorCode.LEADER_NOT_AVAILABLE
        await creating
        answer = auto_create(ctx, "stepping")
        assert answer.error_code == ErrorCode.NONE
        assert len(answer.partitions) == 20

    asyncio.run(main())


def test_metadata_auto_create_refuses_a_colliding_name(ctx: Any) -> None:
    ctx.topics.create("auto.topic", 1, {})
    assert auto_create(ctx, "auto_topic").error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert ctx.topics.get("auto_topic") is None


def test_create_topics_manual_assignment(ctx: Any) -> None:
    m = schema(ApiKey.CREATE_TOPICS, 7)
    node = ctx.node.node_id
    ok = tuple(
        m.CreatableReplicaAssignment(partition_index=i, broker_ids=(node,)) for i in range(2)
    )
    result = create(ctx, "manual", -1, assignments=ok)
    assert result.error_code == ErrorCode.NONE
    assert result.num_partitions == 2
    assert len(ctx.topics.get("manual").partitions) == 2
    other = (m.CreatableReplicaAssignment(partition_index=0, broker_ids=(node + 1,)),)
    result = create(ctx, "elsewhere", -1, assignments=other)
    assert result.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    two = (m.CreatableReplicaAssignment(partition_index=0, broker_ids=(node, node + 1)),)
    assert create(ctx, "two", -1, assignments=two).error_code == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT
    )
    gap = (m.CreatableReplicaAssignment(partition_index=1, broker_ids=(node,)),)
    assert create(ctx, "gap", -1, assignments=gap).error_code == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT
    )
    # Kafka: a manual assignment excludes a partition count.
    assert create(ctx, "both", 2, assignments=ok).error_code == ErrorCode.INVALID_REQUEST


# DeleteTopics -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 4, 5])
def test_delete_topics_by_name(ctx: Any, version: int) -> None:
    ctx.topics.create("gone", 2, {})
    m = schema(ApiKey.DELETE_TOPICS, version)
    body = m.DeleteTopicsRequest(topic_names=("gone", "never"), timeout=TIMEOUT)
    results = call(ctx, handle_delete_topics, ApiKey.DELETE_TOPICS, version, body).responses
    by_name = {r.name: r for r in results}
    assert by_name["gone"].error_code == ErrorCode.NONE
    assert by_name["never"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if version >= 5:
        assert by_name["never"].error_message
    assert ctx.topics.get("gone") is None
    assert not (ctx.settings.data_path / "topics" / "gone-0").exists()


def test_delete_topics_v6_by_name_and_id(ctx: Any) -> None:
    by_id = ctx.topics.create("by-id", 1, {})
    ctx.topics.create("by-name", 1, {})
    m = schema(ApiKey.DELETE_TOPICS, 6)
    unknown = uuid.uuid4()
    body = m.DeleteTopicsRequest(
        topics=(
            m.DeleteTopicState(name=None, topic_id=by_id.topic_id),
            m.DeleteTopicState(name="by-name", topic_id=ZERO_UUID),
            m.DeleteTopicState(name=None, topic_id=unknown),
            m.DeleteTopicState(name="unknown", topic_id=ZERO_UUID),
        ),
        timeout=TIMEOUT,
    )
    results = call(ctx, handle_delete_topics, ApiKey.DELETE_TOPICS, 6, body).responses
    assert [(r.name, r.topic_id, r.error_code) for r in results] == [
        ("by-id", by_id.topic_id, ErrorCode.NONE),
        ("by-name", results[1].topic_id, ErrorCode.NONE),
        (None, unknown, ErrorCode.UNKNOWN_TOPIC_ID),
        ("unknown", ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert results[1].topic_id != ZERO_UUID
    assert ctx.topics.topics() == []


def test_delete_topics_duplicates_and_both_keys(ctx: Any) -> None:
    topic = ctx.topics.create("t", 1, {})
    m = schema(ApiKey.DELETE_TOPICS, 6)
    body = m.DeleteTopicsRequest(
        topics=(
            m.DeleteTopicState(name="t", topic_id=ZERO_UUID),
            m.DeleteTopicState(name="t", topic_id=ZERO_UUID),
            m.DeleteTopicState(name="t", topic_id=topic.topic_id),
        ),
        timeout=TIMEOUT,
    )
    results = call(ctx, handle_delete_topics, ApiKey.DELETE_TOPICS, 6, body).responses
    assert [r.error_code for r in results] == [ErrorCode.INVALID_REQUEST] * 2
    assert ctx.topics.get("t") is not None


# CreatePartitions ---------------------------------------------------------------------------


def create_partitions(
    ctx: Any, version: int, *topics: tuple[str, int, Any], validate_only: bool = False
) -> Any:
    m = schema(ApiKey.CREATE_PARTITIONS, version)
    body = m.CreatePartitionsRequest(
        topics=tuple(
            m.CreatePartitionsTopic(
                name=name,
                count=count,
                assignments=None
                if brokers is None
                else tuple(m.CreatePartitionsAssignment(broker_ids=b) for b in brokers),
            )
            for name, count, brokers in topics
        ),
        timeout=TIMEOUT,
        validate_only=validate_only,
    )
    return call(ctx, handle_create_partitions, ApiKey.CREATE_PARTITIONS, version, body).results


@pytest.mark.parametrize("version", [0, 3])
def test_create_partitions(ctx: Any, version: int) -> None:
    ctx.topics.create("grow", 1, {})
    node = ctx.node.node_id
    results = create_partitions(ctx, version, ("grow", 3, [(node,), (node,)]), ("missing", 2, None))
    assert [(r.name, r.error_code) for r in results] == [
        ("grow", ErrorCode.NONE),
        ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert len(ctx.topics.get("grow").partitions) == 3


def test_create_partitions_errors_and_validate_only(ctx: Any) -> None:
    ctx.topics.create("grow", 2, {})
    node = ctx.node.node_id
    (r,) = create_partitions(ctx, 3, ("grow", 2, None))
    assert r.error_code == ErrorCode.INVALID_PARTITIONS
    (r,) = create_partitions(ctx, 3, ("grow", 1, None))
    assert r.error_code == ErrorCode.INVALID_PARTITIONS
    (r,) = create_partitions(ctx, 3, ("grow", 3, [(node + 1,)]))
    assert r.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    (r,) = create_partitions(ctx, 3, ("grow", 4, [(node,)]))
    assert r.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    (r,) = create_partitions(ctx, 3, ("grow", 5, None), validate_only=True)
    assert r.error_code == ErrorCode.NONE
    assert len(ctx.topics.get("grow").partitions) == 2
    results = create_partitions(ctx, 3, ("grow", 5, None), ("grow", 6, None))
    assert [(r.name, r.error_code) for r in results] == [("grow", ErrorCode.INVALID_REQUEST)]
    assert len(ctx.topics.get("grow").partitions) == 2


# DescribeConfigs ----------------------------------------------------------------------------


def describe_configs(
    ctx: Any,
    version: int,
    *resources: tuple[int, str, Any],
    synonyms: bool = False,
    documentation: bool = False,
) -> Any:
    m = schema(ApiKey.DESCRIBE_CONFIGS, version)
    fields: dict[str, Any] = {"include_synonyms": synonyms}
    if version >= 3:
        fields["include_documentation"] = documentation
    body = m.DescribeConfigsRequest(
        resources=tuple(
            m.DescribeConfigsResource(resource_type=t, resource_name=n, configuration_keys=k)
            for t, n, k in resources
        ),
        **fields,
    )
    return call(ctx, handle_describe_configs, ApiKey.DESCRIBE_CONFIGS, version, body).results


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_configs_topic(ctx: Any, version: int) -> None:
    ctx.topics.create("cfg", 1, {"retention.ms": "1234"})
    (result,) = describe_configs(ctx, version, (2, "cfg", None), synonyms=True, documentation=True)
    assert result.error_code == ErrorCode.NONE
    assert (result.resource_type, result.resource_name) == (2, "cfg")
    configs = {c.name: c for c in result.configs}
    assert set(configs) == set(TOPIC_CONFIGS)
    retention = configs["retention.ms"]
    assert (retention.value, retention.config_source) == ("1234", 1)
    assert retention.synonyms[0].name == "retention.ms"
    assert retention.synonyms[0].source == 1
    assert retention.synonyms[1].name == "log.retention.ms"
    assert retention.synonyms[1].value == str(ctx.settings.log_retention_ms)
    segment = configs["segment.bytes"]
    assert (segment.value, segment.config_source) == (str(ctx.settings.log_segment_bytes), 5)
    assert not segment.read_only and not segment.is_sensitive
    if version >= 3:
        assert retention.config_type == 5  # LONG
        assert segment.config_type == 3  # INT
        assert configs["cleanup.policy"].config_type == 7  # LIST
        assert configs["message.timestamp.type"].config_type == 2  # STRING
        assert retention.documentation


def test_describe_configs_topic_keys_and_errors(ctx: Any) -> None:
    ctx.topics.create("cfg", 1, {})
    keyed, unknown, invalid = describe_configs(
        ctx, 4, (2, "cfg", ("segment.ms", "no.such")), (2, "nope", None), (2, "bad name", None)
    )
    assert [c.name for c in keyed.configs] == ["segment.ms"]
    assert keyed.configs[0].synonyms == ()
    assert keyed.configs[0].documentation is None
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert unknown.configs == ()
    assert invalid.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("name", ["0", ""])
def test_describe_configs_broker(ctx: Any, name: str) -> None:
    (result,) = describe_configs(ctx, 4, (4, name, None), synonyms=True, documentation=True)
    assert result.error_code == ErrorCode.NONE
    configs = {c.name: c for c in result.configs}
    assert configs["num.partitions"].value == str(ctx.settings.default_partitions)
    assert configs["auto.create.topics.enable"].value == "true"
    assert configs["auto.create.topics.enable"].config_type == 1  # BOOLEAN
    assert configs["log.retention.ms"].value == str(ctx.settings.log_retention_ms)
    assert configs["socket.request.max.bytes"].value == str(ctx.settings.frame_bytes_max)
    assert configs["offsets.topic.num.partitions"].value == str(ctx.settings.offsets_partitions)
    assert configs["message.max.bytes"].value == str(ctx.settings.message_bytes_max)
    assert configs["log.retention.ms"].config_source == 5
    assert configs["log.dirs"].config_source == 4  # data_dir was configured
    # Read-only as Kafka 4.4 reports them: what it cannot update dynamically.
    assert [c.name for c in result.configs if not c.read_only] == [
        c.name for c in result.configs if c.name in DYNAMIC_BROKER_CONFIGS
    ]
    assert not configs["log.retention.ms"].read_only and configs["log.dirs"].read_only


def test_describe_configs_broker_reports_configured_settings(tmp_path: Any) -> None:
    ctx = context(tmp_path, default_partitions=6)
    try:
        (result,) = describe_configs(ctx, 4, (4, "0", ("num.partitions",)))
        (entry,) = result.configs
        assert (entry.value, entry.config_source) == ("6", 4)
    finally:
        ctx.topics.close()


def test_describe_configs_other_resources_are_invalid(ctx: Any) -> None:
    other_broker, empty_group, logger = describe_configs(
        ctx, 4, (4, "7", None), (32, "", None), (8, "0", None)
    )
    for result in (other_broker, empty_group, logger):
        assert result.error_code == ErrorCode.INVALID_REQUEST
        assert result.error_message
        assert result.configs == ()


def test_describe_configs_group_lists_the_consumer_group_configs(ctx: Any) -> None:
    (group,) = describe_configs(ctx, 4, (32, "my-group", None))
    assert group.error_code == ErrorCode.NONE
    values = {c.name: (c.value, c.config_source) for c in group.configs}
    assert values == {
        "consumer.assignment.interval.ms": ("1000", 5),
        "consumer.assignor": ("uniform", 5),
        "consumer.assignor.offload.enable": ("true", 5),
        "consumer.heartbeat.interval.ms": ("5000", 5),
        "consumer.session.timeout.ms": ("45000", 5),
    }
    ctx.groups.alter_group_configs(
        "my-group", {"consumer.heartbeat.interval.ms": "6000"}, validate_only=False
    )
    (group,) = describe_configs(ctx, 4, (32, "my-group", None))
    values = {c.name: (c.value, c.config_source) for c in group.configs}
    assert values["consumer.heartbeat.interval.ms"] == ("6000", 8)  # DYNAMIC_GROUP_CONFIG


# IncrementalAlterConfigs --------------------------------------------------------------------

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def alter_configs(
    ctx: Any,
    *resources: tuple[int, str, list[tuple[str, int, str | None]]],
    validate_only: bool = False,
    version: int = 1,
) -> Any:
    """One IncrementalAlterConfigs request: resources as (type, name, [(config, op, value)])."""
    m = schema(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
    body = m.IncrementalAlterConfigsRequest(
        resources=tuple(
            m.AlterConfigsResource(
                resource_type=rtype,
                resource_name=rname,
                configs=tuple(
                    m.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in entries
                ),
            )
            for rtype, rname, entries in resources
        ),
        validate_only=validate_only,
    )
    return call(
        ctx, handle_incremental_alter_configs, ApiKey.INCREMENTAL_ALTER_CONFIGS, version, body
    ).responses


def topic_values(ctx: Any, name: str) -> dict[str, tuple[str, int]]:
    """DescribeConfigs of a topic: config -> (value, source)."""
    (result,) = describe_configs(ctx, 4, (2, name, None))
    assert result.error_code == ErrorCode.NONE
    return {c.name: (c.value, c.config_source) for c in result.configs}


def saved_topic_configs(ctx: Any, name: str) -> dict[str, str]:
    """The topic's overrides as a restarted registry loads them from topics.json."""
    reloaded = TopicRegistry(ctx.settings)
    reloaded.load()
    try:
        return dict(reloaded.get(name).configs)
    finally:
        reloaded.close()


@pytest.mark.parametrize("version", [0, 1])
def test_incremental_alter_configs_topic_set_and_delete(ctx: Any, version: int) -> None:
    topic = ctx.topics.create("cfg", 2, {"retention.ms": "1000"})
    (result,) = alter_configs(
        ctx,
        (2, "cfg", [("segment.bytes", SET, "1048576"), ("retention.ms", SET, "5000")]),
        version=version,
    )
    assert (result.error_code, result.error_message) == (ErrorCode.NONE, None)
    assert (result.resource_type, result.resource_name) == (2, "cfg")
    values = topic_values(ctx, "cfg")
    assert values["segment.bytes"] == ("1048576", 1)  # DYNAMIC_TOPIC_CONFIG
    assert values["retention.ms"] == ("5000", 1)
    for partition in topic.partitions:  # the live logs use the new settings
        assert partition.log.config.segment_bytes_max == 1048576
        assert partition.log.config.retention_ms == 5000
    assert saved_topic_configs(ctx, "cfg") == {
        "retention.ms": "5000",
        "segment.bytes": "1048576",
    }

    # DELETE: back to the broker's value; deleting a config that has no override is a no-op.
    (result,) = alter_configs(
        ctx, (2, "cfg", [("retention.ms", DELETE, None), ("segment.ms", DELETE, None)])
    )
    assert result.error_code == ErrorCode.NONE
    values = topic_values(ctx, "cfg")
    assert values["retention.ms"] == (str(ctx.settings.log_retention_ms), 5)  # DEFAULT_CONFIG
    assert values["segment.bytes"] == ("1048576", 1)
    assert topic.partitions[0].log.config.retention_ms == ctx.settings.log_retention_ms
    assert saved_topic_configs(ctx, "cfg") == {"segment.bytes": "1048576"}


def test_incremental_alter_configs_topic_validate_only_writes_nothing(ctx: Any) -> None:
    topic = ctx.topics.create("dry", 1, {"retention.ms": "1000"})
    saved = (ctx.settings.data_path / "topics.json").read_bytes()
    (ok, bad) = alter_configs(
        ctx,
        (2, "dry", [("retention.ms", SET, "99")]),
        (2, "nope", [("retention.ms", SET, "99")]),
        validate_only=True,
    )
    assert ok.error_code == ErrorCode.NONE
    assert bad.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    (invalid,) = alter_configs(ctx, (2, "dry", [("retention.ms", SET, "soon")]), validate_only=True)
    assert invalid.error_code == ErrorCode.INVALID_CONFIG
    assert topic.configs == {"retention.ms": "1000"}
    assert topic.partitions[0].log.config.retention_ms == 1000
    assert (ctx.settings.data_path / "topics.json").read_bytes() == saved


def test_incremental_alter_configs_topic_errors(ctx: Any) -> None:
    topic = ctx.topics.create("cfg", 1, {"retention.ms": "1000"})
    results = alter_configs(
        ctx,
        (2, "missing", [("retention.ms", SET, "5")]),
        (2, "", [("retention.ms", SET, "5")]),
        (2, "bad name", [("retention.ms", SET, "5")]),
        (2, "cfg", [("retention.ms", APPEND, "5")]),
        (2, "cfg.a", [("retention.ms", SUBTRACT, "5")]),
        (2, "cfg.b", [("no.such.config", SET, "1")]),
        (2, "cfg.c", [("retention.ms", SET, "soon")]),
        (2, "cfg.d", [("segment.bytes", SET, "3000000000")]),
        (2, "cfg.e", [("retention.ms", SET, None)]),
        (2, "cfg.f", [("retention.ms", SET, "5"), ("retention.ms", DELETE, None)]),
        (2, "cfg.g", [("retention.ms", 7, "5")]),
    )
    answers = [(r.resource_name, r.error_code) for r in results]
    assert answers == [
        ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("", ErrorCode.INVALID_REQUEST),
        ("bad name", ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("cfg", ErrorCode.INVALID_CONFIG),
        ("cfg.a", ErrorCode.INVALID_CONFIG),
        ("cfg.b", ErrorCode.INVALID_CONFIG),
        ("cfg.c", ErrorCode.INVALID_CONFIG),
        ("cfg.d", ErrorCode.INVALID_CONFIG),
        ("cfg.e", ErrorCode.INVALID_REQUEST),
        ("cfg.f", ErrorCode.INVALID_REQUEST),
        ("cfg.g", ErrorCode.INVALID_REQUEST),
    ]
    messages = {r.resource_name: r.error_message for r in results}
    assert messages["missing"] == "The topic 'missing' does not exist."
    assert messages["cfg"] == "Config value append is not allowed for config key: retention.ms"
    assert messages["cfg.a"] == "Config value subtract is not allowed for config key: retention.ms"
    assert messages["cfg.b"] == "Unknown topic config name: no.such.config"
    assert "retention.ms" in messages["cfg.c"]
    assert "segment.bytes" in messages["cfg.d"] and "INT" in messages["cfg.d"]
    assert messages["cfg.e"] == "Null value not supported for : retention.ms"
    assert messages["cfg.f"] == "Error due to duplicate config keys"
    assert all(r.error_message for r in results)
    # A resource named twice: both copies refused, and the other resources still served.
    ctx.topics.create("other", 1, {})
    twice, other, again = alter_configs(
        ctx,
        (2, "cfg", [("retention.ms", SET, "5")]),
        (2, "other", [("retention.ms", SET, "7")]),
        (2, "cfg", [("retention.ms", SET, "6")]),
    )
    assert twice.error_code == again.error_code == ErrorCode.INVALID_REQUEST
    assert twice.error_message == "Each resource must appear at most once."
    assert other.error_code == ErrorCode.NONE
    assert ctx.topics.get("other").configs == {"retention.ms": "7"}
    assert topic.configs == {"retention.ms": "1000"}


def test_incremental_alter_configs_topic_list_configs_append_and_subtract(ctx: Any) -> None:
    topic = ctx.topics.create("lists", 1, {})
    # cleanup.policy is a LIST: APPEND starts from its default ("delete") ...
    (result,) = alter_configs(ctx, (2, "lists", [("cleanup.policy", APPEND, "delete")]))
    assert result.error_code == ErrorCode.NONE
    assert topic.configs == {"cleanup.policy": "delete"}
    assert topic_values(ctx, "lists")["cleanup.policy"] == ("delete", 1)
    # ... and APPEND / SUBTRACT of items make a compacted topic and back.
    (result,) = alter_configs(ctx, (2, "lists", [("cleanup.policy", APPEND, "compact")]))
    assert result.error_code == ErrorCode.NONE
    assert topic.configs == {"cleanup.policy": "delete,compact"}
    (result,) = alter_configs(ctx, (2, "lists", [("cleanup.policy", SUBTRACT, "delete")]))
    assert result.error_code == ErrorCode.NONE
    assert topic.configs == {"cleanup.policy": "compact"}
    # The result is validated as CreateTopics validates it.
    (result,) = alter_configs(ctx, (2, "lists", [("cleanup.policy", APPEND, "shred")]))
    assert result.error_code == ErrorCode.INVALID_CONFIG
    assert "cleanup.policy" in result.error_message
    assert topic.configs == {"cleanup.policy": "compact"}


def test_incremental_alter_configs_topic_failed_save_keeps_the_old_configs(
    ctx: Any, monkeypatch: Any
) -> None:
    topic = ctx.topics.create("kept", 1, {"retention.ms": "1000"})
    fail_topics_json_once(monkeypatch)
    (result,) = alter_configs(ctx, (2, "kept", [("retention.ms", SET, "5000")]))
    assert result.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert "No space left on device" in result.error_message
    assert topic.configs == {"retention.ms": "1000"}
    assert topic.partitions[0].log.config.retention_ms == 1000
    assert topic_values(ctx, "kept")["retention.ms"] == ("1000", 1)
    assert saved_topic_configs(ctx, "kept") == {"retention.ms": "1000"}
    (result,) = alter_configs(ctx, (2, "kept", [("retention.ms", SET, "5000")]))
    assert result.error_code == ErrorCode.NONE  # the retry succeeds
    assert saved_topic_configs(ctx, "kept") == {"retention.ms": "5000"}


def test_incremental_alter_configs_topic_max_message_bytes_applies_at_once(ctx: Any) -> None:
    topic = ctx.topics.create("sized", 1, {})
    (result,) = alter_configs(ctx, (2, "sized", [("max.message.bytes", SET, "1000")]))
    assert result.error_code == ErrorCode.NONE
    # The produce path reads the topic's limit at every request.
    assert topic.config_value("max.message.bytes", ctx.settings) == "1000"


@pytest.mark.parametrize("name", ["", "0"])
def test_incremental_alter_configs_broker_configs_as_kafka(ctx: Any, name: str) -> None:
    """Issue 17 item 7c: Kafka 4.4 updates log.retention.ms dynamically and refuses
    num.partitions; "" is the cluster default (DYNAMIC_DEFAULT_BROKER_CONFIG), "0" this
    broker's own (DYNAMIC_BROKER_CONFIG); DELETE falls back to the server's setting."""
    results = alter_configs(
        ctx,
        (4, name, [("log.retention.ms", SET, "1000"), ("num.partitions", SET, "3")]),
        (4, "7", [("log.retention.ms", SET, "1000")]),
        (4, "x", [("log.retention.ms", SET, "1000")]),
    )
    static, other, not_a_number = results
    assert static.error_code == ErrorCode.INVALID_REQUEST
    assert static.error_message == "Cannot update these configs dynamically: [num.partitions]"
    assert other.error_code == ErrorCode.INVALID_REQUEST
    assert other.error_message == "Unexpected broker id, expected 0, but received 7"
    assert not_a_number.error_code == ErrorCode.INVALID_REQUEST
    assert not_a_number.error_message == "Node id must be an integer, but it is: x"
    (bad,) = alter_configs(ctx, (4, name, [("log.retention.ms", SET, "abc")]))
    assert (bad.error_code, bad.error_message) == (
        ErrorCode.INVALID_REQUEST,
        "Invalid value abc for configuration log.retention.ms: Not a number of type LONG",
    )
    (broker,) = describe_configs(ctx, 4, (4, name, ("log.retention.ms",)))
    assert broker.configs[0].value == str(ctx.settings.log_retention_ms)

    (done,) = alter_configs(ctx, (4, name, [("log.retention.ms", SET, "1000")]))
    assert done.error_code == ErrorCode.NONE
    (broker,) = describe_configs(ctx, 4, (4, name, ("log.retention.ms",)))
    assert broker.configs[0].value == "1000"
    assert broker.configs[0].config_source == (3 if name == "" else 2)
    assert ctx.topics.config.log_retention_ms == 1000  # topics without an override

    results = alter_configs(ctx, (4, name, [("log.retention.ms", DELETE, None)]))
    assert results[0].error_code == ErrorCode.NONE
    (broker,) = describe_configs(ctx, 4, (4, name, ("log.retention.ms",)))
    assert broker.configs[0].value == str(ctx.settings.log_retention_ms)
    results = alter_configs(
        ctx,
        (4, name, [("log.retention.ms", APPEND, "1")]),
        (4, "0" if name == "" else "", [("no.such.config", SUBTRACT, "1")]),
    )
    assert [r.error_code for r in results] == [ErrorCode.INVALID_CONFIG] * 2
    assert results[0].error_message == (
        "Config value append is not allowed for config key: log.retention.ms"
    )
    assert results[1].error_message == "Unknown config name: no.such.config"


def test_incremental_alter_configs_group_and_other_resources(ctx: Any) -> None:
    group, bad, listed, empty, logger = alter_configs(
        ctx,
        (32, "g1", [("consumer.heartbeat.interval.ms", SET, "6000")]),
        (32, "g2", [("consumer.session.timeout.ms", SET, "1000")]),
        (32, "g3", [("consumer.assignor", APPEND, "range")]),
        (32, "", [("consumer.heartbeat.interval.ms", SET, "6000")]),
        (8, "0", [("root", SET, "DEBUG")]),
    )
    assert group.error_code == ErrorCode.NONE
    assert bad.error_code == listed.error_code == ErrorCode.INVALID_CONFIG
    assert empty.error_code == logger.error_code == ErrorCode.INVALID_REQUEST
    assert ctx.groups.group_config_overrides("g1") == {"consumer.heartbeat.interval.ms": "6000"}
    assert ctx.groups.group_config_overrides("g2") == {}


def test_timestamp_configs_are_described_with_kafka_defaults_and_synonyms(ctx: Any) -> None:
    ctx.topics.create("ts", 1, {"message.timestamp.type": "LogAppendTime"})
    (result,) = describe_configs(ctx, 4, (2, "ts", None), synonyms=True, documentation=True)
    configs = {c.name: c for c in result.configs}
    kind = configs["message.timestamp.type"]
    assert (kind.value, kind.config_source, kind.config_type) == ("LogAppendTime", 1, 2)
    assert [(s.name, s.value, s.source) for s in kind.synonyms] == [
        ("message.timestamp.type", "LogAppendTime", 1),
        ("log.message.timestamp.type", "CreateTime", 5),
    ]
    for name, default in (
        ("message.timestamp.before.max.ms", str(2**63 - 1)),
        ("message.timestamp.after.max.ms", "3600000"),
    ):
        entry = configs[name]
        assert (entry.value, entry.config_source, entry.config_type) == (default, 5, 5)  # LONG
        assert [(s.name, s.value) for s in entry.synonyms] == [("log." + name, default)]
        assert entry.documentation
    (broker,) = describe_configs(ctx, 4, (4, "0", None))
    values = {c.name: c.value for c in broker.configs}
    assert values["log.message.timestamp.type"] == "CreateTime"
    assert values["log.message.timestamp.before.max.ms"] == str(2**63 - 1)
    assert values["log.message.timestamp.after.max.ms"] == "3600000"


def test_timestamp_configs_follow_the_broker_settings(tmp_path: Any) -> None:
    ctx = context(
        tmp_path,
        log_message_timestamp_type="LogAppendTime",
        log_message_timestamp_after_max_ms=5000,
    )
    try:
        ctx.topics.create("ts", 1, {})
        (result,) = describe_configs(ctx, 4, (2, "ts", None))
        values = {c.name: (c.value, c.config_source) for c in result.configs}
        assert values["message.timestamp.type"] == ("LogAppendTime", 4)  # STATIC_BROKER_CONFIG
        assert values["message.timestamp.after.max.ms"] == ("5000", 4)
    finally:
        ctx.topics.close()


def test_incremental_alter_configs_sets_timestamp_configs(ctx: Any) -> None:
    ctx.topics.create("ts", 1, {})
    (result,) = alter_configs(
        ctx,
        (
            2,
            "ts",
            [
                ("message.timestamp.type", SET, "LogAppendTime"),
                ("message.timestamp.after.max.ms", SET, "1000"),
                ("message.timestamp.before.max.ms", SET, "2000"),
            ],
        ),
    )
    assert result.error_code == ErrorCode.NONE
    values = topic_values(ctx, "ts")
    assert values["message.timestamp.type"] == ("LogAppendTime", 1)
    assert values["message.timestamp.after.max.ms"] == ("1000", 1)
    assert values["message.timestamp.before.max.ms"] == ("2000", 1)
    (refused,) = alter_configs(
        ctx, (2, "ts", [("message.timestamp.difference.max.ms", SET, "1000")])
    )
    assert refused.error_code == ErrorCode.INVALID_CONFIG
    (refused,) = alter_configs(ctx, (2, "ts", [("message.timestamp.type", SET, "Now")]))
    assert refused.error_code == ErrorCode.INVALID_CONFIG
    assert topic_values(ctx, "ts")["message.timestamp.type"] == ("LogAppendTime", 1)


def test_create_topics_accepts_timestamp_configs(ctx: Any) -> None:
    result = create(
        ctx,
        "created-ts",
        1,
        {"message.timestamp.type": "LogAppendTime", "message.timestamp.after.max.ms": "0"},
    )
    assert result.error_code == ErrorCode.NONE
    configs = {c.name: (c.value, c.config_source) for c in result.configs}
    assert configs["message.timestamp.type"] == ("LogAppendTime", 1)
    assert configs["message.timestamp.after.max.ms"] == ("0", 1)
    refused = create(ctx, "refused-ts", 1, {"message.timestamp.difference.max.ms": "1"})
    assert refused.error_code == ErrorCode.INVALID_CONFIG


def test_topic_handlers_need_no_group_coordinator(tmp_path: Any) -> None:
    """The data plane's handlers run on a context with no group coordinator at all (any use
    of it fails the test): topics are created, listed, grown and described. Only a group's
    configs and a deleted topic's offsets are the coordinator's business."""
    ctx = handler_context(settings(tmp_path), NoGroupCoordinator())
    try:
        assert create(ctx, "plain", 1).error_code == ErrorCode.NONE
        listed = metadata(
            ctx,
            12,
            None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        assert [t.name for t in listed.topics] == ["plain"]
        (grown,) = create_partitions(ctx, 3, ("plain", 2, None))
        assert grown.error_code == ErrorCode.NONE
        assert topic_values(ctx, "plain")["retention.ms"] == (str(ctx.settings.log_retention_ms), 5)
    finally:
        ctx.topics.close()
