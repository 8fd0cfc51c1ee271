"""ListOffsets v1-v9.

Emits per partition: timestamp -2 -> the log start offset; -1 -> the high watermark (last
offset + 1, never the last batch's base offset + 1); -3 (v7+) -> the offset and timestamp
of the record with the largest timestamp; -4 (v8+, earliest local) -> the log start offset;
-5 (v9+, latest tiered) -> -1 (nothing is tiered); a timestamp -> the first offset whose
record timestamp is at least it, else offset -1 with timestamp -1 (and leader epoch -1;
every offset found is of leader epoch 0). A record of a batch
stamped LogAppendTime has the batch's append time as its timestamp. read_committed readers
(isolation_level 1, v2+) get the last stable offset for -1, and the lookups by timestamp
find nothing at or past it (Kafka's fetchOffsetForTimestamp).
Errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (an internal topic's shard log
is not open yet: retriable).
"""

from __future__ import annotations

from typing import Any

from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode
from groupcoord.storage import LEADER_EPOCH
from groupcoord.storage.errors import NotInMemory

from .access import DESCRIBE, TOPIC, allowed
from .context import TopicsContext
from .registry import Partition

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5


class _NotAsked:
    """The type of NOT_ASKED."""

    def __repr__(self) -> str:
        return "NOT_ASKED"


# `lookup`'s `stored` before the database was asked (None is an answer: nothing found).
NOT_ASKED = _NotAsked()


def lookup(
    partition: Partition,
    timestamp: int,
    read_committed: bool = False,
    stored: tuple[int, int] | None | _NotAsked = NOT_ASKED,
) -> tuple[int, int]:
    """(timestamp, offset) answering a ListOffsets query for one partition; offsets at or
    past the last stable offset are not found for `read_committed`, as Kafka's
    fetchOffsetForTimestamp bounds them. serve --cluster: a lookup by timestamp of a
    partition in PostgreSQL raises NotInMemory; `stored` is then what `lookup_stored`
    found (NOT_ASKED: the database was not asked yet)."""
    log = partition.log
    bound = partition.last_stable_offset if read_committed else partition.high_watermark
    if timestamp == LATEST:
        return -1, bound
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, log.log_start_offset
    if timestamp == LATEST_TIERED:
        return -1, -1
    found: tuple[int, int] | None
    if not isinstance(stored, _NotAsked):
        found = stored
    elif timestamp == MAX_TIMESTAMP:
        found = log.max_timestamp()
    else:
        found = log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= bound:
        return -1, -1
    offset, ts = found
    return ts, offset


async def lookup_stored(partition: Partition, timestamp: int) -> tuple[int, int] | None:
    """The lookup by timestamp `lookup` refused with NotInMemory, read from the database."""
    log: Any = partition.log
    if timestamp == MAX_TIMESTAMP:
        found: tuple[int, int] | None = await log.max_timestamp_stored()
    else:
        found = await log.offset_for_timestamp_stored(timestamp)
    return found


def handle_list_offsets(ctx: TopicsContext, request: Request) -> Any:
    try:
        return _list_offsets(ctx, request, None)
    except _LookupStored:
        return _list_offsets_stored(ctx, request)


class _LookupStored(Exception):
    """serve --cluster: some lookups read the database (NotInMemory)."""


async def _list_offsets_stored(ctx: TopicsContext, request: Request) -> Any:
    """handle_list_offsets once the lookups by timestamp were read from the database."""
    stored: dict[tuple[str, int, int], tuple[int, int] | None] = {}
    for list_topic in request.body.topics:
        topic = ctx.topics.get(list_topic.name)
        for lp in list_topic.partitions:
            index = lp.partition_index
            if topic is None or not 0 <= index < len(topic.partitions):
                continue
            partition = topic.partitions[index]
            if hasattr(partition.log, "max_timestamp_stored") and (
                lp.timestamp == MAX_TIMESTAMP or lp.timestamp >= 0
            ):
                found = await lookup_stored(partition, lp.timestamp)
                stored[(list_topic.name, index, lp.timestamp)] = found
    return _list_offsets(ctx, request, stored)


def _list_offsets(
    ctx: TopicsContext,
    request: Request,
    stored: dict[tuple[str, int, int], tuple[int, int] | None] | None,
) -> Any:
    """The response; raises _LookupStored when a lookup by timestamp needs the database
    and `stored` (read by _list_offsets_stored) lacks it."""
    version = request.api_version
    m = response_types(ApiKey.LIST_OFFSETS, version)
    topics = []
    # isolation_level exists from v2 on; v1 reads uncommitted.
    read_committed = getattr(request.body, "isolation_level", 0) == 1
    enabled = ctx.authorizer.enabled
    for list_topic in request.body.topics:
        topic = ctx.topics.get(list_topic.name)
        denied = enabled and not allowed(ctx, ApiKey.LIST_OFFSETS, DESCRIBE, TOPIC, list_topic.name)
        partitions = []
        for lp in list_topic.partitions:
            index = lp.partition_index
            if denied:
                error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or not 0 <= index < len(topic.partitions):
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif topic.partitions[index].log is None or not topic.partitions[index].led:
                # an internal topic's shard not open, or another worker leads it
                error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                error = ErrorCode.NONE
            if error != ErrorCode.NONE:
                partitions.append(
                    build(
                        m.ListOffsetsPartitionResponse,
                        partition_index=index,
                        error_code=error,
                        timestamp=-1,
                        offset=-1,
                        leader_epoch=-1,
                    )
                )
                continue
            key = (list_topic.name, index, lp.timestamp)
            try:
                ts, offset = lookup(
                    topic.partitions[index],
                    lp.timestamp,
                    read_committed,
                    stored[key] if stored is not None and key in stored else NOT_ASKED,
                )
            except NotInMemory:
                raise _LookupStored from None
            partitions.append(
                build(
                    m.ListOffsetsPartitionResponse,
                    partition_index=index,
                    error_code=ErrorCode.NONE,
                    timestamp=ts,
                    offset=offset,
                    # The leader epoch of the offset found; -1 with no offset, as Kafka.
                    leader_epoch=-1 if offset < 0 else LEADER_EPOCH,
                )
            )
        topics.append(
            build(m.ListOffsetsTopicResponse, name=list_topic.name, partitions=tuple(partitions))
        )
    return build(m.ListOffsetsResponse, topics=tuple(topics))
