"""Metadata v0-v12, DescribeCluster v0-v1 and DescribeTopicPartitions v0: the cluster as one
node that leads every partition.

Every partition is led by this node at leader epoch 0, with this node as its only replica and
in-sync replica. Topic ids are the registry's real UUIDs, so Java consumers move to Fetch
v13+ (topic ids). Authorized operations are INT32_MIN ("not requested") unless asked for;
when asked for, what the authorizer allows (everything without one). With an authorizer,
topics the principal may not DESCRIBE are hidden from listings and refused by name
(TOPIC_AUTHORIZATION_FAILED), as Kafka's (access.py). The coordinators' shard
logs are listed as Kafka's internal topics (is_internal) once they exist
(internal_topics.py).
"""

from __future__ import annotations

import uuid
from enum import IntEnum
from typing import Any

from groupcoord.protocol.acl_operations import CLUSTER_OPERATIONS_ALL, TOPIC_OPERATIONS_ALL
from groupcoord.protocol.api import (
    AUTHORIZED_OPERATIONS_OMITTED,
    ZERO_UUID,
    ApiKey,
    Request,
    build,
    response_types,
)
from groupcoord.protocol.errors import ErrorCode
from groupcoord.storage import LEADER_EPOCH

from ..observability.logging import get_logger
from ..runtime.partitioning import INTERNAL_TOPIC_NAMES
from ..security.acl_model import CLUSTER_NAME
from .access import (
    CLUSTER,
    CREATE,
    DESCRIBE,
    TOPIC,
    allowed,
    cluster_operations_bitfield,
    operations_bitfield,
    visible,
)
from .context import Node, TopicsContext
from .registry import Topic, TopicError, check_topic_name

log = get_logger("groupcoord.metadata")


# Kafka's EndpointType (DescribeCluster v1+).
ENDPOINT_BROKER = 1
ENDPOINT_CONTROLLER = 2
_ENDPOINT_NAMES = {ENDPOINT_BROKER: "BROKER", ENDPOINT_CONTROLLER: "CONTROLLER"}


class EndpointError(IntEnum):
    """Kafka error codes (Errors.java) not in protocol.errors.ErrorCode yet."""

    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115


# Kafka's max.request.partition.size.limit default: the cap on response_partition_limit.
DESCRIBE_TOPIC_PARTITIONS_LIMIT_MAX = 2000


def _partitions(
    cls: type[Any],
    topic: Topic,
    node: Node,
    start: int = 0,
    stop: int | None = None,
    **extra: Any,
) -> tuple[Any, ...]:
    """Each partition led by its owner (ownership.py; this node when it is the only one),
    the leader its only replica; serve --cluster: a partition nobody leads now (its lease
    is moving) is LEADER_NOT_AVAILABLE with leader -1 and no replicas, as Kafka's."""
    stop = len(topic.partitions) if stop is None else stop
    ownership = node.ownership
    leaders = (
        [node.node_id] * (stop - start)
        if ownership is None
        else [ownership.partition_leader(topic.name, index) for index in range(start, stop)]
    )
    return tuple(
        build(
            cls,
            error_code=ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
            partition_index=index,
            leader_id=leader,
            leader_epoch=LEADER_EPOCH,
            replica_nodes=(leader,) if leader >= 0 else (),
            isr_nodes=(leader,) if leader >= 0 else (),
            offline_replicas=(),
            **extra,
        )
        for index, leader in zip(range(start, stop), leaders, strict=True)
    )


def brokers_of(node: Node) -> tuple[tuple[int, str, int], ...]:
    """Every broker of the cluster as (node id, host, port) on `node`'s listener: the
    workers of serve --workers, or this node alone."""
    return node.brokers or ((node.node_id, node.host, node.port),)


# Metadata -----------------------------------------------------------------------------------


