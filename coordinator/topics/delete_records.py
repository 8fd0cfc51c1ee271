"""DeleteRecords v0-v2 (KIP-107; `kafka-delete-records.sh`, AdminClient.deleteRecords):
move partitions' log start offsets forward, as Kafka's ReplicaManager.deleteRecords and
UnifiedLog.maybeIncrementLogStartOffset do.

Emits per partition the low watermark, the log start offset once moved: the requested
offset (-1: the high watermark), or the log start already there when that is higher (it
never moves backwards). A local log persists the new start (its log-start-offset file,
fsynced) before the answer, so it survives a crash, and deletes the segments wholly below
it (storage/log.py's advance_log_start_offset); Fetch below it then gets
OFFSET_OUT_OF_RANGE and ListOffsets EARLIEST answers it. serve --cluster: a partition
stored in PostgreSQL moves its start row and deletes the batches below it in one
transaction under its lease (cluster/partition_store.py's delete_records). With one
replica there is nothing to wait for: the answer is immediate whatever timeout_ms says
(Kafka waits in purgatory only while a follower's log start lags).

Errors per partition, in Kafka's order: TOPIC_AUTHORIZATION_FAILED (DELETE on the topic),
UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION (an internal topic:
__consumer_offsets, __transaction_state), NOT_LEADER_OR_FOLLOWER (another worker or node
leads it, or its lease moved), POLICY_VIOLATION (cleanup.policy without `delete`),
OFFSET_OUT_OF_RANGE (below -1, or above the high watermark), KAFKA_STORAGE_ERROR (the
log failed or the write did); the low watermark is -1 with any error.
"""

from __future__ import annotations

import datetime
from typing import Any

import structlog

from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode
from groupcoord.storage import OffsetOutOfRange, StorageError
from groupcoord.storage.errors import PartitionFenced

from .access import DELETE, TOPIC, allowed
from .cleanup_policy import DELETE as DELETE_POLICY
from .cleanup_policy import policy_items
from .context import TopicsContext
from .registry import Partition

log = structlog.get_logger(__name__)

HIGH_WATERMARK = -1  # DeleteRecordsRequest.HIGH_WATERMARK: up to the high watermark
INVALID_LOW_WATERMARK = -1  # DeleteRecordsResponse.INVALID_LOW_WATERMARK

# (partition index, low watermark, error code): one partition's answer.
_Answer = tuple[int, int, ErrorCode]
# A partition stored in PostgreSQL, to move with an await: (its slot in the answers,
# the partition, the offset to move its start to).
_Stored = tuple[list[_Answer], int, Partition, int]


def handle_delete_records(ctx: TopicsContext, request: Request) -> Any:
    """See the module docstring. A coroutine when a partition is stored in PostgreSQL."""
    answers: list[tuple[str, list[_Answer]]] = []
    stored: list[_Stored] = []
    enabled = ctx.authorizer.enabled
    for wanted in request.body.topics:
        denied = enabled and not allowed(ctx, ApiKey.DELETE_RECORDS, DELETE, TOPIC, wanted.name)
        topic = ctx.topics.get(wanted.name)
        delete_allowed = topic is not None and DELETE_POLICY in policy_items(
            topic.config_value("cleanup.policy", ctx.topics.config)
        )
        partitions: list[_Answer] = []
        for wp in wanted.partitions:
            index = wp.partition_index
            if denied:
                error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or not 0 <= index < len(topic.partitions):
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif topic.internal:
                error = ErrorCode.INVALID_TOPIC_EXCEPTION
            elif not topic.partitions[index].led:
                error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif not delete_allowed:
                error = ErrorCode.POLICY_VIOLATION
            else:
                partition = topic.partitions[index]
                offset = partition.high_watermark if wp.offset == HIGH_WATERMARK else wp.offset
                if offset < 0 or offset > partition.high_watermark:
                    error = ErrorCode.OFFSET_OUT_OF_RANGE
                elif getattr(partition.log, "store", None) is not None:
                    stored.append((partitions, len(partitions), partition, offset))
                    partitions.append((index, INVALID_LOW_WATERMARK, ErrorCode.NONE))
                    continue
                else:
                    partitions.append(_delete_local(partition, offset))
                    continue
            partitions.append((index, INVALID_LOW_WATERMARK, error))
        answers.append((wanted.name, partitions))
    if stored:
        return _delete_stored(request.api_version, answers, stored)
    return _response(request.api_version, answers)


def _delete_local(partition: Partition, offset: int) -> _Answer:
    """Move a local log's start to `offset` (never backwards), durably."""
    log_ = partition.log
    try:
        log_.advance_log_start_offset(offset)
    except OffsetOutOfRange:  # past the log end: the high watermark checked above
        return partition.index, INVALID_LOW_WATERMARK, ErrorCode.OFFSET_OUT_OF_RANGE
    except (OSError, StorageError) as e:  # LogFailed / LogClosed, or the write failed
        log.error(
            "delete records failed",
            topic=partition.topic.name,
            partition=partition.index,
            error=str(e),
        )
        return partition.index, INVALID_LOW_WATERMARK, ErrorCode.KAFKA_STORAGE_ERROR
    start = log_.log_start_offset
    # Aborted-transaction entries wholly below the new start go, as retention's do.
    partition.producers.forget_below(start)
    return partition.index, start, ErrorCode.NONE


async def _delete_stored(
    version: int, answers: list[tuple[str, list[_Answer]]], stored: list[_Stored]
) -> Any:
    """serve --cluster: the partitions stored in PostgreSQL, one transaction each."""
    for slot, position, partition, offset in stored:
        log_: Any = partition.log
        index = partition.index
        try:
            start = await log_.store.delete_records(log_, offset)
        except PartitionFenced:  # the lease moved: the new owner answers
            slot[position] = (index, INVALID_LOW_WATERMARK, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            continue
        except OffsetOutOfRange:
            slot[position] = (index, INVALID_LOW_WATERMARK, ErrorCode.OFFSET_OUT_OF_RANGE)
            continue
        except Exception as e:  # the database away
            log.error(
                "delete records failed",
                topic=partition.topic.name,
                partition=index,
                error=repr(e),
            )
            slot[position] = (index, INVALID_LOW_WATERMARK, ErrorCode.KAFKA_STORAGE_ERROR)
            continue
        partition.producers.forget_below(start)
        slot[position] = (index, start, ErrorCode.NONE)
    return _response(version, answers)


def _response(version: int, answers: list[tuple[str, list[_Answer]]]) -> Any:
    m = response_types(ApiKey.DELETE_RECORDS, version)
    return build(
        m.DeleteRecordsResponse,
        throttle_time=datetime.timedelta(0),
        topics=tuple(
            build(
                m.DeleteRecordsTopicResult,
                name=name,
                partitions=tuple(
                    build(
                        m.DeleteRecordsPartitionResult,
                        partition_index=index,
                        low_watermark=low_watermark,
                        error_code=error,
                    )
                    for index, low_watermark, error in partitions
                ),
            )
            for name, partitions in answers
        ),
    )
