"""WriteTxnMarkers v1-v2 (Kafka 4.4 serves v1-v2: v0 was removed in 4.0): the transaction
markers a transaction coordinator (or an admin's "abort hanging transaction") sends to a
partition leader.

Emits: for a data partition, a control batch appended through topics/txn_markers.py
(every marker of the request appended first, then waited for together: one fsync round);
for a `__consumer_offsets` partition (the group coordinator's shard of that index), the
gateway's complete_transaction, which commits or drops the producer's pending offsets.
Answers per producer id, topic and partition, once everything is durable.
Errors per partition: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH,
TRANSACTION_COORDINATOR_FENCED, KAFKA_STORAGE_ERROR; for `__consumer_offsets`,
NOT_LEADER_OR_FOLLOWER where the shard answers NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE (as Kafka's KafkaApis, so the
coordinator retries).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode

from ..runtime.partitioning import OFFSETS_TOPIC
from ..security.acl_model import CLUSTER_NAME
from ..topics.access import ALTER, CLUSTER, CLUSTER_ACTION, allowed_cluster, visible
from ..topics.txn_markers import MarkerAppended, append_txn_marker, await_marker
from .context import GroupContext

_RETRIABLE_AT_SHARD = frozenset(
    (
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
    )
)

# (producer id, topic, partition, what it waits for or its answer)
_Slot = tuple[int, str, int, "MarkerAppended | Awaitable[ErrorCode] | ErrorCode"]


def handle_write_txn_markers(ctx: GroupContext, request: Request) -> Any:
    """See the module docstring."""
    if ctx.authorizer.enabled and not (
        visible(ctx, ALTER, CLUSTER, CLUSTER_NAME)
        or allowed_cluster(ctx, ApiKey.WRITE_TXN_MARKERS, CLUSTER_ACTION)
    ):
        # Kafka's: broker-to-broker, ALTER or CLUSTER_ACTION on the cluster, whole request.
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return _response(
            request,
            [
                (marker.producer_id, topic.name, index, denied)
                for marker in request.body.markers
                for topic in marker.topics
                for index in topic.partition_indexes
            ],
        )
    slots: list[_Slot] = []
    for marker in request.body.markers:
        version = int(getattr(marker, "transaction_version", 0))
        for topic in marker.topics:
            for index in topic.partition_indexes:
                outcome: MarkerAppended | Awaitable[ErrorCode] | ErrorCode
                if topic.name == OFFSETS_TOPIC:
                    outcome = ctx.groups.complete_transaction(
                        index,
                        marker.producer_id,
                        marker.producer_epoch,
                        marker.transaction_result,
                        transaction_version=version,
                    )
                else:
                    outcome = append_txn_marker(
                        ctx,
                        topic.name,
                        index,
                        marker.producer_id,
                        marker.producer_epoch,
                        marker.coordinator_epoch,
                        marker.transaction_result,
                        version,
                    )
                slots.append((marker.producer_id, topic.name, index, outcome))
    return _answer(ctx, request, slots)


async def _answer(ctx: GroupContext, request: Request, slots: list[_Slot]) -> Any:
    # Awaited one after the other: one fsync round covers every data partition's marker.
    results: list[tuple[int, str, int, ErrorCode]] = []
    for producer_id, topic, index, outcome in slots:
        if isinstance(outcome, ErrorCode):
            error = outcome
        elif isinstance(outcome, MarkerAppended):
            error = await await_marker(ctx, outcome)
        else:
            error = ErrorCode(await outcome)
            if error in _RETRIABLE_AT_SHARD:
                error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        results.append((producer_id, topic, index, error))
    return _response(request, results)


def _response(request: Request, results: list[tuple[int, str, int, ErrorCode]]) -> Any:
    m = response_types(ApiKey.WRITE_TXN_MARKERS, request.api_version)
    # Grouped by producer id, then topic, in request order (Kafka's response).
    by_producer: dict[int, dict[str, list[Any]]] = {}
    for producer_id, topic, index, error in results:
        partitions = by_producer.setdefault(producer_id, {}).setdefault(topic, [])
        partitions.append(
            build(m.WritableTxnMarkerPartitionResult, partition_index=index, error_code=error)
        )
    markers = tuple(
        build(
            m.WritableTxnMarkerResult,
            producer_id=producer_id,
            topics=tuple(
                build(m.WritableTxnMarkerTopicResult, name=name, partitions=tuple(partitions))
                for name, partitions in topics.items()
            ),
        )
        for producer_id, topics in by_producer.items()
    )
    return build(m.WriteTxnMarkersResponse, markers=markers)
