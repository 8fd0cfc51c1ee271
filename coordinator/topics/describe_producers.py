"""DescribeProducers v0 (KIP-664): the producers a partition knows, from its producer state
(producers.py), as Kafka answers from the local log.

Emits per partition each producer's id, epoch, last sequence (-1 when no data batch of its
current epoch is known), last timestamp, coordinator epoch (-1 until a marker is seen) and
the first offset of its open transaction (-1 when none is open).
Errors per partition: UNKNOWN_TOPIC_OR_PARTITION (with Kafka's message when the topic is
unknown), NOT_LEADER_OR_FOLLOWER (serve --workers: another worker leads it).
"""

from __future__ import annotations

import datetime
from typing import Any

from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode

from .access import READ, TOPIC, allowed
from .context import TopicsContext

_UNKNOWN_TOPIC = "This server does not host this topic-partition."


def handle_describe_producers(ctx: TopicsContext, request: Request) -> Any:
    """See the module docstring."""
    m = response_types(ApiKey.DESCRIBE_PRODUCERS, request.api_version)
    topics = []
    enabled = ctx.authorizer.enabled
    for wanted in request.body.topics:
        partitions = []
        denied = enabled and not allowed(ctx, ApiKey.DESCRIBE_PRODUCERS, READ, TOPIC, wanted.name)
        for index in wanted.partition_indexes:
            if denied:  # Kafka's: READ on the topic, before existence
                partitions.append(
                    build(
                        m.PartitionResponse,
                        partition_index=index,
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        error_message=None,
                        active_producers=(),
                    )
                )
                continue
            partition = ctx.topics.partition(wanted.name, index)
            if partition is None:
                partitions.append(
                    build(
                        m.PartitionResponse,
                        partition_index=index,
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        # Kafka: the error's text for an unknown topic, none for an unknown
                        # partition of a known one (the replica manager's answer).
                        error_message=_UNKNOWN_TOPIC
                        if ctx.topics.get(wanted.name) is None
                        else None,
                        active_producers=(),
                    )
                )
                continue
            if not partition.led:  # serve --workers: the leader answers
                partitions.append(
                    build(
                        m.PartitionResponse,
                        partition_index=index,
                        error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                        error_message=None,
                        active_producers=(),
                    )
                )
                continue
            producers = tuple(
                build(
                    m.ProducerState,
                    producer_id=producer_id,
                    producer_epoch=state.epoch,
                    last_sequence=state.last_sequence,
                    last_timestamp=state.last_timestamp,
                    coordinator_epoch=state.coordinator_epoch,
                    current_txn_start_offset=state.txn_first_offset,
                )
                for producer_id, state in partition.producers.describe()
            )
            partitions.append(
                build(
                    m.PartitionResponse,
                    partition_index=index,
                    error_code=ErrorCode.NONE,
                    error_message=None,
                    active_producers=producers,
                )
            )
        topics.append(build(m.TopicResponse, name=wanted.name, partitions=tuple(partitions)))
    return build(
        m.DescribeProducersResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics)
    )