def handle_metadata(ctx: TopicsContext, request: Request) -> Any:
    """Emits this node as the only broker and controller, the cluster id (v2+), and the
    requested topics (v0: empty list = all; v1+: null = all, empty = none; v10+: by topic id
    when the name is null), each partition led by this node at epoch 0. An unknown topic is
    created with default_partitions partitions when the request (v4+; always below) and the
    server allow auto-creation.
    Errors per topic: UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID (by id),
    INVALID_TOPIC_EXCEPTION (illegal name, or auto-creation refused because the name
    collides with an existing topic's once '.' and '_' are unified), INVALID_REQUEST
    (neither name nor id; v10-v11: a topic id or a null name anywhere in the request, which
    Kafka refuses whole: every requested topic answered INVALID_REQUEST, no broker),
    LEADER_NOT_AVAILABLE (auto-creation failed on disk, or with serve --workers is left to
    the first worker; retriable); with an authorizer TOPIC_AUTHORIZATION_FAILED (no
    DESCRIBE on the topic, or auto-creation without CREATE), topics it may not DESCRIBE
    left out of an all-topics answer."""
    node = ctx.node
    version = request.api_version
    body = request.body
    m = response_types(ApiKey.METADATA, version)
    enabled = ctx.authorizer.enabled
    include_topic_ops = getattr(body, "include_topic_authorized_operations", False)
    cluster_ops = (
        cluster_operations_bitfield(ctx, CLUSTER_OPERATIONS_ALL)
        if getattr(body, "include_cluster_authorized_operations", False)
        else AUTHORIZED_OPERATIONS_OMITTED
    )

    def found(topic: Topic) -> Any:
        return build(
            m.MetadataResponseTopic,
            error_code=ErrorCode.NONE,
            name=topic.name,
            topic_id=topic.topic_id,
            is_internal=topic.internal,
            partitions=_partitions(m.MetadataResponsePartition, topic, node),
            topic_authorized_operations=operations_bitfield(
                ctx, TOPIC, topic.name, TOPIC_OPERATIONS_ALL
            )
            if include_topic_ops
            else AUTHORIZED_OPERATIONS_OMITTED,
        )

    def missing(error: ErrorCode, name: str | None, topic_id: uuid.UUID = ZERO_UUID) -> Any:
        return build(
            m.MetadataResponseTopic,
            error_code=error,
            name=name,
            topic_id=topic_id,
            is_internal=False,
            partitions=(),
            topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )

    requested = body.topics
    all_topics = requested is None or (version == 0 and not requested)
    if not all_topics and version in (10, 11) and any(_by_id(t) for t in requested):
        # Kafka (KafkaApis.handleTopicMetadataRequest) throws InvalidRequestException and
        # answers MetadataRequest.getErrorResponse: a null name (not allowed in the response
        # before v12) answered as "".
        return build(
            m.MetadataResponse,
            brokers=(),
            cluster_id=None,
            controller_id=-1,
            topics=tuple(
                missing(ErrorCode.INVALID_REQUEST, t.name or "", t.topic_id) for t in requested
            ),
            cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )
    topics: list[Any] = []
    # Topics refused by the authorizer: Kafka lists them after the others.
    refused: list[Any] = []
    if all_topics:
        listed = sorted(ctx.topics.listed_topics(), key=lambda t: t.name)
        if enabled:  # Kafka's: topics it may not DESCRIBE are left out, silently
            listed = [t for t in listed if visible(ctx, DESCRIBE, TOPIC, t.name)]
        topics = [found(t) for t in listed]
    else:
        allow_auto = getattr(body, "allow_auto_topic_creation", True)
        seen: set[object] = set()
        for wanted in requested:
            name = wanted.name
            topic_id = getattr(wanted, "topic_id", None)
            key: object = name if name is not None else topic_id
            if key in seen:  # Kafka answers each distinct topic once
                continue
            seen.add(key)
            if name is None:
                if topic_id is None or topic_id == ZERO_UUID:
                    topics.append(missing(ErrorCode.INVALID_REQUEST, None))
                    continue
                topic = ctx.topics.get_by_id(topic_id)
                if topic is None:  # Kafka's: topic ids are not secret
                    topics.append(missing(ErrorCode.UNKNOWN_TOPIC_ID, None, topic_id))
                elif enabled and not allowed(ctx, ApiKey.METADATA, DESCRIBE, TOPIC, topic.name):
                    refused.append(missing(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, topic_id))
                else:
                    topics.append(found(topic))
                continue
            if enabled and not allowed(ctx, ApiKey.METADATA, DESCRIBE, TOPIC, name):
                # Before existence: no leak of which names exist.
                refused.append(missing(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name))
                continue
            topic = ctx.topics.get(name)
            if topic is not None:
                topics.append(found(topic))
                continue
            if (
                enabled
                and allow_auto
                and ctx.settings.auto_create_topics
                and name not in INTERNAL_TOPIC_NAMES
                and not visible(ctx, CREATE, CLUSTER, CLUSTER_NAME)
                and not allowed(ctx, ApiKey.METADATA, CREATE, TOPIC, name)
            ):
                # Kafka's: auto-creation needs CREATE on the cluster or on the topic.
                topics.append(missing(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name))
                continue
            error, topic = _unknown_topic(ctx, name, allow_auto)
            topics.append(found(topic) if topic is not None else missing(error, name))

    brokers = tuple(
        build(m.MetadataResponseBroker, node_id=node_id, host=host, port=port, rack=None)
        for node_id, host, port in brokers_of(node)
    )
    return build(
        m.MetadataResponse,
        brokers=brokers,
        cluster_id=node.cluster_id,
        controller_id=node.node_id,
        topics=tuple(topics + refused),
        cluster_authorized_operations=cluster_ops,
    )


def _by_id(wanted: Any) -> bool:
    """A requested topic named by id (v10+), or with no name at all."""
    return wanted.name is None or wanted.topic_id not in (None, ZERO_UUID)


def _unknown_topic(
    ctx: TopicsContext, name: str, allow_auto: bool
) -> tuple[ErrorCode, Topic | None]:
    """Auto-create `name` if allowed; else the error Kafka gives for an unknown topic."""
    try:
        check_topic_name(name)
    except TopicError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, None
    if name in INTERNAL_TOPIC_NAMES:
        # Never a data topic: the coordinators' shard logs. Kafka's AutoTopicCreationManager
        # creates an internal topic when a Metadata request allowing auto-creation names it
        # (whatever auto.create.topics.enable says): listed from then on.
        if allow_auto:
            ctx.topics.mark_internal_created(name)
            topic = ctx.topics.get(name)
            if topic is not None:
                return ErrorCode.NONE, topic
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    if not (allow_auto and ctx.settings.auto_create_topics):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    hook = ctx.topics.auto_create_hook
    if hook is not None and not hook(name, ctx.settings.default_partitions):
        # serve --workers: the first worker creates it for all; the client asks again.
        return ErrorCode.LEADER_NOT_AVAILABLE, None
    try:
        topic = ctx.topics.create(name, ctx.settings.default_partitions, {})
    except TopicError as e:
        return ErrorCode(e.code), None
    except OSError as e:
        log.error("auto-create failed", topic=name, error=str(e))
        return ErrorCode.LEADER_NOT_AVAILABLE, None
    log.info("auto-created topic", topic=name, partitions=len(topic.partitions))
    return ErrorCode.NONE, topic


# DescribeCluster ----------------------------------------------------------------------------


def handle_describe_cluster(ctx: TopicsContext, request: Request) -> Any:
    """Emits the cluster id, this node as controller and only broker, endpoint type BROKER.
    Errors: MISMATCHED_ENDPOINT_TYPE (v1, endpoint type CONTROLLER: this is a broker
    endpoint), UNSUPPORTED_ENDPOINT_TYPE (v1, any other unknown type); INVALID_REQUEST for
    both at v0 -- as Kafka's AuthHelper.computeDescribeClusterResponse does."""
    node = ctx.node
    version = request.api_version
    body = request.body
    m = response_types(ApiKey.DESCRIBE_CLUSTER, version)
    endpoint_type = getattr(body, "endpoint_type", ENDPOINT_BROKER)
    if endpoint_type != ENDPOINT_BROKER:
        if endpoint_type in _ENDPOINT_NAMES:
            code: IntEnum = EndpointError.MISMATCHED_ENDPOINT_TYPE
            message = (
                f"The request was sent to an endpoint of type BROKER, but we wanted an "
                f"endpoint of type {_ENDPOINT_NAMES[endpoint_type]}"
            )
        else:
            code = EndpointError.UNSUPPORTED_ENDPOINT_TYPE
            message = f"Unsupported endpoint type {endpoint_type}"
        return build(
            m.DescribeClusterResponse,
            error_code=ErrorCode.INVALID_REQUEST if version == 0 else code,
            error_message=message,
            endpoint_type=ENDPOINT_BROKER,
            cluster_id="",
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )
    cluster_ops = (
        cluster_operations_bitfield(ctx, CLUSTER_OPERATIONS_ALL)
        if body.include_cluster_authorized_operations
        else AUTHORIZED_OPERATIONS_OMITTED
    )
    brokers = tuple(
        build(m.DescribeClusterBroker, broker_id=node_id, host=host, port=port, rack=None)
        for node_id, host, port in brokers_of(node)
    )
    return build(
        m.DescribeClusterResponse,
        error_code=ErrorCode.NONE,
        error_message=None,
        endpoint_type=ENDPOINT_BROKER,
        cluster_id=node.cluster_id,
        controller_id=node.node_id,
        brokers=brokers,
        cluster_authorized_operations=cluster_ops,
    )


# DescribeTopicPartitions --------------------------------------------------------------------


def handle_describe_topic_partitions(ctx: TopicsContext, request: Request) -> Any:
    """Emits the requested topics (none requested = every topic) at or after the cursor, in
    name order, with at most response_partition_limit partitions (capped to 1..2000) in all;
    next_cursor names the first partition left out, or is null when nothing was. Paginates
    exactly as Kafka's DescribeTopicPartitionsRequestHandler: the cursor's partition index
    applies to the cursor topic only, and a topic reached once the limit is used up starts
    the next page at its partition 0. Eligible leader replicas and last known ELR are always
    empty arrays (never null: the Java Admin client cannot parse null).
    Errors per topic: UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION (illegal name);
    INVALID_REQUEST for every requested topic when the cursor is invalid (its topic is not
    among those requested, or its partition index is negative); with an authorizer
    TOPIC_AUTHORIZATION_FAILED for a requested topic it may not DESCRIBE (left out of an
    all-topics answer)."""
    node = ctx.node
    body = request.body
    m = response_types(ApiKey.DESCRIBE_TOPIC_PARTITIONS, request.api_version)
    cursor = body.cursor
    cursor_name = cursor.topic_name if cursor is not None else ""
    fetch_all = not body.topics

    def invalid(message: str) -> Any:
        log.info("invalid DescribeTopicPartitions request", reason=message)
        return build(
            m.DescribeTopicPartitionsResponse,
            next_cursor=None,
            topics=tuple(
                build(
                    m.DescribeTopicPartitionsResponseTopic,
                    error_code=ErrorCode.INVALID_REQUEST,
                    name=t.name,
                    topic_id=ZERO_UUID,
                    is_internal=False,
                    partitions=(),
                )
                for t in body.topics
            ),
        )

    enabled = ctx.authorizer.enabled
    if fetch_all:
        names = {t.name for t in ctx.topics.listed_topics() if t.name >= cursor_name}
        if enabled:  # Kafka's: topics it may not DESCRIBE are left out, silently
            names = {n for n in names if visible(ctx, DESCRIBE, TOPIC, n)}
    else:
        names = {t.name for t in body.topics if t.name >= cursor_name}
        if cursor is not None and cursor.topic_name not in names:
            return invalid(
                "DescribeTopicPartitionsRequest topic list should contain the cursor "
                f"topic: {cursor.topic_name}"
            )
    if cursor is not None and cursor.partition_index < 0:
        return invalid(f"DescribeTopicPartitionsRequest cursor partition must be valid: {cursor}")

    remaining = max(min(DESCRIBE_TOPIC_PARTITIONS_LIMIT_MAX, body.response_partition_limit), 1)
    results: list[Any] = []
    next_cursor = None
    for name in sorted(names):
        if remaining <= 0:
            # Everything before this topic fitted exactly: the next page starts here.
            next_cursor = build(m.Cursor, topic_name=name, partition_index=0)
            break
        if (
            enabled
            and not fetch_all
            and not allowed(ctx, ApiKey.DESCRIBE_TOPIC_PARTITIONS, DESCRIBE, TOPIC, name)
        ):
            results.append(
                build(
                    m.DescribeTopicPartitionsResponseTopic,
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    name=name,
                    topic_id=ZERO_UUID,
                    is_internal=False,
                    partitions=(),
                )
            )
            continue
        topic = ctx.topics.get(name)
        if topic is None:
            if not fetch_all:  # topics gone since the listing are skipped silently
                try:
                    check_topic_name(name)
                    error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                except TopicError:
                    error = ErrorCode.INVALID_TOPIC_EXCEPTION
                results.append(
                    build(
                        m.DescribeTopicPartitionsResponseTopic,
                        error_code=error,
                        name=name,
                        topic_id=ZERO_UUID,
                        is_internal=False,
                        partitions=(),
                    )
                )
            continue
        count = len(topic.partitions)
        start = cursor.partition_index if cursor is not None and name == cursor_name else 0
        start = min(start, count)
        stop = min(count, start + remaining)
        partitions = _partitions(
            m.DescribeTopicPartitionsResponsePartition,
            topic,
            node,
            start,
            stop,
            eligible_leader_replicas=(),
            last_known_elr=(),
        )
        results.append(
            build(
                m.DescribeTopicPartitionsResponseTopic,
                error_code=ErrorCode.NONE,
                name=name,
                topic_id=topic.topic_id,
                is_internal=topic.internal,
                partitions=partitions,
                # Kafka always fills it; without an authorizer ours never did.
                topic_authorized_operations=operations_bitfield(
                    ctx, TOPIC, name, TOPIC_OPERATIONS_ALL
                )
                if enabled
                else AUTHORIZED_OPERATIONS_OMITTED,
            )
        )
        if stop < count:
            next_cursor = build(m.Cursor, topic_name=name, partition_index=stop)
            break
        remaining -= len(partitions)
    return build(m.DescribeTopicPartitionsResponse, topics=tuple(results), next_cursor=next_cursor)
